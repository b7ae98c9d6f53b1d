"""The optional runners' adapters (against stand-ins with femtodriver's API, and the real packages when
installed) and the ``iospec`` CLI."""

from __future__ import annotations

import json
import sys
import types
from typing import ClassVar

import numpy as np
import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.errors import BackendError, ConfigError, DeviceError
from libredgetpu_ros.femto import load_iospec
from libredgetpu_ros.femto.runner import open_runner
from libredgetpu_ros.femto.vectors import prepare_input

CASES = ["single_io_fmot16", "add_bc_api", "latched_one_fmot", "latched_two_api", "multi_output_fmot8",
         "padding_mixed_api", "complex_every2", "femtofile_roundtrip", "legacy_padding", "two_signatures_api"]


class _StandInSpuRunner:
    """femtodriver.SPURunner's public surface (FemtoRunner: reset / send_inputs / recv_outputs / finish)."""

    made: ClassVar[list] = []

    def __init__(self, compiled, platform="zcu104", hardware_address=None, **kwargs) -> None:
        self.compiled, self.platform, self.address = compiled, platform, hardware_address
        self.log: list = []
        _StandInSpuRunner.made.append(self)

    def reset(self) -> None:
        self.log.append(("reset",))

    def send_inputs(self, inputs: dict) -> None:
        self.log.append(("send", {k: v.tolist() for k, v in inputs.items()}))

    def recv_outputs(self) -> dict:
        self.log.append(("recv",))
        return {"output.0": np.arange(8, dtype=np.int16)}

    def finish(self) -> None:
        self.log.append(("finish",))


@pytest.fixture
def femtofile(monkeypatch, tmp_path):
    """A one-byte .femto file, with a stand-in ``femtodriver`` module (SPURunner, CompiledData) importable."""
    fake = types.ModuleType("femtodriver")
    fake.SPURunner = _StandInSpuRunner
    fake.CompiledData = types.SimpleNamespace(read_from_femtofile=lambda p: ("compiled", p))
    monkeypatch.setitem(sys.modules, "femtodriver", fake)
    path = tmp_path / "model.femto"
    path.write_bytes(b"\0")
    return path


def test_femtodriver_adapter_wiring(femtofile, fixture_path, tmp_path) -> None:
    spec = load_iospec(fixture_path("femto/single_io_fmot16.yaml"))
    runner = open_runner("femtodriver", spec, femtofile=femtofile, platform="evk2", hardware_address="SN1")
    spu = _StandInSpuRunner.made[-1]
    assert (spu.compiled, spu.platform, spu.address) == (("compiled", str(femtofile)), "evk2", "SN1")
    q = prepare_input(np.linspace(-1, 1, 16), spec.inputs["x"])
    runner.send("x", q)
    assert list(runner.recv()) == ["output.0"]
    runner.close()
    assert [e[0] for e in spu.log] == ["reset", "send", "recv", "finish"]
    assert spu.log[1][1]["x"] == q.tolist()
    assert runner.describe()["platform"] == "evk2"
    spu.send_inputs = lambda inputs: (_ for _ in ()).throw(AssertionError())  # env_SEND's bare assert
    with pytest.raises(DeviceError, match=r"femtodriver send of 'x' failed .*AssertionError"):
        runner.send("x", q)
    with pytest.raises(ConfigError, match=r"femtofile .* does not exist"):
        open_runner("femtodriver", spec, femtofile=tmp_path / "absent.femto")


def test_optional_runners_say_what_is_missing(monkeypatch, fixture_path) -> None:
    spec = load_iospec(fixture_path("femto/single_io_fmot16.yaml"))
    monkeypatch.setitem(sys.modules, "femtodriver", None)  # import fails like an absent package
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(BackendError, match="needs 'femtodriver'"):
        open_runner("femtodriver", spec, femtofile="x")
    with pytest.raises(BackendError, match="needs 'torch'"):
        open_runner("fqir", spec, fqir="x")


