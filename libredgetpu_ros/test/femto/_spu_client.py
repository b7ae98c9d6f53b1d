"""The test's end of an SPU node in another process (:class:`SpuClient`: input publishers, output and
/diagnostics recorders, lifecycle / parameter / reset clients, spun on a background thread), and an SPU node
in the test's own process, active, its outputs captured (:func:`active_node`). Used by ``test_spu_node.py``
and ``test_spu_node_hostile.py`` (loaded by path with ``load_helper``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np


class SpuClient:
    """Talks to the SPU node ``fqn`` (e.g. ``/spu_test/spu``): ``inputs`` maps each ``~/in/<name>`` topic
    to whether it is latched (transient local, depth 1); every ``~/out/<name>`` of ``outputs`` is recorded
    as ``(header stamp ns, values)``; ``depth`` is the reliable queue of the other topics; ``wait_s`` the
    default bound of :meth:`wait` and of every service call."""

    def __init__(self, ros_env: Any, probe_name: str, fqn: str, inputs: dict[str, bool],
                 outputs: Iterable[str], *, depth: int, wait_s: float = 15.0) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from lifecycle_msgs.srv import ChangeState
        from rcl_interfaces.srv import SetParameters
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_srvs.srv import Trigger

        self.fqn, self.wait_s = fqn, wait_s
        self.node, self.executor = ros_env.probe(probe_name)
        self.outputs: dict[str, list[tuple[int, np.ndarray]]] = {name: [] for name in outputs}
        self.diag: list[dict[str, str]] = []
        self.lock = threading.Lock()
        qos = QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.pub = {name: self.node.create_publisher(JointState, f"{fqn}/in/{name}",
                                                     latched if latch else qos)
                    for name, latch in inputs.items()}
        for name in self.outputs:
            self.node.create_subscription(JointState, f"{fqn}/out/{name}", self._recorder(name), qos)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        self.change_state = self.node.create_client(ChangeState, f"{fqn}/change_state")
        self.set_params = self.node.create_client(SetParameters, f"{fqn}/set_parameters")
        self.reset = self.node.create_client(Trigger, f"{fqn}/reset")
        self._types = (JointState, ChangeState, Trigger)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        with contextlib.suppress(ExternalShutdownException):  # the fixture shuts the context down
            self.executor.spin()

    def _recorder(self, name: str) -> Callable[[Any], None]:
        def record(msg: Any) -> None:
            stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            with self.lock:
                self.outputs[name].append((stamp, np.array(msg.position)))
        return record

    def _on_diag(self, msg: Any) -> None:
        for status in msg.status:
            if status.name.startswith(self.fqn):
                level = status.level if isinstance(status.level, int) else ord(status.level)
                with self.lock:  # "_level": the status level (0 OK, 1 WARN, 2 ERROR), beside the values
                    self.diag.append({"_level": str(level), **{kv.key: kv.value for kv in status.values}})

    def call(self, client: Any, request: Any) -> Any:
        assert client.wait_for_service(timeout_sec=self.wait_s), client.srv_name
        future = client.call_async(request)
        deadline = time.monotonic() + self.wait_s
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.01)  # the background thread spins
        assert future.done(), f"{client.srv_name} did not answer"
        return future.result()

    def transition(self, transition_id: int) -> bool:
        request = self._types[1].Request()
        request.transition.id = transition_id
        return bool(self.call(self.change_state, request).success)

    def reset_node(self) -> bool:
        """Call ``~/reset``."""
        return bool(self.call(self.reset, self._types[2].Request()).success)

    def set_param(self, name: str, value: Any) -> Any:
        """Set a string or float-array parameter; the node's ``SetParametersResult``."""
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
        from rcl_interfaces.srv import SetParameters

        v = ParameterValue()
        if isinstance(value, str):
            v.type, v.string_value = ParameterType.PARAMETER_STRING, value
        else:
            v.type, v.double_array_value = ParameterType.PARAMETER_DOUBLE_ARRAY, [float(x) for x in value]
        return self.call(self.set_params, SetParameters.Request(parameters=[Parameter(name=name, value=v)])
                         ).results[0]

    def send(self, name: str, values: list[float], stamp_ns: int) -> None:
        msg = self._types[0]()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        msg.position = [float(x) for x in values]
        self.pub[name].publish(msg)

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float | None = None) -> None:
        """Poll ``predicate()`` (under the recorders' lock) until it is truthy."""
        deadline = time.monotonic() + (self.wait_s if timeout is None else timeout)
        while time.monotonic() < deadline:
            with self.lock:
                if predicate():
                    return
            time.sleep(0.01)
        counts = {name: len(msgs) for name, msgs in self.outputs.items()}
        raise AssertionError(f"timed out waiting for {what}; outputs {counts}, last diag "
                             f"{self.diag[-1] if self.diag else None}")

    def last(self, key: str) -> str:
        """``key`` of the latest diagnostics status ("" before any)."""
        return self.diag[-1].get(key, "") if self.diag else ""

    def latest_diag(self, key: str) -> int:
        """``key`` of the latest diagnostics status as an int (-1 before any)."""
        return int(self.diag[-1][key]) if self.diag else -1


@contextlib.contextmanager
def active_node(ros_env: Any, monkeypatch: Any, spec_path: Path, program_path: Path
                ) -> Iterator[tuple[Any, list]]:
    """An ``SpuNode`` in this process on the IOSpec and program given, configured and activated, and the
    list every output message it publishes is appended to (its publishers patched); torn down at exit.
    Patch what the node opens (``open_runner``, the engine) before entering."""
    import libredgetpu_ros.ros.spu.node as node_module
    from rclpy.parameter import Parameter

    node = node_module.SpuNode(context=ros_env.init_rclpy(), parameter_overrides=[
        Parameter("iospec", value=str(spec_path)), Parameter("program", value=str(program_path))])
    published: list = []
    try:
        node.trigger_configure()
        node.trigger_activate()
        for pub in node._out_pubs.values():
            monkeypatch.setattr(pub, "publish", published.append)
        yield node, published
    finally:
        node.teardown()
        node.destroy_node()
