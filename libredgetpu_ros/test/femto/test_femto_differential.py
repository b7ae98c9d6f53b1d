"""Differential tests against femtorun 4.1.2 itself (PyPI, pure Python; pinned in requirements.lock.txt).

- 5,500 seeded random event traces (500 per fixture IOSpec) through femtorun's simulator and our engine,
  continuing after errors (so the no-rollback state is compared too): identical result, exception kind and
  message, and returned outputs at every step.
- The IOSpec loader fuzzed (bounded, seeded): structural mutations of every fixture YAML and raw text
  mutations; our verdict and exception kind equal femtorun's, and nothing but IOSpecError escapes.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest
import yaml

femtorun = pytest.importorskip("femtorun")  # pinned test dependency; importorskip keeps a bare install usable

from libredgetpu_ros.errors import IOSpecError, SpuSequenceError  # noqa: E402
from libredgetpu_ros.femto import SequenceEngine, load_iospec, parse_iospec  # noqa: E402

from libredgetpu_ros import textdata  # noqa: E402

TRACES_PER_SPEC = 500
YAMLS = ["single_io_fmot16", "add_bc_api", "latched_one_fmot", "latched_two_api", "multi_output_fmot8",
         "padding_mixed_api", "complex_every2", "femtofile_roundtrip", "legacy_padding", "two_signatures_api",
         "latched_iospec"]


def _random_trace(rng: random.Random, inputs: list, others: list) -> list[tuple[str, object]]:
    """Mostly input names (so long accepted runs happen), sometimes outputs / sequence keys / unknowns."""
    def pick() -> object:
        return rng.choice(inputs if inputs and rng.random() < 0.9 else others)

    events = []
    for _ in range(rng.randint(1, 24)):
        r = rng.random()
        if r < 0.55:
            events.append(("send", [pick()]))
        elif r < 0.63:
            events.append(("send", [pick() for _ in range(rng.randint(0, 4))]))
        elif r < 0.95:
            events.append(("recv", None))
        else:
            events.append(("reset", None))
    return events


def _femtorun_steps(spec, events) -> list:
    out = []
    spec.sim_reset()
    for kind, arg in events:
        try:
            if kind == "send":
                spec.sim_send_inputs(arg)
                out.append("ok")
            elif kind == "recv":
                out.append(("ok", spec.sim_recv_outputs()))
            else:
                spec.sim_reset()
                out.append("ok")
        except Exception as exc:
            out.append((type(exc).__name__, str(exc)))
    return out


def _our_steps(engine: SequenceEngine, events) -> list:
    out = []
    engine.reset()
    for kind, arg in events:
        try:
            if kind == "send":
                engine.send_list(arg)
                out.append("ok")
            elif kind == "recv":
                out.append(("ok", engine.recv()))
            else:
                engine.reset()
                out.append("ok")
        except SpuSequenceError as exc:
            out.append((exc.kind, exc.femtorun_message))
    return out


def test_random_traces_identical_to_femtorun(fixture_path) -> None:
    total = errors = 0
    for case in YAMLS:
        path = fixture_path(f"femto/{case}.yaml")
        oracle = femtorun.IOSpec(str(path))
        spec = load_iospec(path)
        engine = SequenceEngine(spec)
        inputs = [v.name for v in spec.inputs.values()]
        others = [v.name for v in spec.outputs.values()] + [str(s.key) for s in spec.sequences] + ["nope", 0]
        rng = random.Random(f"femto-diff-{case}")
        for i in range(TRACES_PER_SPEC):
            events = _random_trace(rng, inputs, others)
            theirs, ours = _femtorun_steps(oracle, events), _our_steps(engine, events)
            assert ours == theirs, f"{case} trace {i}: {events}"
            total += 1
            errors += any(s != "ok" and s[0] != "ok" for s in theirs)
    assert total >= 5000
    assert 0.2 * total < errors < 0.95 * total  # the traces exercise both verdicts


# -- loader fuzz -----------------------------------------------------------------------------------------
_JUNK = [None, 0, 1, -3, 2.5, True, "x", "", [], ["a"], [1], {}, {"a": 1}, {"scale": "half"}]


def _mutate(rng: random.Random, doc: object, depth: int = 0) -> object:
    """One random structural change somewhere in ``doc`` (a copy)."""
    if not isinstance(doc, dict | list) or not doc or (depth > 0 and rng.random() < 0.3):
        return copy.deepcopy(rng.choice(_JUNK)) if rng.random() < 0.7 else doc
    doc = copy.copy(doc)
    if isinstance(doc, dict):
        key = rng.choice(list(doc))
        r = rng.random()
        if r < 0.15:
            del doc[key]
        elif r < 0.25:
            doc[rng.choice(["bogus", "varname", "inputs", "outputs", "A", "x", 0, "L"])] = doc[key]
        else:
            doc[key] = _mutate(rng, doc[key], depth + 1)
    else:
        i = rng.randrange(len(doc))
        if rng.random() < 0.2:
            doc.append(doc[i])
        else:
            doc[i] = _mutate(rng, doc[i], depth + 1)
    return doc


def _verdict_femtorun(text: str) -> tuple:
    try:
        data = yaml.safe_load(text)
        spec = femtorun.IOSpec(data)
        spec.sim_reset()
    except Exception as exc:
        return ("error", type(exc).__name__)
    return ("accepted", tuple(str(n) for n in spec.G.nodes), spec.is_simple)


def _verdict_ours(text: str) -> tuple:
    try:
        spec = parse_iospec(text, "fuzz")
    except IOSpecError as exc:
        return ("error", exc.kind)
    return ("accepted", tuple(str(n) for n in spec.graph.nodes), spec.is_simple)


# What the YAML loader hands the IOSpec checks, with every alias expanded (a shared list counted at each
# place it is used), may hold at most this many nodes per character of text: the loader's and the checks'
# work stays linear in the input (a damaged text with 1-6 inserted "*a" repeats an anchored part at most
# 7 times). Counted, not timed: the machine's load changes nothing.
_NODES_PER_CHAR = 20


def _expanded_nodes(value: object, limit: int) -> int:
    """Nodes (keys, values, items) of ``value`` with aliases expanded, counted up to ``limit + 1``."""
    count, stack = 0, [value]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return count


@pytest.fixture
def loaded(monkeypatch) -> list:
    """Every document textdata.load_yaml returns during the test (parse_iospec reads through it)."""
    seen: list = []
    real = textdata.load_yaml

    def spy(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(textdata, "load_yaml", spy)
    return seen


def _verdict_ours_bounded(text: str, loaded: list, case: int) -> tuple:
    loaded.clear()
    verdict = _verdict_ours(text)
    limit = _NODES_PER_CHAR * len(text) + 100
    for data in loaded:
        assert _expanded_nodes(data, limit) <= limit, (
            f"case {case}: the loaded YAML expands past {_NODES_PER_CHAR} nodes per character:\n{text}")
    return verdict


def test_loader_fuzz_matches_femtorun(fixture_path, loaded) -> None:
    rng = random.Random(20261123)
    docs = [yaml.safe_load(Path(fixture_path(f"femto/{c}.yaml")).read_text()) for c in YAMLS]
    accepted = rejected = 0
    for i in range(1000):
        doc = rng.choice(docs)
        for _ in range(rng.randint(1, 3)):
            doc = _mutate(rng, doc)
        text = yaml.safe_dump(doc, sort_keys=False)
        ours = _verdict_ours_bounded(text, loaded, i)
        assert ours == _verdict_femtorun(text), f"case {i}:\n{text}"
        accepted += ours[0] == "accepted"
        rejected += ours[0] == "error"
    assert accepted > 100 and rejected > 100, (accepted, rejected)


_INSERTS = [":", " ", "\n", "-", "[", "{", "'", "&a", "*a", "0", "x", "\t"]


def test_loader_fuzz_raw_text(fixture_path, loaded) -> None:
    """Byte-level damage: only IOSpecError (or success) comes out, and the verdict kind matches femtorun's."""
    rng = random.Random(7)
    texts = [Path(fixture_path(f"femto/{c}.yaml")).read_text() for c in YAMLS]
    for i in range(800):
        chars = list(rng.choice(texts))
        for _ in range(rng.randint(1, 6)):
            pos = rng.randrange(len(chars))
            op = rng.random()
            if op < 0.4:
                del chars[pos: pos + rng.randint(1, 8)]
            elif op < 0.8:
                chars.insert(pos, rng.choice(_INSERTS))
            else:
                chars[pos] = rng.choice("abc:{}[]-\n 019")
        text = "".join(chars)
        ours = _verdict_ours_bounded(text, loaded, i)
        assert ours == _verdict_femtorun(text), f"case {i}:\n{text}"
