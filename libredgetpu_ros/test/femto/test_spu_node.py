"""The SPU node in its own process over real DDS, driven from this process.

Program: A = B + C + L (L latched), D = relu(2 B - L), sequence [B, C] -> [A, D] (strict declared order).
Shows: outputs stamped with the input that completed the sequence and equal to the reference runner's (run
here in-process on the same vectors), latched input from the transient-local topic and from the parameter,
sequence violations / NaN / wrong lengths rejected with the rule and counted in /diagnostics while the node
keeps running and keeps its state, ~/reset, a malformed IOSpec refused at configure (node alive, configures
afterwards).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from libredgetpu_ros.femto import load_iospec
from libredgetpu_ros.femto.reference import ReferenceRunner
from libredgetpu_ros.femto.vectors import dequantize, prepare_input

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


class Client:
    """Our end of the wire: publishers, service clients, recorders, spun on a background thread."""

    def __init__(self, ros_env: Any) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from lifecycle_msgs.srv import ChangeState
        from rcl_interfaces.srv import SetParameters
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_srvs.srv import Trigger

        self.node, self.executor = ros_env.probe("spu_test_client")
        self.JointState = JointState
        self.outputs: dict[str, list] = {"A": [], "D": []}
        self.diag: list = []
        self.lock = threading.Lock()
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.pub = {n: self.node.create_publisher(JointState, f"{FQN}/in/{n}", qos) for n in ("B", "C")}
        self.pub["L"] = self.node.create_publisher(JointState, f"{FQN}/in/L", latched)
        for name in self.outputs:
            self.node.create_subscription(JointState, f"{FQN}/out/{name}", self._recorder(name), qos)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        self.change_state = self.node.create_client(ChangeState, f"{FQN}/change_state")
        self.set_params = self.node.create_client(SetParameters, f"{FQN}/set_parameters")
        self.reset = self.node.create_client(Trigger, f"{FQN}/reset")
        self._types = (ChangeState, SetParameters, Trigger)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        with contextlib.suppress(ExternalShutdownException):  # the fixture shuts the context down
            self.executor.spin()

    def _recorder(self, name: str):
        def record(msg: Any) -> None:
            stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            with self.lock:
                self.outputs[name].append((stamp, np.array(msg.position)))
        return record

    def _on_diag(self, msg: Any) -> None:
        for status in msg.status:
            if status.name.startswith(FQN):
                with self.lock:
                    self.diag.append({kv.key: kv.value for kv in status.values})

    def call(self, client: Any, request: Any, timeout: float = 15.0) -> Any:
        assert client.wait_for_service(timeout_sec=timeout), client.srv_name
        future = client.call_async(request)
        deadline = time.monotonic() + timeout
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert future.done(), f"{client.srv_name} did not answer"
        return future.result()

    def transition(self, transition_id: int) -> bool:
        req = self._types[0].Request()
        req.transition.id = transition_id
        return self.call(self.change_state, req).success

    def set_param(self, name: str, value: Any) -> Any:
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue

        v = ParameterValue()
        if isinstance(value, str):
            v.type, v.string_value = ParameterType.PARAMETER_STRING, value
        else:
            v.type, v.double_array_value = ParameterType.PARAMETER_DOUBLE_ARRAY, [float(x) for x in value]
        req = self._types[1].Request(parameters=[Parameter(name=name, value=v)])
        return self.call(self.set_params, req).results[0]

    def send(self, name: str, values: list[float], stamp_ns: int) -> None:
        msg = self.JointState()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        msg.position = [float(x) for x in values]
        self.pub[name].publish(msg)

    def wait(self, predicate, timeout: float = 10.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if predicate():
                    return
            time.sleep(0.01)
        raise AssertionError(f"timed out waiting for {what}; outputs {self.n_outputs()}, last diag "
                             f"{self.diag[-1] if self.diag else None}")

    def n_outputs(self) -> int:
        return len(self.outputs["A"])

    def latest_diag(self, key: str) -> int:
        return int(self.diag[-1][key]) if self.diag else -1


def test_spu_node_across_processes(ros_env, tmp_path: Path) -> None:
    spec_path, program_path = write_program(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("inputs: [unclosed\n")
    ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.spu.node", "--ros-args", "-r", f"__ns:={NS}",
                   "-p", f"iospec:={bad}", "-p", f"program:={program_path}", "-p", "diagnostics_period:=0.1",
                   "-p", "latched.L:=[0.5, 0.5, 0.5, 0.5, 0.5, 0.5]"], "spu")
    c = Client(ros_env)
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
        c.wait(lambda i=i: c.n_outputs() > i, what=f"output {i}")
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
    c.wait(lambda: c.n_outputs() == 6, what="output after violations")
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
    assert c.call(c.reset, c._types[2].Request()).success
    ref.reset()
    ref_send("L", [-1.0] * 6)
    c.send("C", [3.0] * 6, 61)
    c.wait(lambda: c.latest_diag("rejected.declared-order") >= 3, what="C after reset rejected")
    c.send("B", [0.25] * 6, 62)
    c.wait(lambda: c.latest_diag("inputs_accepted") >= 18, what="B after reset")
    c.send("C", [0.5] * 6, 63)
    ref_send("B", [0.25] * 6)
    want = ref_send("C", [0.5] * 6)
    c.wait(lambda: c.n_outputs() == 7, what="output after reset")
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
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    spec_path, program_path = write_program(tmp_path)
    real_open = node_module.open_runner
    monkeypatch.setattr(node_module, "open_runner", lambda *a, **k: _FlakyRunner(real_open(*a, **k)))
    context = ros_env.init_rclpy()
    node = node_module.SpuNode(context=context, parameter_overrides=[
        Parameter("iospec", value=str(spec_path)), Parameter("program", value=str(program_path))])
    published: list = []
    try:
        node.trigger_configure()
        node.trigger_activate()
        for pub in node._out_pubs.values():
            monkeypatch.setattr(pub, "publish", published.append)

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
    finally:
        node.teardown()
        node.destroy_node()