@pytest.mark.hardware
def test_femtodriver_on_a_real_spu(fixture_path) -> None:  # pragma: no cover - needs an SPU + femtofile
    pytest.importorskip("femtodriver")
    import os

    femtofile = os.environ.get("LIBREDGETPU_ROS_FEMTOFILE")
    iospec = os.environ.get("LIBREDGETPU_ROS_FEMTO_IOSPEC")
    if not femtofile or not iospec:
        pytest.skip("set LIBREDGETPU_ROS_FEMTOFILE and LIBREDGETPU_ROS_FEMTO_IOSPEC for the attached SPU")
    spec = load_iospec(iospec)
    runner = open_runner("femtodriver", spec, femtofile=femtofile)
    vec = spec.streaming_inputs()[0]
    runner.send(vec.name, prepare_input(np.zeros(vec.length), vec))
    runner.close()


class _StandInFqirGraph:
    """fmot's FQIR graph as FQIRArithRunner uses it: ``subgraphs["ARITH"].inputs`` (objects with ``.name``)
    and ``.run(*inputs, return_dict=True, return_objs=True, state=...) -> (outputs by name, state)``."""

    def __init__(self, input_names: list[str], fn) -> None:
        arith = types.SimpleNamespace(inputs=[types.SimpleNamespace(name=n) for n in input_names])
        arith.run = lambda *args, return_dict=True, return_objs=True, state=None: (fn(*args), state)
        self.subgraphs = {"ARITH": arith}


class _StandInArithRunner:
    """femtodriver 2.6.0's ``fqir_runner.FQIRArithRunner`` as its source keys things: latched values under
    ``io_spec.latched_input_names()`` (the IOSpec keys); a step whose inputs are all latched only stores
    them; otherwise the graph runs on ``inputs[k.name]``, else the latched value, per graph input name
    (a KeyError when neither holds it)."""

    def __init__(self, fqir, io_spec) -> None:
        self.fqir, self.steps = fqir, []
        self.latched_inputs = {key: None for key in io_spec.latched_input_names()}

    def reset(self) -> None:
        self.steps.clear()

    def step(self, inputs: dict):
        self.steps.append({k: np.asarray(v).tolist() for k, v in inputs.items()})
        for name, value in inputs.items():
            if name in self.latched_inputs:
                self.latched_inputs[name] = value
        if set(inputs) <= set(self.latched_inputs):
            return {}, None
        arith = self.fqir.subgraphs["ARITH"]
        args = [inputs[k.name] if k.name in inputs else self.latched_inputs[k.name] for k in arith.inputs]
        return arith.run(*args, return_dict=True, return_objs=True, state=None)

    def finish(self) -> None:
        pass


