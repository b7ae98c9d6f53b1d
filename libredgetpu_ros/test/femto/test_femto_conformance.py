"""Every public femtorun 4.1.2 fixture reproduced: traces step by step, load verdicts, spec properties."""

from __future__ import annotations

import json

import pytest
from libredgetpu_ros.errors import IOSpecError, SpuSequenceError
from libredgetpu_ros.femto import SequenceEngine, load_iospec, parse_iospec
from libredgetpu_ros.femto.traces import replay_trace

CASES = ["single_io_fmot16", "add_bc_api", "latched_one_fmot", "latched_two_api", "multi_output_fmot8",
         "padding_mixed_api", "complex_every2", "femtofile_roundtrip", "legacy_padding", "two_signatures_api"]


def _traces(fixture_path, case: str) -> dict:
    return json.loads(fixture_path(f"femto/{case}_traces.json").read_text())


def test_every_manifest_case_is_covered(fixture_path) -> None:
    manifest = json.loads(fixture_path("femto/MANIFEST.json").read_text())
    assert sorted(manifest) == sorted(CASES)


def _compare(ours: dict, theirs: dict) -> list[str]:
    """Differences between our replay and femtorun's record (empty when conformant)."""
    diffs = []
    for key in ("outcome", "all_named_recvs_ready"):
        if ours[key] != theirs[key]:
            diffs.append(f"{key}: {ours[key]} != {theirs[key]}")
    if theirs["error"]:
        for key in ("event_index", "type", "message"):
            if (ours["error"] or {}).get(key) != theirs["error"][key]:
                diffs.append(f"error.{key}: {(ours['error'] or {}).get(key)!r} != {theirs['error'][key]!r}")
    if len(ours["steps"]) != len(theirs["steps"]):
        diffs.append(f"{len(ours['steps'])} steps != {len(theirs['steps'])}")
    for a, b in zip(ours["steps"], theirs["steps"], strict=False):
        for key in ("index", "result", "returned", "ready"):
            if a.get(key) != b.get(key):
                diffs.append(f"step {b['index']} {key}: {a.get(key)!r} != {b.get(key)!r}")
        if b["result"] == "error" and (a["error"]["type"], a["error"]["message"]) != (
                b["error"]["type"], b["error"]["message"]):
            diffs.append(f"step {b['index']} error {a['error']} != {b['error']}")
    return diffs


@pytest.mark.parametrize("case", CASES)
def test_traces_reproduced_step_by_step(fixture_path, case: str) -> None:
    doc = _traces(fixture_path, case)
    engine = SequenceEngine(load_iospec(fixture_path(f"femto/{doc['yaml']}")))
    checked = 0
    for trace in doc["traces"]:
        if trace["mode"] != "stop_at_first_error":
            continue  # optional ones: test_continue_after_error_traces
        assert _compare(replay_trace(engine, trace), trace) == [], trace["name"]
        checked += 1
    assert checked >= 8


def test_continue_after_error_traces(fixture_path) -> None:
    """The optional traces (femtorun's state after an exception: no rollback) also match, reported apart."""
    names = []
    for case in CASES:
        doc = _traces(fixture_path, case)
        engine = SequenceEngine(load_iospec(fixture_path(f"femto/{doc['yaml']}")))
        for trace in doc["traces"]:
            if trace["mode"] == "continue_after_error":
                assert _compare(replay_trace(engine, trace), trace) == [], trace["name"]
                names.append(f"{case}/{trace['name']}")
    assert len(names) == 3, names  # the public split holds 3 of the README's 5


