"""Sequence engine beyond femtorun: strict (SPU firmware) rules, atomic sends; the reference runner."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError, SpuSequenceError
from libredgetpu_ros.femto import SequenceEngine, load_iospec
from libredgetpu_ros.femto.reference import MAX_PROGRAM_BYTES, ReferenceRunner
from libredgetpu_ros.femto.runner import open_runner
from libredgetpu_ros.femto.vectors import dequantize, prepare_input


@pytest.fixture
def add_bc(fixture_path):
    return load_iospec(fixture_path("femto/add_bc_api.yaml"))


def test_strict_declared_order_rejected_without_state_change(add_bc) -> None:
    engine = SequenceEngine(add_bc, strict=True)
    before = engine.counts()
    with pytest.raises(SpuSequenceError) as err:
        engine.send("C")
    assert err.value.rule == "declared-order" and err.value.kind == "strict"
    assert "order ['B', 'C']; expected 'B' next, got 'C'" in str(err.value)
    assert engine.counts() == before
    engine.send("B")
    with pytest.raises(SpuSequenceError, match="expected 'C' next, got 'B'"):
        engine.send("B")  # femtorun: RuntimeError after the fact; strict: refused before
    assert engine.send("C") == ["sequence_0"] and engine.recv() == ["A"]


def test_strict_unread_outputs(add_bc) -> None:
    engine = SequenceEngine(add_bc, strict=True)
    engine.send_list(["B", "C"])
    with pytest.raises(SpuSequenceError) as err:
        engine.send("B")  # femtorun accepts B, C, B before A is read; the firmware does not
    assert err.value.rule == "unread-outputs" and "['A']" in str(err.value)
    assert engine.recv() == ["A"]
    engine.send_list(["B", "C"])
    assert engine.recv() == ["A"]


def test_strict_refuses_complex_sequences(fixture_path) -> None:
    with pytest.raises(SpuSequenceError) as err:
        SequenceEngine(load_iospec(fixture_path("femto/complex_every2.yaml")), strict=True)
    assert err.value.rule == "complex-sequence"


def test_strict_latched_any_time(fixture_path) -> None:
    engine = SequenceEngine(load_iospec(fixture_path("femto/latched_two_api.yaml")), strict=True)
    for name in ["latchedC", "latchedD", "latchedC", "B", "latchedD"]:
        engine.send(name)
    assert engine.recv() == ["A"]


def test_atomic_send_restores_counts(add_bc) -> None:
    engine = SequenceEngine(add_bc)
    engine.send("B")
    with pytest.raises(SpuSequenceError) as err:
        engine.send("B", atomic=True)
    assert err.value.kind == "RuntimeError" and err.value.rule == "too-many-inputs"
    engine.send("C")  # not wedged (femtorun-exact mode would be)
    assert engine.recv() == ["A"]


@pytest.mark.parametrize("case", ["add_bc_api", "latched_two_api", "multi_output_fmot8", "padding_mixed_api",
                                  "two_signatures_api", "femtofile_roundtrip"])
def test_strict_accepts_a_subset_of_femtorun(fixture_path, case: str) -> None:
    """Every event strict mode accepts, femtorun accepts too, with the same outputs (1,000 random traces)."""
    spec = load_iospec(fixture_path(f"femto/{case}.yaml"))
    strict, plain = SequenceEngine(spec, strict=True), SequenceEngine(spec)
    names = [v.name for v in spec.inputs.values()]
    rng = random.Random(case)
    accepted = rejected = 0
    for _ in range(1000 // 6):
        strict.reset()
        plain.reset()
        for _ in range(rng.randint(1, 20)):
            if rng.random() < 0.3:
                assert strict.recv() == plain.recv()
                continue
            name = rng.choice(names)
            try:
                fired = strict.send(name)
            except SpuSequenceError as exc:
                assert exc.kind == "strict"
                rejected += 1
                continue
            assert plain.send(name) == fired
            accepted += 1
    assert accepted > 100


def test_seed_latched_example() -> None:
    """The seed's transaction list: latched_C=1, B=1 -> A=2; B=2 -> 3; B=3 -> 4; latched_C=2, B=4 -> 6."""
    config = Path(__file__).resolve().parents[2] / "config"
    spec = load_iospec(config / "spu_add_latched.iospec.yaml")
    runner = open_runner("reference", spec, program=config / "spu_add_latched.program.yaml")
    ins = {v.name: v for v in spec.inputs.values()}
    out = spec.outputs["A"]
    got = []
    for latched, b in [(1, 1), (None, 2), (None, 3), (2, 4)]:
        if latched is not None:
            runner.send("latchedC", prepare_input(np.full(4, float(latched)), ins["latchedC"]))
            assert runner.recv() == {}
        runner.send("B", prepare_input(np.full(4, float(b)), ins["B"]))
        got.append(dequantize(runner.recv()["A"], out).tolist())
    assert got == [[2.0] * 4, [3.0] * 4, [4.0] * 4, [6.0] * 4]
    runner.reset()  # latched inputs are 0 again after reset
    runner.send("B", prepare_input(np.full(4, 1.0), ins["B"]))
    assert dequantize(runner.recv()["A"], out).tolist() == [1.0] * 4


