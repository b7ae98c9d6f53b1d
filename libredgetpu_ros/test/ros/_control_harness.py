"""Test/bench side of the control node: lifecycle driver, planner (service client) and command recorder.

Used by the ``test_control_*.py`` files (imported by name: ``conftest.py`` registers it) and by
``bench/bench_control_node.py``; it runs in the caller's process on a private rclpy context, with a
SingleThreadedExecutor spinning in a background thread (cheaper per callback than the multi-threaded one, so
the recorder keeps up with 1 kHz commands).
"""

from __future__ import annotations

import array
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CONTROL_NODE_MODULE = "libredgetpu_ros.ros.control_node"
T_CONFIGURE, T_CLEANUP, T_ACTIVATE, T_DEACTIVATE = 1, 2, 3, 4  # lifecycle_msgs/Transition ids


def node_args(ns: str, *params: str, program: list[str] | None = None) -> list[str]:
    """Command line of a control node in namespace ``ns`` on the CPU twin of Dense(256), plus ``params``.

    ``program`` replaces ``python -m <control node module>`` (e.g. a test wrapper script)."""
    args = [*(program or [sys.executable, "-m", CONTROL_NODE_MODULE]), "--ros-args", "-r", f"__ns:={ns}"]
    for p in ("backend:=cpu", "template:=256", *params):
        args += ["-p", p]
    return args


def start_configured(ros_env: Any, ns: str, *params: str,
                     program: list[str] | None = None) -> ControlHarness:
    """Spawn a control node in ``ns`` (arguments as for :func:`node_args`) with the ``ros_env`` fixture,
    drive it from a :class:`ControlHarness` on this process's rclpy context and configure it."""
    ros_env.spawn(node_args(ns, *params, program=program), "control_node")
    ctl = ControlHarness(ros_env.init_rclpy(), f"{ns}/control_node")
    assert ctl.transition(T_CONFIGURE), "configure failed (see the control_node log)"
    return ctl


def float32_field(values: Any) -> array.array:
    """array.array('f') for a float32[] field: element-wise conversion of a 1M-entry list takes seconds."""
    out = array.array("f")
    out.frombytes(np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint8))  # one copy
    return out


@dataclass
class Recorded:
    """Everything received from the node, appended by the executor thread."""

    # (receive time ns, header stamp ns, weights version, y)
    commands: list[tuple[int, int, int, np.ndarray]] = field(default_factory=list)
    plain_commands: list[np.ndarray] = field(default_factory=list)
    diagnostics: list[Any] = field(default_factory=list)  # DiagnosticStatus of our node


class ControlHarness:
    """Drives one control node (fully qualified name ``fqn``) over DDS from this process."""

    def __init__(self, context: Any, fqn: str, *, record_plain: bool = True) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from libredgetpu_ros.ros.control.client import create_weights_client
        from lifecycle_msgs.srv import ChangeState, GetState
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile
        from std_msgs.msg import Float32MultiArray

        from libredgetpu_ros_interfaces.msg import CommandStamped
        from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

        self.fqn = fqn
        self.recorded = Recorded()
        self._lock = threading.Lock()
        self.node = rclpy.create_node("control_test_client", context=context)
        self.change_state = self.node.create_client(ChangeState, f"{fqn}/change_state")
        self.get_state = self.node.create_client(GetState, f"{fqn}/get_state")
        self.set_weights_client = create_weights_client(self.node, f"{fqn}/set_weights")  # REPLY_QOS
        self.get_weights_client = self.node.create_client(GetWeights, f"{fqn}/get_weights")
        qos = QoSProfile(depth=1000)
        self.node.create_subscription(CommandStamped, f"{fqn}/command_stamped", self._on_command, qos)
        if record_plain:  # off in the latency benchmark: one callback per command is enough there
            self.node.create_subscription(Float32MultiArray, f"{fqn}/command", self._on_plain, qos)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self._set_weights_type, self._get_weights_type = SetWeights, GetWeights
        self._change_state_type = ChangeState
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    # ----- recording ------------------------------------------------------------------------------

    def _on_command(self, msg: Any) -> None:
        recv = time.time_ns()
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        with self._lock:
            self.recorded.commands.append((recv, stamp, int(msg.weights_version),
                                           np.frombuffer(msg.data, np.float32).copy()))

    def _on_plain(self, msg: Any) -> None:
        with self._lock:
            self.recorded.plain_commands.append(np.frombuffer(msg.data, np.float32).copy())

    def _on_diagnostics(self, msg: Any) -> None:
        with self._lock:
            self.recorded.diagnostics.extend(s for s in msg.status if self.fqn in s.name)

    def commands(self) -> list[tuple[int, int, int, np.ndarray]]:
        with self._lock:
            return list(self.recorded.commands)

    def wait_for(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.02)

    # ----- calls ----------------------------------------------------------------------------------

    def call(self, client: Any, request: Any, timeout: float = 20.0) -> Any:
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"service {client.srv_name} not available after {timeout} s")
        done = threading.Event()
        future = client.call_async(request)
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout):
            raise TimeoutError(f"no answer from {client.srv_name} within {timeout} s")
        return future.result()

    def state(self) -> str:
        """The node's lifecycle state label ("unconfigured", "inactive", "active", ...)."""
        from lifecycle_msgs.srv import GetState

        return str(self.call(self.get_state, GetState.Request()).current_state.label)

    def transition(self, transition_id: int) -> bool:
        req = self._change_state_type.Request()
        req.transition.id = transition_id
        return bool(self.call(self.change_state, req).success)

    def set_weights(self, weights: np.ndarray | None = None, **kwargs: Any) -> Any:
        """Call ``~/set_weights``; arguments as for :meth:`set_weights_request`."""
        return self.call(self.set_weights_client, self.set_weights_request(weights, **kwargs))

    def set_weights_request(self, weights: np.ndarray | None = None, *, rows: int | None = None,
                            cols: int | None = None, data: Any = None, bias: Any = None, engine: str = "",
                            dry_run: bool = False) -> Any:
        req = self._set_weights_type.Request()
        req.engine = engine
        if weights is not None:
            rows, cols = weights.shape if rows is None else (rows, cols)
            data = np.asarray(weights, np.float32).ravel()
        req.rows, req.cols = int(rows or 0), int(cols or 0)
        req.data = float32_field(data)
        if bias is not None:
            req.bias = float32_field(bias)
        req.dry_run = dry_run
        return req

    def get_weights(self, engine: str = "") -> Any:
        req = self._get_weights_type.Request()
        req.engine = engine
        return self.call(self.get_weights_client, req)

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=2.0)
        self._thread.join(timeout=5.0)  # never destroy a node under a running executor thread
        self.node.destroy_node()
