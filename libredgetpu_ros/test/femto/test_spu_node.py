"""The SPU node in its own process over real DDS, driven from this process.

Program: A = B + C + L (L latched), D = relu(2 B - L), sequence [B, C] -> [A, D] (strict declared order).
Shows: outputs stamped with the input that completed the sequence and equal to the reference runner's (run
here in-process on the same vectors), latched input from the transient-local topic and from the parameter,
sequence violations / NaN / wrong lengths rejected with the rule and counted in /diagnostics while the node
keeps running and keeps its state, ~/reset, a malformed IOSpec refused at configure (node alive, configures
afterwards).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from libredgetpu_ros.femto import load_iospec
from libredgetpu_ros.femto.reference import ReferenceRunner
from libredgetpu_ros.femto.vectors import dequantize, prepare_input

from .._helpers import load_helper

spu_client = load_helper(Path(__file__).resolve().parent / "_spu_client.py")

pytestmark = [pytest.mark.ros, pytest.mark.slow]

NS = "/spu_test"
FQN = f"{NS}/spu"
SCALE = 2.0 ** -8


def _vec(name: str, kind: str, length: int, latch: bool = False) -> dict:
    return {"type": kind, "varname": name, "length": length, "precision": 16, "padded_length": 8,
            "quantization": {"scale": SCALE, "zero_pt": 0}, "comments": {"latch": latch}}


def write_program(tmp: Path) -> tuple[Path, Path]:
    spec = {"inputs": {"B": _vec("B", "input", 6), "C": _vec("C", "input", 6),
                       "L": _vec("L", "input", 6, True)},
            "outputs": {"A": _vec("A", "output", 6), "D": _vec("D", "output", 6)},
            "simple_sequences": {
                "main": {"type": "simple_sequence", "inputs": ["B", "C"], "outputs": ["A", "D"],
                         "comments": {}},
                "latch": {"type": "simple_sequence", "inputs": ["L"], "outputs": [], "comments": {}}},
            "complex_sequences": {}}
    program = {"outputs": {
        "A": {"terms": [{"input": "B", "weight": 1.0}, {"input": "C", "weight": 1.0},
                        {"input": "L", "weight": 1.0}]},
        "D": {"terms": [{"input": "B", "weight": 2.0}, {"input": "L", "weight": -1.0}],
              "activation": "relu"}}}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
    (tmp / "program.yaml").write_text(yaml.safe_dump(program))
    return tmp / "spec.yaml", tmp / "program.yaml"


def _client(ros_env: Any) -> Any:
    """Publishers of B, C and the latched L, recorders of A and D."""
    return spu_client.SpuClient(ros_env, "spu_test_client", FQN, {"B": False, "C": False, "L": True},
                                ("A", "D"), depth=100)


def test_spu_node_across_processes(ros_env, tmp_path: Path) -> None:
    spec_path, program_path = write_program(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("inputs: [unclosed\n")
    ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.spu.node", "--ros-args", "-r", f"__ns:={NS}",
                   "-p", f"iospec:={bad}", "-p", f"program:={program_path}", "-p", "diagnostics_period:=0.1",
                   "-p", "latched.L:=[0.5, 0.5, 0.5, 0.5, 0.5, 0.5]"], "spu")
    c = _client(ros_env)
    # Malformed IOSpec: configure fails with the parse error, the node stays up and unconfigured.
    assert not c.transition(1)
    assert c.set_param("iospec", str(spec_path)).successful
    assert c.transition(1) and c.transition(3)  # configure, activate

    # In-process reference: same program, same sequence of values.
    spec = load_iospec(spec_path)
    ref = ReferenceRunner(spec, program_path)
    ref.reset()
    vecs = {v.name: v for v in spec.inputs.values()}

    def ref_send(name: str, values: list[float]) -> dict[str, np.ndarray]:
        ref.send(name, prepare_input(np.array(values), vecs[name]))
        outs = {v.name: v for v in spec.outputs.values()}
        return {n: dequantize(q[:6], outs[n]) for n, q in ref.recv().items()}

    ref_send("L", [0.5] * 6)  # the parameter value the node was started with
    c.wait(lambda: c.diag, what="diagnostics")
    # Latched input from the transient-local topic: L = 1..6 (real units), then stream B, C pairs.
    L = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    c.send("L", L, 1)
    ref_send("L", L)
    c.wait(lambda: c.latest_diag("latched_updates") >= 2, what="latched topic value")
    rng = np.random.default_rng(5)
    expected = []
    for i in range(5):
        b, cc = (np.round(rng.uniform(-4, 4, 6), 2).tolist() for _ in range(2))
        c.send("B", b, 1_000 + 2 * i)
        c.wait(lambda i=i: c.latest_diag("inputs_accepted") >= 3 + 2 * i, what=f"B {i} accepted")
        c.send("C", cc, 1_001 + 2 * i)  # C completes the sequence: outputs carry C's stamp
        expected.append((1_001 + 2 * i, ref_send("B", b) | ref_send("C", cc)))
        c.wait(lambda i=i: len(c.outputs["A"]) > i, what=f"output {i}")
    for (stamp, want), got_a, got_d in zip(expected, c.outputs["A"], c.outputs["D"], strict=True):
        assert got_a[0] == stamp and got_d[0] == stamp
        np.testing.assert_allclose(got_a[1], want["A"], atol=0)  # both dequantize the same integers
        np.testing.assert_allclose(got_d[1], want["D"], atol=0)
    np.testing.assert_allclose(c.outputs["A"][0][1], np.array(expected[0][1]["A"]), atol=0)

    # Violations: C before B (declared order), B twice; NaN; wrong length. Each rejected, node keeps going.
    c.send("C", [0.0] * 6, 50)
    c.wait(lambda: c.latest_diag("rejected.declared-order") >= 1, what="order violation counted")
    c.send("B", [1.0] * 6, 51)
    c.wait(lambda: c.latest_diag("inputs_accepted") >= 13, what="B accepted after the violation")
    c.send("B", [1.0] * 6, 52)
    c.wait(lambda: c.latest_diag("rejected.declared-order") >= 2, what="B twice rejected")
    c.send("C", [1.0, float("nan"), 0, 0, 0, 0], 53)
    c.send("C", [1.0] * 5, 54)
    c.wait(lambda: c.latest_diag("rejected.bad_input") >= 2, what="NaN and short vector rejected")
    last = c.diag[-1]["last_rejection"]
    assert "element 1 is nan" in last or "expected 6 values" in last
    # The pending B (stamp 51) is still there: C completes the sequence with the pre-violation state.
    c.send("C", [2.0] * 6, 55)
    ref_send("B", [1.0] * 6)
    want = ref_send("C", [2.0] * 6)
    c.wait(lambda: len(c.outputs["A"]) == 6, what="output after violations")
    assert c.outputs["A"][-1][0] == 55
    np.testing.assert_allclose(c.outputs["A"][-1][1], want["A"], atol=0)

    # Latched value from the parameter, any time; a wrong-length parameter is refused.
    assert not c.set_param("latched.L", [1.0, 2.0]).successful
    assert not c.set_param("latched.L", [0.0, float("nan"), 0.0, 0.0, 0.0, 0.0]).successful
    assert not c.set_param("latched.nope", [1.0]).successful  # unknown input name
    assert c.set_param("latched.L", [-1.0] * 6).successful
    ref_send("L", [-1.0] * 6)
    # ~/reset drops a partial sequence: B, reset, C -> C is out of order; then B, C works with L kept.
    c.send("B", [3.0] * 6, 60)
    c.wait(lambda: c.latest_diag("inputs_accepted") >= 16, what="B before reset")
    assert c.reset_node()
    ref.reset()
    ref_send("L", [-1.0] * 6)
    c.send("C", [3.0] * 6, 61)
    c.wait(lambda: c.latest_diag("rejected.declared-order") >= 3, what="C after reset rejected")
    c.send("B", [0.25] * 6, 62)
    c.wait(lambda: c.latest_diag("inputs_accepted") >= 18, what="B after reset")
    c.send("C", [0.5] * 6, 63)
    ref_send("B", [0.25] * 6)
    want = ref_send("C", [0.5] * 6)
    c.wait(lambda: len(c.outputs["A"]) == 7, what="output after reset")
    assert c.outputs["A"][-1][0] == 63
    np.testing.assert_allclose(c.outputs["A"][-1][1], want["A"], atol=0)
    np.testing.assert_allclose(c.outputs["D"][-1][1], want["D"], atol=0)
    # deactivate, cleanup, configure again: a clean start.
    assert c.transition(4) and c.transition(2) and c.transition(1)


class _FlakyRunner:
    """A runner whose device fails on the second send (stands in for a USB hiccup on the SPU)."""

    name = "flaky"

    def __init__(self, inner: Any) -> None:
        self.inner, self.sends = inner, 0

    def reset(self) -> None:
        self.inner.reset()

    def send(self, name: str, vector: np.ndarray) -> None:
        from libredgetpu_ros.errors import DeviceError

        self.sends += 1
        if self.sends == 3:
            raise DeviceError("SPU did not answer")
        self.inner.send(name, vector)

    def recv(self) -> dict:
        return self.inner.recv()

    def describe(self) -> dict:
        return {"runner": self.name}

    def close(self) -> None:
        self.inner.close()


def test_runner_failure_is_counted_and_the_node_recovers(ros_env, tmp_path: Path, monkeypatch) -> None:
    """In-process: a device error on send is counted, the SPU is reset (latched values re-sent), the node
    stays active and the next complete sequence produces outputs."""
    import libredgetpu_ros.ros.spu.node as node_module
    from sensor_msgs.msg import JointState

    spec_path, program_path = write_program(tmp_path)
    real_open = node_module.open_runner
    monkeypatch.setattr(node_module, "open_runner", lambda *a, **k: _FlakyRunner(real_open(*a, **k)))
    with spu_client.active_node(ros_env, monkeypatch, spec_path, program_path) as (node, published):
        def msg(values: float) -> JointState:
            m = JointState()
            m.position = [values] * 6
            return m

        node._on_input("B", msg(1.0))   # send 2 (send 1: latched L at configure)
        node._on_input("C", msg(2.0))   # send 3: the device fails
        assert node.counters.get("runner_errors") == 1 and node.counters.get("resets") == 1
        assert published == []
        node._on_input("B", msg(1.0))   # after the reset (latched L re-sent as send 4)
        node._on_input("C", msg(2.0))
        assert len(published) == 2  # A and D
        np.testing.assert_allclose(np.array(published[0].position), [3.0] * 6)


class _DeadRunner(_FlakyRunner):
    """A runner whose device stops answering sends after the first (the latched value at configure) while
    its reset still returns: a USB SPU unplugged, say."""

    name = "dead"

    def send(self, name: str, vector: np.ndarray) -> None:
        from libredgetpu_ros.errors import DeviceError

        self.sends += 1
        if self.sends > 1:
            raise DeviceError("SPU did not answer")
        self.inner.send(name, vector)


def test_a_dead_device_is_counted_per_input_and_reset_answers(ros_env, tmp_path: Path, monkeypatch) -> None:
    """In-process: every send failing (the reset's re-send of the latched values too) costs one reset per
    input, counted; the node stays active and ~/reset answers success false with the cause. Before, a failed
    re-send reset again, whose re-send failed...: RecursionError out of the input callback (the node to
    on_error) and out of the ~/reset service handler."""
    import libredgetpu_ros.ros.spu.node as node_module
    from sensor_msgs.msg import JointState
    from std_srvs.srv import Trigger

    spec_path, program_path = write_program(tmp_path)
    real_open = node_module.open_runner
    monkeypatch.setattr(node_module, "open_runner", lambda *a, **k: _DeadRunner(real_open(*a, **k)))
    with spu_client.active_node(ros_env, monkeypatch, spec_path, program_path) as (node, published):
        m = JointState()
        m.position = [1.0] * 6
        node._on_input("B", m)
        assert node.counters.get("resets") == 1 and node.counters.get("runner_errors") == 2  # send, re-send
        node._on_input("B", m)
        assert node.counters.get("resets") == 2 and published == []
        answer = node._on_reset(Trigger.Request(), Trigger.Response())
        assert not answer.success and "SPU did not answer" in answer.message, answer.message
        assert node._state_machine.current_state[1] == "active"


class _FailsOnce(_FlakyRunner):
    """A runner whose device fails the second send only (the first after configure's latched value)."""

    def send(self, name: str, vector: np.ndarray) -> None:
        from libredgetpu_ros.errors import DeviceError

        self.sends += 1
        if self.sends == 2:
            raise DeviceError("SPU did not answer")
        self.inner.send(name, vector)


def test_a_latched_parameter_the_spu_did_not_take_is_refused(ros_env, tmp_path: Path, monkeypatch) -> None:
    """In-process: a ``latched.L`` change the runner fails to send is refused with the cause, and the
    parameter keeps the value the SPU runs with. Before, the change was accepted (the parameter said 1.0)
    while the reset re-sent the old value (0.0): outputs computed with a value the parameter does not show."""
    import libredgetpu_ros.ros.spu.node as node_module
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    spec_path, program_path = write_program(tmp_path)
    real_open = node_module.open_runner
    monkeypatch.setattr(node_module, "open_runner", lambda *a, **k: _FailsOnce(real_open(*a, **k)))
    with spu_client.active_node(ros_env, monkeypatch, spec_path, program_path) as (node, published):
        [result] = node.set_parameters([Parameter("latched.L", value=[1.0] * 6)])
        assert not result.successful and "SPU did not answer" in result.reason, result.reason
        assert list(node.get_parameter("latched.L").value) == [0.0] * 6
        for name, value in (("B", 1.0), ("C", 2.0)):
            m = JointState()
            m.position = [value] * 6
            node._on_input(name, m)
        np.testing.assert_allclose(np.array(published[0].position), [3.0] * 6)  # A = B + C + L, L = 0
        [again] = node.set_parameters([Parameter("latched.L", value=[1.0] * 6)])  # the device answers again
        assert again.successful and list(node._latched["L"]) == [1.0] * 6


def test_reset_and_latched_parameters_answer_while_an_input_holds_the_runner(ros_env, tmp_path: Path,
                                                                             monkeypatch) -> None:
    """In-process: another thread holds the node's lock as an input stuck in a send would (the data path
    holds it across the runner's send / recv). ``~/reset`` and a ``latched.L`` change answer within the
    bound, refused "a frame is in progress", nothing sent; once free, both work. Before, each waited for the
    lock on the main executor as long as the send was stuck (``ros/frame_busy.py``)."""
    from rclpy.parameter import Parameter
    from std_srvs.srv import Trigger

    held_lock = load_helper(Path(__file__).resolve().parents[1] / "ros" / "_held_lock.py")
    spec_path, program_path = write_program(tmp_path)
    with spu_client.active_node(ros_env, monkeypatch, spec_path, program_path) as (node, _):
        resets = node.counters.get("resets")
        busy = held_lock.answer_while_held(node._lock, lambda: node._on_reset(Trigger.Request(),
                                                                                   Trigger.Response()))
        assert not busy.success and "frame is in progress" in busy.message, busy
        result = held_lock.answer_while_held(node._lock, lambda: node.set_parameters(
            [Parameter("latched.L", value=[1.0] * 6)])[0])
        assert not result.successful and "frame is in progress" in result.reason, result
        assert list(node.get_parameter("latched.L").value) == [0.0] * 6  # nothing sent, nothing reset
        assert node.counters.get("resets") == resets
        assert node._on_reset(Trigger.Request(), Trigger.Response()).success
        assert node.set_parameters([Parameter("latched.L", value=[1.0] * 6)])[0].successful
