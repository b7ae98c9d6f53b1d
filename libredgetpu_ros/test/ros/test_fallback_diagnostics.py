"""Every node says the same thing when ``backend: auto`` fell back to the CPU: a ``/diagnostics`` WARN naming
why (``diagnostics.fallback_warnings``, the one text), not only a log line.

The case of the issue: a named accelerator (``device: "0"``) that is listed but fails to open (another
process took it, unplugged meanwhile: the USB enumeration monkeypatched as in
``test/backends/test_choose.py``) gives a CPU fallback ("auto: the Edge TPU failed to open: ..."). The
reservoir and recognition nodes (in this process, real rclpy over localhost DDS) logged it and reported OK;
now their status, as a probe receives it on ``/diagnostics``, is WARN with that reason, like the control and
camera nodes'. The same nodes with ``backend: cpu`` asked for explicitly are no fallback: OK.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

WAIT_S = 30.0
FAILED_OPEN = "auto: the Edge TPU failed to open: device '9-9'"


class _NoContext:
    """A libusb context that enumerates nothing (the listed accelerator is gone when opened)."""

    def close(self) -> None:
        pass


@pytest.fixture
def unopenable_accelerator(monkeypatch):
    """One accelerator listed (index 0, bus path 9-9) that cannot be opened."""
    from libredgetpu_ros.edgetpu import device as device_module
    from libredgetpu_ros.edgetpu.device import DeviceInfo

    ghost = DeviceInfo("9-9", 0, "running", 0x18D1, 0x9302, "super")
    monkeypatch.setattr(device_module, "list_devices", lambda: [ghost])
    monkeypatch.setattr(device_module, "_enumerate", lambda context: [])
    monkeypatch.setattr(device_module, "usb_context", lambda: _NoContext())


def _node(kind: str, context: Any, backend: str) -> Any:
    from rclpy.parameter import Parameter

    params: dict[str, Any] = {"backend": backend, "template": 256, "diagnostics_period": 0.2}
    if backend == "auto":
        params["device"] = "0"
    if kind == "reservoir":
        from libredgetpu_ros.ros.reservoir.node import ReservoirNode

        return ReservoirNode(f"reservoir_{backend}", context=context,
                             parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    from libredgetpu_ros.ros.recognition.node import RecognitionNode

    return RecognitionNode(f"recognition_{backend}", context=context,
                           parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def _statuses(ros_env: Any, kind: str, backend: str) -> list[Any]:
    """The statuses of the configured node a probe received on /diagnostics within a few periods."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.node import Node

    context = ros_env.init_rclpy()
    node = _node(kind, context, backend)
    probe = Node(f"diag_probe_{kind}_{backend}", context=context)
    received: list[Any] = []
    probe.create_subscription(DiagnosticArray, "/diagnostics", received.append, 50)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(probe)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        name = f"{node.get_fully_qualified_name()}: {node.DIAGNOSTICS_NAME}"
        deadline = time.monotonic() + WAIT_S
        mine: list[Any] = []
        while len(mine) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
            mine = [s for array in list(received) for s in array.status if s.name == name]
        assert len(mine) >= 3, f"no status of {name} on /diagnostics within {WAIT_S:.0f} s"
        return mine
    finally:
        executor.shutdown()
        spinner.join(5.0)
        node.teardown()
        node.destroy_node()
        probe.destroy_node()


@pytest.mark.parametrize("kind", ["reservoir", "recognition"])
def test_a_named_device_that_fails_to_open_warns_in_diagnostics(ros_env, unopenable_accelerator,
                                                                kind: str) -> None:
    from libredgetpu_ros.ros import diagnostics

    statuses = _statuses(ros_env, kind, "auto")
    for status in statuses:
        level = int.from_bytes(status.level, "little")
        assert level == diagnostics.WARN, (level, status.message)
        assert status.message.startswith(f"running on the CPU, not the accelerator ({FAILED_OPEN}"), \
            status.message
        assert "require_accelerator" not in status.message  # these nodes have no such parameter
    if kind == "reservoir":
        values = {kv.key: kv.value for kv in statuses[-1].values}
        assert values["backend"] == "cpu" and values["backend_choice"].startswith(FAILED_OPEN), values


@pytest.mark.parametrize("kind", ["reservoir", "recognition"])
def test_the_cpu_asked_for_is_no_fallback(ros_env, kind: str) -> None:
    from libredgetpu_ros.ros import diagnostics

    statuses = _statuses(ros_env, kind, "cpu")
    for status in statuses:
        assert "running on the CPU" not in status.message, status.message
    if kind == "reservoir":  # the recognition node's empty database is a WARN of its own
        assert {int.from_bytes(s.level, "little") for s in statuses} == {diagnostics.OK}


def test_one_text_for_every_node() -> None:
    """The control node's and perception node's wording comes from the same function (with their
    require_accelerator hint), a repeated reason is said once."""
    from libredgetpu_ros.ros.diagnostics import fallback_warnings

    assert fallback_warnings(["", ""]) == []
    assert fallback_warnings(["auto: x", "auto: x"], refusable=True) == [
        "running on the CPU, not the accelerator (auto: x); require_accelerator: true refuses to start so"]