def test_reference_runner_multi_output_matrix(fixture_path) -> None:
    spec = load_iospec(fixture_path("femto/multi_output_fmot8.yaml"))
    rng = np.random.default_rng(0)
    w0, w1 = rng.uniform(-0.5, 0.5, (6, 10)), rng.uniform(-0.5, 0.5, (3, 10))
    program = {"outputs": {"output.0": {"terms": [{"input": "x", "weight": w0.tolist()}], "bias": 0.25},
                           "output.1": {"terms": [{"input": "x", "weight": w1.tolist()}]},
                           "output.2": {"terms": [{"input": "x"}], "activation": "relu"}}}
    runner = ReferenceRunner(spec, program)
    runner.reset()
    x = spec.inputs["x"]
    q = prepare_input(rng.uniform(-2, 2, 10), x)
    runner.send("x", q)
    outs = runner.recv()
    assert list(outs) == ["output.0", "output.1", "output.2"]  # declaration order, like femtorun's recv
    xr = dequantize(q, x)
    for name, want in [("output.0", w0 @ xr + 0.25), ("output.1", w1 @ xr), ("output.2", np.maximum(xr, 0))]:
        vec = spec.output_by_name(name)
        # one output quantum (scale) plus saturation at the int8 range
        np.testing.assert_allclose(dequantize(outs[name], vec), np.clip(want, -4.0, 127 / 32), atol=vec.scale)


@pytest.mark.parametrize(("program", "match"), [
    ({"outputs": {"nope": {}}}, "outputs.nope: not an output"),
    ({"outputs": {"A": {"terms": [{"input": "zz"}]}}}, r"terms\[0\].input.*does not name an input"),
    ({"outputs": {"A": {"terms": [{"input": "B", "weight": [1, 2]}]}}}, r"weight: shape \(2,\)"),
    ({"outputs": {"A": {"terms": [{"input": "B", "weight": float("nan")}]}}}, "NaN or infinity"),
    ({"outputs": {"A": {"bias": "x"}}}, "bias: 'x' is not a number"),
    ({"outputs": {"A": {"activation": "tanh"}}}, "activation: 'tanh'"),
    ({"outputs": {}}, r"no rule for outputs \['A'\]"),
    ([], "expected a mapping"),
])
def test_program_errors_name_key_and_value(add_bc, program, match) -> None:
    with pytest.raises(ConfigError, match=match):
        ReferenceRunner(add_bc, program)


def test_program_over_the_size_limit_is_refused_before_parsing(add_bc, tmp_path: Path) -> None:
    """Before: 16 MiB were accepted, and PyYAML's pure loader (textdata) spends seconds per MiB: one file
    blocked a node's configure for minutes. The densest program add_bc_api allows (every output a float64
    matrix of every input plus a bias) is far below the limit; a file one byte over it is refused by its
    size, which is checked before any parsing (the message says so: the size and the limit)."""
    import yaml

    rng = np.random.default_rng(7)
    dense = {"outputs": {"A": {"terms": [{"input": name, "weight": rng.standard_normal((12, 12)).tolist()}
                                         for name in ("B", "C")],
                               "bias": rng.standard_normal(12).tolist(), "activation": "relu"}}}
    text = yaml.safe_dump(dense).encode()
    assert 16 * len(text) < MAX_PROGRAM_BYTES  # a wide margin over the densest real program
    path = tmp_path / "program.yaml"
    for size in (len(text), MAX_PROGRAM_BYTES):  # a YAML comment fills the file up to the limit
        path.write_bytes(text + b"#" * (size - len(text) - 1) + b"\n" if size > len(text) else text)
        assert path.stat().st_size == size
        ReferenceRunner(add_bc, path).close()
    path.write_bytes(path.read_bytes()[:-1] + b"#\n")  # one byte over
    with pytest.raises(ConfigError) as info:
        ReferenceRunner(add_bc, path)
    assert f"{MAX_PROGRAM_BYTES + 1} bytes is larger than the {MAX_PROGRAM_BYTES} accepted" in str(info.value)
    assert f"at most {MAX_PROGRAM_BYTES >> 10} KiB" in str(info.value)
    docs = Path(__file__).resolve().parents[3] / "docs" / "femto.md"
    assert f"at most {MAX_PROGRAM_BYTES >> 10} KiB ({MAX_PROGRAM_BYTES:,} bytes)" in docs.read_text()


def test_open_runner_unknown_and_missing_extras(add_bc) -> None:
    with pytest.raises(ConfigError, match="runner 'tpu' is unknown"):
        open_runner("tpu", add_bc)