@pytest.mark.parametrize("case", CASES)
def test_spec_properties(fixture_path, case: str) -> None:
    doc = _traces(fixture_path, case)
    props = doc["spec_properties"]
    spec = load_iospec(fixture_path(f"femto/{doc['yaml']}"))
    assert spec.is_simple == props["is_simple"]
    assert spec.simple_action == props["simple_action"]
    assert spec.simple_outputs == props["simple_outputs"]
    assert [str(k) for k in spec.latched_input_names()] == props["latched_input_names_sorted"]
    assert {v.name: v.key for v in (spec.inputs | spec.outputs).values()} == {
        v: k for k, v in props["node_to_var"].items()}
    assert [(n, type(n).__name__) for n in spec.graph.nodes] == [
        (n["node"], n["node_type"]) for n in props["graph_nodes"]]
    edges = [{"from": spec.graph.nodes[u], "to": spec.graph.nodes[v], "frequency": f}
             for (u, v), f in zip(spec.graph.edges, spec.graph.frequency, strict=True)]
    key = lambda e: (str(e["from"]), str(e["to"]))  # noqa: E731
    assert sorted(edges, key=key) == sorted(props["graph_edges"], key=key)
    for attr in ("input_padding", "output_padding"):
        padding = getattr(spec, attr).items()
        got = {k: {"length_shape": list(a), "padded_shape": list(b)} for k, (a, b) in padding}
        assert got == props[attr]


def test_latched_iospec_is_fmot_latched_config(fixture_path) -> None:
    spec = load_iospec(fixture_path("femto/latched_iospec.yaml"))
    assert spec.latched_input_names() == ["config"]
    assert spec.inputs["config"].latch_hint is True and spec.sequences[1].latched


def test_latch_hint_on_an_input_of_an_output_sequence_is_warned(fixture_path) -> None:
    """``comments.latch: true`` on an input an output-producing sequence reads is a warning naming it; on an
    input of an output-less sequence (the fixture's ``config``) it is what latching means: none."""
    text = fixture_path("femto/latched_iospec.yaml").read_text()
    assert not [w for w in parse_iospec(text, "latched.yaml").warnings if "comments.latch" in w]
    # x, sequence_0's input (it makes output.0), marked latched as well
    marked = text.replace("    comments:\n      latch: false", "    comments:\n      latch: true", 1)
    assert marked != text
    warned = [w for w in parse_iospec(marked, "marked.yaml").warnings if "comments.latch" in w]
    assert warned == ["inputs.x: comments.latch is true but it feeds an output-producing sequence"]


def test_integer_sequence_keys_coexist_with_string_input_keys(fixture_path) -> None:
    spec = load_iospec(fixture_path("femto/femtofile_roundtrip.yaml"))
    assert [s.key for s in spec.sequences] == [0, 1]
    engine = SequenceEngine(spec)
    with pytest.raises(SpuSequenceError) as err:
        engine.send(0)  # the int sequence key is not a varname
    assert err.value.kind == "KeyError" and err.value.femtorun_message == "0"


def test_load_cases(fixture_path) -> None:
    cases = json.loads(fixture_path("femto/spec_load_cases.json").read_text())["cases"]
    assert len(cases) >= 20
    for case in cases:
        if case["outcome"] == "error":
            with pytest.raises(IOSpecError) as err:
                parse_iospec(case["yaml_text"], case["name"])
            assert (err.value.kind, err.value.femtorun_message) == (
                case["error"]["type"], case["error"]["message"]), case["name"]
            assert case["name"] in str(err.value)
            continue
        spec = parse_iospec(case["yaml_text"], case["name"])
        assert spec.is_simple == case["is_simple"], case["name"]
        assert [str(n) for n in spec.graph.nodes] == case["graph_nodes"], case["name"]
        engine = SequenceEngine(spec)
        engine.reset()
        assert {"outcome": "ok", "returned": engine.recv()} == case["probe_reset_recv"], case["name"]


def test_errors_name_key_and_value() -> None:
    text = "inputs:\n  B: {type: input, varname: B, length: '4', precision: 16, padded_length: null}\n"
    with pytest.raises(IOSpecError) as err:
        parse_iospec(text, "spec.yaml")
    message = str(err.value)
    assert "spec.yaml" in message and "inputs.B.length" in message and "'4'" in message
    assert err.value.key == "inputs.B.length" and err.value.value == "4"
    with pytest.raises(IOSpecError, match="not valid YAML"):
        parse_iospec("inputs: [unclosed", "bad.yaml")
