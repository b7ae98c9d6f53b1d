"""The SPU node in its own process, started with the installed ``config/spu.yaml``, on femtorun-valid specs
that femtorun's own ``recv`` cannot serve (issue 21 items 1 and 9).

The spec has an output no sequence produces (``Z``), an output that feeds another sequence (``M`` ->
``chain`` -> ``P``) and a latched input ``latchedC`` of length 6 (the installed config pinned
``latched.latchedC`` to 4 values, which failed configure). Before: configure and activate succeeded and the
first B killed the process (``SpuSequenceError`` from ``engine.recv()`` in the callback, exit 1). Now the
node runs: A, M and P are published with B's stamp and the reference runner's values, Z is named in
diagnostics as never published, and it keeps answering. A flood of bad inputs is counted one by one in
diagnostics but logged once per cause per period.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import libredgetpu_ros

from .._helpers import load_helper

spu_client = load_helper(Path(__file__).resolve().parent / "_spu_client.py")

pytestmark = [pytest.mark.ros, pytest.mark.slow]

NS = "/spu_hostile"
FQN = f"{NS}/spu"
SCALE = 2.0 ** -8
OUTPUTS = ("A", "M", "P", "Z")
FLOOD = 60


def _vec(name: str, kind: str, length: int = 6) -> dict:
    return {"type": kind, "varname": name, "length": length, "precision": 16, "padded_length": 8,
            "quantization": {"scale": SCALE, "zero_pt": 0}, "comments": {}}


def write_program(tmp: Path) -> tuple[Path, Path]:
    seq = {"type": "simple_sequence", "comments": {}}
    spec = {"inputs": {"B": _vec("B", "input"), "latchedC": _vec("latchedC", "input")},
            "outputs": {n: _vec(n, "output") for n in OUTPUTS},
            "simple_sequences": {"main": {**seq, "inputs": ["B"], "outputs": ["A", "M"]},
                                 "chain": {**seq, "inputs": ["M"], "outputs": ["P"]},
                                 "latch": {**seq, "inputs": ["latchedC"], "outputs": []}},
            "complex_sequences": {}}
    program = {"outputs": {
        "A": {"terms": [{"input": "B", "weight": 1.0}, {"input": "latchedC", "weight": 1.0}]},
        "M": {"terms": [{"input": "B", "weight": 2.0}]},
        "P": {"terms": [{"input": "B", "weight": -1.0}], "bias": 0.5}}}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
    (tmp / "program.yaml").write_text(yaml.safe_dump(program))
    return tmp / "spec.yaml", tmp / "program.yaml"


def _client(ros_env: Any) -> Any:
    """Publishers of B and the latched latchedC, recorders of every output."""
    return spu_client.SpuClient(ros_env, "spu_hostile_client", FQN, {"B": False, "latchedC": True}, OUTPUTS,
                                depth=200)


def test_spu_node_runs_specs_femtorun_recv_cannot_serve(ros_env, tmp_path: Path) -> None:
    from libredgetpu_ros.femto import load_iospec
    from libredgetpu_ros.femto.reference import ReferenceRunner
    from libredgetpu_ros.femto.vectors import dequantize, prepare_input

    spec_path, program_path = write_program(tmp_path)
    installed = Path(libredgetpu_ros.__file__).resolve().parents[1] / "config" / "spu.yaml"  # as installed
    proc = ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.spu.node", "--ros-args",
                          "--params-file", str(installed), "-r", f"__ns:={NS}", "-p", f"iospec:={spec_path}",
                          "-p", f"program:={program_path}", "-p", "diagnostics_period:=0.1",
                          "-p", "qos_depth:=200"], "spu")
    c = _client(ros_env)
    assert c.transition(1), "configure failed (installed spu.yaml pinned latched.latchedC to 4 values?)"
    assert c.transition(3)
    c.wait(lambda: c.diag, "diagnostics")
    assert c.last("never_published") == "Z"

    spec = load_iospec(spec_path)
    ref = ReferenceRunner(spec, program_path)
    ref.reset()
    vecs = {v.name: v for v in spec.inputs.values()}
    outs = {v.name: v for v in spec.outputs.values()}

    def ref_send(name: str, values: list[float]) -> dict[str, np.ndarray]:
        ref.send(name, prepare_input(np.array(values), vecs[name]))
        return {n: dequantize(q[:6], outs[n]) for n, q in ref.recv().items()}

    c.send("latchedC", [0.25] * 6, 1)
    ref_send("latchedC", [0.25] * 6)
    c.wait(lambda: c.last("latched_updates") == "2", "latched value (1: the zeros at configure)")
    rng = np.random.default_rng(3)
    for i in range(4):
        b = np.round(rng.uniform(-2, 2, 6), 2).tolist()
        c.send("B", b, 100 + i)  # before the fix: the first B killed the node (exit 1)
        want = ref_send("B", b)
        assert sorted(want) == ["A", "M", "P"]
        c.wait(lambda i=i: all(len(c.outputs[n]) > i for n in ("A", "M", "P")), f"outputs of B {i}")
        assert proc.poll() is None
        for name in ("A", "M", "P"):
            stamp, values = c.outputs[name][i]
            assert stamp == 100 + i
            np.testing.assert_allclose(values, want[name], atol=0)
    assert c.outputs["Z"] == []
    assert c.last("sequence_errors") == "0" and c.last("runner_errors") == "0"

    # A flood of bad inputs (wrong length): every one counted, the log gets one line for the cause.
    for i in range(FLOOD):
        c.send("B", [1.0] * 5, 1000 + i)
    c.wait(lambda: c.last("rejected.bad_input") == str(FLOOD), "the flood counted")
    c.send("B", [1.0] * 6, 2000)  # and the next good input is answered
    c.wait(lambda: len(c.outputs["A"]) == 5, "output after the flood")
    assert proc.poll() is None
    assert c.transition(4) and c.transition(2)
    log = (ros_env.work_dir / "spu.log").read_text(errors="replace")
    lines = [line for line in log.splitlines() if "rejected (bad_input" in line]
    assert 1 <= len(lines) <= 2, lines[:5]  # before: one WARN per rejected input (60)
    assert "outputs ['Z'] have no single producing sequence" in log


def test_sequence_error_while_completing_is_counted_and_the_node_recovers(ros_env, tmp_path: Path,
                                                                          monkeypatch) -> None:
    """In-process: a SpuSequenceError raised while the outputs of a completed sequence are collected (the
    path that used to end the process) is counted in diagnostics, the SPU is reset, the next input served."""
    from libredgetpu_ros.errors import SpuSequenceError
    from libredgetpu_ros.femto.engine import SequenceEngine
    from sensor_msgs.msg import JointState

    spec_path, program_path = write_program(tmp_path)
    real_take = SequenceEngine.take_ready
    calls = []

    def flaky_take(self):
        calls.append(1)
        if len(calls) == 1:
            raise SpuSequenceError("injected", kind="AssertionError", rule="output-producers")
        return real_take(self)

    monkeypatch.setattr(SequenceEngine, "take_ready", flaky_take)
    with spu_client.active_node(ros_env, monkeypatch, spec_path, program_path) as (node, published):
        msg = JointState()
        msg.position = [1.0] * 6
        node._on_input("B", msg)
        values = node.diagnostics_values()
        assert values["sequence_errors"] == 1 and values["resets"] == 1 and "injected" in values["last_fault"]
        assert published == []
        node._on_input("B", msg)
        assert len(published) == 3  # A, M, P


def test_varname_too_long_for_a_topic_fails_configure_with_the_reason(ros_env, tmp_path: Path) -> None:
    """A 300-character varname is valid for femtorun but not as a ROS topic: configure fails naming it (it
    used to pass configure and end activate in an exception, the node in ErrorProcessing)."""
    import libredgetpu_ros.ros.spu.node as node_module
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    long = "b" * 300
    seq = {"type": "simple_sequence", "comments": {}}
    spec = {"inputs": {"B": _vec(long, "input")}, "outputs": {"A": _vec("A", "output")},
            "simple_sequences": {"main": {**seq, "inputs": ["B"], "outputs": ["A"]}}, "complex_sequences": {}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "program.yaml").write_text(yaml.safe_dump({"outputs": {"A": {"terms": [{"input": long}]}}}))
    node = node_module.SpuNode(context=ros_env.init_rclpy(), parameter_overrides=[
        Parameter("iospec", value=str(tmp_path / "spec.yaml")),
        Parameter("program", value=str(tmp_path / "program.yaml"))])
    logged: list[str] = []
    try:
        node.get_logger().error = logged.append  # the reason, as the node logs it
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert len(logged) == 1 and "is not a valid ROS topic name" in logged[0] and len(logged[0]) < 500
    finally:
        node.teardown()
        node.destroy_node()


def test_iospec_over_the_node_cap_fails_configure_before_parsing(ros_env, tmp_path: Path) -> None:
    """A femtorun-valid IOSpec of 300 KiB (a few KB of spec, then comment lines) is refused by its size at
    configure, naming the file, its size and the node's cap, and pointing at the CLI (which still loads it).
    It used to be parsed in configure: near the 4 MiB library cap, 14-47 s of CPU on the node's executor
    (bench/results/iospec_parse.md)."""
    import libredgetpu_ros.ros.spu.node as node_module
    from libredgetpu_ros.femto import load_iospec
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    spec_path, program_path = write_program(tmp_path)
    with spec_path.open("a") as f:
        f.write(("# " + "x" * 1022 + "\n") * 300)
    size = spec_path.stat().st_size
    assert size > node_module.MAX_IOSPEC_BYTES
    assert load_iospec(spec_path).origin  # the library / CLI cap is unchanged: the file is valid there
    node = node_module.SpuNode(context=ros_env.init_rclpy(), parameter_overrides=[
        Parameter("iospec", value=str(spec_path)), Parameter("program", value=str(program_path))])
    logged: list[str] = []
    try:
        node.get_logger().error = logged.append
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert len(logged) == 1, logged
        text = logged[0]
        assert str(spec_path) in text and f"{size} bytes" in text, text
        assert str(node_module.MAX_IOSPEC_BYTES) in text and "iospec check" in text, text
    finally:
        node.teardown()
        node.destroy_node()