UNSERVABLE_SPEC = """\
inputs:
  B: {type: input, varname: B, length: 2, precision: 16, padded_length: 2}
outputs:
  A: {type: output, varname: A, length: 2, precision: 16, padded_length: 2}
  M: {type: output, varname: M, length: 2, precision: 16, padded_length: 2}
  P: {type: output, varname: P, length: 2, precision: 16, padded_length: 2}
  Z: {type: output, varname: Z, length: 2, precision: 16, padded_length: 2}
simple_sequences:
  main: {type: simple_sequence, inputs: [B], outputs: [A, M]}
  chain: {type: simple_sequence, inputs: [M], outputs: [P]}
complex_sequences: {}
"""


def test_take_ready_serves_what_femtorun_recv_cannot(tmp_path) -> None:
    """Z has no producer, M feeds ``chain``: femtorun accepts the spec but its recv asserts on every call.
    take_ready serves A, M and P (femtorun's own edge counts say they are ready) and never Z."""
    femtorun = pytest.importorskip("femtorun")
    path = tmp_path / "spec.yaml"
    path.write_text(UNSERVABLE_SPEC)
    spec = load_iospec(path)
    theirs = femtorun.IOSpec(str(path))
    theirs.sim_reset()
    ours = SequenceEngine(spec, strict=True)
    assert ours.unservable == ("Z",)
    for _ in range(3):
        theirs.sim_send_inputs(["B"])
        assert ours.send("B", atomic=True) == ["main", "chain"]
        ready = {n for n in ("A", "M", "P")
                 if theirs.G.edges[next(iter(theirs.G.predecessors(n))), n]["count"] == 1}
        assert ready == {"A", "M", "P"}
        assert ours.take_ready() == ["A", "M", "P"] and ours.take_ready() == []
        with pytest.raises(AssertionError):  # femtorun's recv: every call, on M
            theirs.sim_recv_outputs()
        with pytest.raises(SpuSequenceError, match="femtorun's recv asserts"):
            ours.recv()
        for n in ("A", "M", "P"):  # what recv would have cleared
            theirs.G.edges[next(iter(theirs.G.predecessors(n))), n]["count"] = 0


CHAINED_SPEC = """
inputs:
  P: {type: input, varname: P, length: 4, precision: 16, padded_length: 4}
  Q: {type: input, varname: Q, length: 4, precision: 16, padded_length: 4}
outputs:
  M: {type: output, varname: M, length: 4, precision: 16, padded_length: 4}
  Y: {type: output, varname: Y, length: 4, precision: 16, padded_length: 4}
simple_sequences:
  first: {type: simple_sequence, inputs: [P], outputs: [M]}
  second: {type: simple_sequence, inputs: [M, Q], outputs: [Y]}
complex_sequences: {}
"""


@pytest.mark.parametrize("order", [("P", "Q"), ("Q", "P")])
def test_strict_counts_a_chained_output_as_written(tmp_path, order) -> None:
    """Issue 30, failure 11: ``first: [P] -> [M]``, ``second: [M, Q] -> [Y]``. M reaches ``second`` inside the
    SPU when ``first`` fires; the strict tracker used to wait for the host to write M, refused Q
    (``declared-order: expected 'M' next``) and every later P (``too-many-inputs``): 1 output of 14. Now
    strict fires ``second`` in either order, as femtorun's own simulator does (run side by side)."""
    femtorun = pytest.importorskip("femtorun")
    path = tmp_path / "chained.yaml"
    path.write_text(CHAINED_SPEC)
    spec = load_iospec(path)
    assert not [w for w in spec.warnings if "never fire" in w]  # `iospec check` used to say second can't
    theirs = femtorun.IOSpec(str(path))
    theirs.sim_reset()
    ours = SequenceEngine(spec, strict=True)
    produced = []
    for _ in range(7):
        for name in order:
            fired = ours.send(name, atomic=True)
            theirs.sim_send_inputs([name])
            if name == "P":
                assert fired[0] == "first"
            produced += ours.take_ready()
        assert fired[-1] == "second"
        ready = {n for n in ("M", "Y") if theirs.G.edges[next(iter(theirs.G.predecessors(n))), n]["count"]}
        assert ready == {"M", "Y"}  # femtorun fired both
        for n in ready:
            theirs.G.edges[next(iter(theirs.G.predecessors(n))), n]["count"] = 0
    assert sorted(produced) == ["M"] * 7 + ["Y"] * 7
    with pytest.raises(SpuSequenceError) as err:  # the host still cannot write M itself
        ours.send("M")
    assert err.value.rule == "not-an-input"


def test_an_input_neither_declared_nor_produced_still_warns(tmp_path) -> None:
    path = tmp_path / "orphan.yaml"
    path.write_text(CHAINED_SPEC.replace("inputs: [M, Q]", "inputs: [N, Q]"))
    assert any("input 'N' is neither declared nor produced" in w for w in load_iospec(path).warnings)
