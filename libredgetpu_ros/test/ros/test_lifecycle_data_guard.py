"""``ManagedNode``'s data-path lock in one process with real rclpy: a node spun as its ``main()`` spins it
(``spinning.MainExecutor`` + ``CompanionSpinners``), a message publisher, a data-path callback held inside.

Deactivate waits for the callback in flight (which still publishes while active), cleanup closes the
processor after it; a ``(msg, info)`` callback gets rclpy's MessageInfo through the guard, as a camera node's
does. The cross-process version with the real control and reservoir nodes: ``test_data_path_teardown.py``.

Activate: the publishers are active before the data path can deliver anything. A transient-local message
waiting for the node's subscription is delivered on the data-path thread as soon as the subscription exists,
while activate is still creating the inputs (the test's node holds ``create_inputs`` until that callback
ran); its result goes out. Before, activate created the inputs first and activated the publishers after, and
that result was dropped ("publisher is not activated").
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(60)]

WAIT_S = 20.0


def _make_node_class() -> type:
    from libredgetpu_ros.ros import diagnostics
    from libredgetpu_ros.ros.lifecycle import ManagedNode
    from libredgetpu_ros.ros.params import DIAGNOSTICS_PERIOD, ParamTable
    from rclpy.qos import QoSProfile
    from std_msgs.msg import String

    @dataclasses.dataclass(frozen=True)
    class Config:
        diagnostics_period: float

    class HeldNode(ManagedNode):
        """A data path whose callback (``(msg, info)``) blocks until the test releases it."""

        PARAMS = ParamTable([DIAGNOSTICS_PERIOD], Config)
        DIAGNOSTICS_NAME = "held"

        def __init__(self, context: Any, input_qos: Any = None) -> None:
            super().__init__("held_node", context=context)
            self.input_qos = input_qos or QoSProfile(depth=10)
            self.hold_create_inputs = False  # wait in create_inputs until a first callback ran
            self.events: list[str] = []
            self.entered, self.release = threading.Event(), threading.Event()
            self.infos: list[Any] = []
            self.pub: Any = None

        def open_processor(self) -> None:
            self.events.append("open")

        def create_outputs(self) -> None:
            self.pub = self.output(String, "~/out", QoSProfile(depth=10))

        def create_inputs(self) -> None:
            self.data_subscription(String, "/held_in", self._on_msg, self.input_qos)
            if self.hold_create_inputs:  # the window between the subscription and the end of activate
                assert self.entered.wait(WAIT_S), "the waiting message never reached the data path"
                _wait(lambda: "callback-end" in self.events, "the first callback's end")

        def close_processor(self) -> None:
            self.events.append("close")

        def diagnostic_status(self) -> tuple[int, str, dict[str, object]]:
            return diagnostics.OK, "ok", {}

        def _on_msg(self, msg: String, info: Any) -> None:
            self.infos.append(info)
            self.events.append("callback-start")
            self.entered.set()
            assert self.release.wait(WAIT_S), "never released"
            self.pub.publish(String(data=msg.data))
            self.events.append("callback-end")

    return HeldNode


def _wait(predicate: Any, what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_deactivate_and_cleanup_wait_for_the_callback_in_flight(ros_env) -> None:
    from libredgetpu_ros.ros.spinning import CompanionSpinners, MainExecutor
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.node import Node
    from rclpy.qos import QoSProfile
    from std_msgs.msg import String

    context = ros_env.init_rclpy()
    node = _make_node_class()(context)
    peer = Node("held_peer", context=context)
    received: list[str] = []
    peer.create_subscription(String, "/held_node/out", lambda m: received.append(m.data),
                             QoSProfile(depth=10))
    source = peer.create_publisher(String, "/held_in", QoSProfile(depth=10))
    executor = MainExecutor(context=context)
    executor.add_node(node)
    executor.add_node(peer)
    companions = CompanionSpinners(node, context)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        _wait(lambda: source.get_subscription_count() > 0, "the data-path subscription")
        source.publish(String(data="in flight"))
        assert node.entered.wait(WAIT_S), "the data-path callback never ran"

        answers: list[Any] = []
        transitions = threading.Thread(target=lambda: answers.extend(
            [node.trigger_deactivate(), node.trigger_cleanup()]))
        transitions.start()
        transitions.join(0.5)
        # Held callback: deactivate cannot complete (without the lock it completed at once, and cleanup
        # closed the processor under the callback).
        assert transitions.is_alive() and "close" not in node.events, node.events
        node.release.set()
        transitions.join(WAIT_S)
        assert not transitions.is_alive()
        assert answers == [TransitionCallbackReturn.SUCCESS] * 2, answers
        assert node.events == ["open", "callback-start", "callback-end", "close"], node.events
        assert node.state_label() == "unconfigured"
        _wait(lambda: received == ["in flight"], "the held callback's output (published while active)")
        info = node.infos[0]  # (msg, info) callbacks get rclpy's MessageInfo through the guard
        assert "source_timestamp" in info and "received_timestamp" in info, info
    finally:
        node.release.set()
        companions.stop()
        executor.shutdown()
        spinner.join(5.0)
        node.destroy_node()
        peer.destroy_node()


def test_publishers_are_active_before_the_first_input(ros_env) -> None:
    from libredgetpu_ros.ros.spinning import CompanionSpinners, MainExecutor
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from std_msgs.msg import String

    latched = QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    context = ros_env.init_rclpy()
    node = _make_node_class()(context, input_qos=latched)
    node.hold_create_inputs = True
    node.release.set()  # the callback runs through
    peer = Node("early_peer", context=context)
    received: list[str] = []
    peer.create_subscription(String, "/held_node/out", lambda m: received.append(m.data),
                             QoSProfile(depth=10))
    source = peer.create_publisher(String, "/held_in", latched)
    executor = MainExecutor(context=context)
    executor.add_node(node)
    executor.add_node(peer)
    companions = CompanionSpinners(node, context)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        _wait(lambda: node.pub.get_subscription_count() > 0, "the peer's result subscription")
        source.publish(String(data="waiting before activate"))  # kept for the node's subscription
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        assert node.events[:3] == ["open", "callback-start", "callback-end"], node.events
        _wait(lambda: received == ["waiting before activate"],
              "the first input's result (dropped when the publisher was activated after the inputs)")
    finally:
        companions.stop()
        executor.shutdown()
        spinner.join(5.0)
        node.destroy_node()
        peer.destroy_node()