def _real_fqir_arith_runner():
    """femtodriver 2.6.0's own FQIRArithRunner, loaded from an unpacked wheel outside the repository
    (``LIBREDGETPU_ROS_FEMTODRIVER_SRC``, default /work/ext/femtodriver/src: ``pip download femtodriver==2.6.0
    --no-deps`` + unzip; its package __init__ pulls torch, the module itself only femtorun)."""
    import importlib.util
    import os
    from pathlib import Path

    path = Path(os.environ.get("LIBREDGETPU_ROS_FEMTODRIVER_SRC", "/work/ext/femtodriver/src"),
                "femtodriver", "fqir_runner.py")
    if not path.is_file():
        pytest.skip(f"femtodriver 2.6.0 source not found at {path}")
    spec = importlib.util.spec_from_file_location("femtodriver_fqir_runner_2_6_0", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FQIRArithRunner


def _fqir_runner(monkeypatch, tmp_path, spec, graph, arith_runner):
    fake_torch = types.ModuleType("torch")
    fake_torch.load = lambda path, weights_only=False: graph
    fake_fr = types.ModuleType("femtodriver.fqir_runner")
    fake_fr.FQIRArithRunner = arith_runner
    for name, module in [("torch", fake_torch), ("fmot", types.ModuleType("fmot")),
                         ("femtodriver", types.ModuleType("femtodriver")),
                         ("femtodriver.fqir_runner", fake_fr)]:
        monkeypatch.setitem(sys.modules, name, module)
    pickle = tmp_path / "graph.pt"
    pickle.write_bytes(b"\0")
    return open_runner("fqir", spec, fqir=pickle)


def test_fqir_adapter_wiring(monkeypatch, fixture_path, tmp_path) -> None:
    """fmot's export (key == varname): the latched input stepped alone, then x with the held value."""
    spec = load_iospec(fixture_path("femto/latched_one_fmot.yaml"))
    graph = _StandInFqirGraph(["x", "config"], lambda x, config: {"output.0": x[:8] + config[:8]})
    runner = _fqir_runner(monkeypatch, tmp_path, spec, graph, _StandInArithRunner)
    runner.send("config", np.full(16, 3, np.int16))
    assert runner.recv() == {}
    runner.send("x", np.arange(16, dtype=np.int16))
    out = runner.recv()
    assert out["output.0"].tolist() == [3, 4, 5, 6, 7, 8, 9, 10]
    assert runner._runner.steps[0] == {"config": [3] * 16}


SEED_SPEC = """\
inputs:
  B: {type: input, varname: B, length: 4, precision: 16, padded_length: 4, comments: {}}
  latchedC: {type: input, varname: C, length: 4, precision: 16, padded_length: 4, comments: {latch: true}}
outputs:
  A: {type: output, varname: A, length: 4, precision: 16, padded_length: 4, comments: {}}
simple_sequences:
  main_seq: {type: simple_sequence, inputs: [B], outputs: [A], comments: {}}
  latched_seq: {type: simple_sequence, inputs: [latchedC], outputs: [], comments: {}}
complex_sequences: {}
"""


@pytest.mark.parametrize("arith_runner", ["stand-in", "femtodriver 2.6.0"])
def test_fqir_adapter_keys_latched_inputs_as_femtodriver(monkeypatch, tmp_path, arith_runner) -> None:
    """The design seed's A = B + latchedC with key ``latchedC`` / varname ``C``: the adapter takes sends by
    varname and hands femtodriver the key (stepping ``{"C": ...}`` left femtodriver's latched value unset
    and ran the graph on a latched write: KeyError 'latchedC')."""
    cls = _StandInArithRunner if arith_runner == "stand-in" else _real_fqir_arith_runner()
    path = tmp_path / "seed.yaml"
    path.write_text(SEED_SPEC)
    spec = load_iospec(path)
    graph = _StandInFqirGraph(["B", "latchedC"], lambda b, c: {"A": np.asarray(b) + np.asarray(c)})
    runner = _fqir_runner(monkeypatch, tmp_path, spec, graph, cls)
    runner.send("C", np.array([10, 20, 30, 40], np.int16))
    assert runner.recv() == {}
    assert runner._runner.latched_inputs["latchedC"].tolist() == [10, 20, 30, 40]
    for b in ([1, 2, 3, 4], [5, 6, 7, 8]):
        runner.send("B", np.array(b, np.int16))
        out = runner.recv()
        assert list(out) == ["A"] and out["A"].tolist() == [b[i] + (i + 1) * 10 for i in range(4)]


def test_femtodriver_adapter_refuses_what_spurunner_cannot_send(femtofile, tmp_path) -> None:
    path = tmp_path / "seed.yaml"
    path.write_text(SEED_SPEC)
    with pytest.raises(ConfigError, match=r"key and varname differ cannot be sent: latchedC \(varname C\)"):
        open_runner("femtodriver", load_iospec(path), femtofile=femtofile)
    path.write_text(SEED_SPEC.replace("varname: C", "varname: latchedC").replace(
        "outputs:\n  A:", "outputs:\n  Z: {type: output, varname: Z, length: 4, precision: 16, "
        "padded_length: 4}\n  A:"))
    with pytest.raises(ConfigError, match=r"without exactly one producer \['Z'\]"):
        open_runner("femtodriver", load_iospec(path), femtofile=femtofile)


# -- CLI -------------------------------------------------------------------------------------------------
def test_cli_check_json(fixture_path, capsys) -> None:
    assert main(["iospec", "check", str(fixture_path("femto/femtofile_roundtrip.yaml")), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in info["sequences"]] == ["0", "1"] and info["latched_inputs"] == ["4"]
    q8 = next(v for v in info["inputs"] if v["name"] == "1")
    assert (q8["words_femtodriver"], q8["words_packed"], q8["length_64b_words"]) == (4, 2, 4)


def test_cli_check_text(fixture_path, capsys) -> None:
    assert main(["iospec", "check", str(fixture_path("femto/latched_two_api.yaml"))]) == 0
    out = capsys.readouterr().out
    assert "1: sequence_1 [simple]: latchedC -> (latched: no output)" in out
    assert "latched inputs: latchedC, latchedD" in out


@pytest.mark.parametrize("case", CASES)
def test_cli_run_reproduces_every_fixture_trace(fixture_path, capsys, case: str) -> None:
    path = fixture_path(f"femto/{case}.yaml")
    assert main(["iospec", "run", str(path), "--trace", str(fixture_path(f"femto/{case}_traces.json")),
                 "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    recorded = json.loads(fixture_path(f"femto/{case}_traces.json").read_text())["traces"]
    assert [r["name"] for r in results] == [t["name"] for t in recorded]
    assert all(r["matches_record"] for r in results)
    for r, t in zip(results, recorded, strict=True):
        assert set(r) >= {"name", "outcome", "error", "steps"}
        if t["error"]:
            assert (r["error"]["event_index"], r["error"]["type"]) == (t["error"]["event_index"],
                                                                      t["error"]["type"])


def test_cli_bad_input_exit_codes(tmp_path, fixture_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("inputs:\n  B: {type: input, varname: B, length: 4.0, precision: 16, "
                   "padded_length: null}\n")
    assert main(["iospec", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "inputs.B.length" in err and "4.0" in err
    assert main(["iospec", "check", str(tmp_path / "absent.yaml")]) == 2
    traces = tmp_path / "t.json"
    traces.write_text("{\"traces\": 5}")
    assert main(["iospec", "run", str(fixture_path("femto/add_bc_api.yaml")), "--trace", str(traces)]) == 2
    assert "traces" in capsys.readouterr().err


def test_cli_run_strict(fixture_path, tmp_path, capsys) -> None:
    traces = tmp_path / "t.json"
    traces.write_text(json.dumps([{"name": "c_first", "events": [{"send": "C"}, {"send": "B"}]}]))
    assert main(["iospec", "run", str(fixture_path("femto/add_bc_api.yaml")), "--trace", str(traces),
                 "--strict", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "error" and result["error"]["type"] == "strict"
    assert result["error"]["rule"] == "declared-order" and result["error"]["event_index"] == 0


def test_cli_check_prints_varnames_as_topics_and_parameters_use_them(tmp_path, capsys) -> None:
    """The seed's key ``latchedC`` / varname ``C``: sequences and the latched list were printed by key,
    while the node's topic is ``~/in/C`` and its parameter ``latched.C``."""
    path = tmp_path / "seed.yaml"
    path.write_text(SEED_SPEC)
    assert main(["iospec", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1: latched_seq [simple]: C (key latchedC) -> (latched: no output)" in out
    assert "latched inputs: C (key latchedC)" in out
    assert "topic ~/in/C, parameter latched.C" in out and "topic ~/out/A" in out
    assert main(["iospec", "check", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["latched_inputs"] == ["latchedC"] and info["latched_input_names"] == ["C"]
    assert [s["input_names"] for s in info["sequences"]] == [["B"], ["C"]]
    assert info["inputs"][1]["parameter"] == "latched.C" and info["inputs"][1]["topic"] == "~/in/C"
