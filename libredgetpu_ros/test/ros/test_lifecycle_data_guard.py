"""``ManagedNode``'s data-path guard (``ros/data_guard.py``) in one process with real rclpy: a node spun as
its ``main()`` spins it (``spinning.MainExecutor`` + ``CompanionSpinners``), a message publisher, a data-path
callback held inside until the test releases it.

Deactivate waits for the callback in flight (which still publishes while active), cleanup closes the
processor after it; a ``(msg, info)`` callback gets rclpy's MessageInfo through the guard, as a camera node's
does. The cross-process version with the real control and reservoir nodes: ``test_data_path_teardown.py``.

Past ``deactivate_timeout`` a teardown goes on without the stuck callback, never closing the processor under
it: shutdown completes (``finalized``, so a SIGTERM ends the process) and error processing reaches
``unconfigured``, each with an ERROR ``/diagnostics`` status naming the callback; a configure while that call
still runs is refused, and once it returned the next configure closes what was left open before it opens
again. Before, both waited without a bound (the process held SIGTERM until launch's SIGKILL).

Activate: the publishers are active before the data path can deliver anything. A transient-local message
waiting for the node's subscription is delivered on the data-path thread as soon as the subscription exists,
while activate is still creating the inputs (the test's node holds ``create_inputs`` until that callback
ran); its result goes out. Before, activate created the inputs first and activated the publishers after, and
that result was dropped ("publisher is not activated"). An activate whose ``create_inputs`` raises leaves
nothing on for error processing: the inputs dropped, the publishers deactivated (they stayed active before).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(60)]

WAIT_S = 20.0
STUCK_TIMEOUT_S = 1.0  # deactivate_timeout of the stuck-callback tests


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

        def __init__(self, context: Any, input_qos: Any = None, **kwargs: Any) -> None:
            super().__init__("held_node", context=context, **kwargs)
            self.input_qos = input_qos or QoSProfile(depth=10)
            self.hold_create_inputs = False  # wait in create_inputs until a first callback ran
            self.fail_create_inputs = False  # raise in create_inputs after subscribing
            self.events: list[str] = []
            self.entered, self.release = threading.Event(), threading.Event()
            self.returned = threading.Event()
            self.infos: list[Any] = []
            self.pub: Any = None
            self.on_error_saw: tuple[bool, bool] | None = None  # (publisher active, inputs exist)

        def open_processor(self) -> None:
            self.events.append("open")

        def create_outputs(self) -> None:
            self.pub = self.output(String, "~/out", QoSProfile(depth=10))

        def create_inputs(self) -> None:
            self.data_subscription(String, "/held_in", self._on_msg, self.input_qos)
            if self.hold_create_inputs:  # the window between the subscription and the end of activate
                assert self.entered.wait(WAIT_S), "the waiting message never reached the data path"
                _wait(lambda: "callback-end" in self.events, "the first callback's end")
            if self.fail_create_inputs:
                raise RuntimeError("the camera went away")

        def on_deactivate(self, state: Any) -> Any:
            result = super().on_deactivate(state)
            self.events.append(f"deactivate {result.to_label().removeprefix('transition_')}")
            return result

        def on_error(self, state: Any) -> Any:
            self.on_error_saw = (self.pub.is_activated, self.inputs_active())
            return super().on_error(state)

        def close_processor(self) -> None:
            self.events.append("close")

        def diagnostic_status(self) -> tuple[int, str, dict[str, object]]:
            return diagnostics.OK, "ok", {}

        def _on_msg(self, msg: String, info: Any) -> None:
            self.infos.append(info)
            self.events.append("callback-start")
            self.entered.set()
            try:
                assert self.release.wait(WAIT_S), "never released"
                self.pub.publish(String(data=msg.data))
                self.events.append("callback-end")
            finally:
                self.returned.set()

    return HeldNode


def _wait(predicate: Any, what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


@dataclasses.dataclass
class _Rig:
    node: Any  # the HeldNode
    source: Any  # publisher of /held_in
    received: list[str]  # what the node published on ~/out
    statuses: list[tuple[int, str]]  # the node's /diagnostics statuses (level, message)


@contextlib.contextmanager
def _spinning(ros_env: Any, input_qos: Any = None, **node_kwargs: Any) -> Iterator[_Rig]:
    """A HeldNode spun as its ``main()`` spins it, and a peer node publishing its input and recording its
    output and diagnostics; everything stopped (the held callback released) at exit."""
    from diagnostic_msgs.msg import DiagnosticArray
    from libredgetpu_ros.ros.spinning import CompanionSpinners, MainExecutor
    from rclpy.node import Node
    from rclpy.qos import QoSProfile
    from std_msgs.msg import String

    context = ros_env.init_rclpy()
    node = _make_node_class()(context, input_qos=input_qos, **node_kwargs)
    peer = Node("held_peer", context=context)
    rig = _Rig(node, peer.create_publisher(String, "/held_in", input_qos or QoSProfile(depth=10)), [], [])
    peer.create_subscription(String, "/held_node/out", lambda m: rig.received.append(m.data),
                             QoSProfile(depth=10))
    peer.create_subscription(DiagnosticArray, "/diagnostics", lambda a: rig.statuses.extend(
        (int.from_bytes(s.level, "little"), s.message) for s in a.status), QoSProfile(depth=100))
    executor = MainExecutor(context=context)
    executor.add_node(node)
    executor.add_node(peer)
    companions = CompanionSpinners(node, context)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        yield rig
    finally:
        node.release.set()
        companions.stop()
        executor.shutdown()
        spinner.join(5.0)
        node.destroy_node()
        peer.destroy_node()


def _hold_one(rig: _Rig) -> None:
    """Configure, activate, and hold one message's callback."""
    from rclpy.lifecycle import TransitionCallbackReturn
    from std_msgs.msg import String

    node = rig.node
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    _wait(lambda: rig.statuses, "a first /diagnostics status (the peer's subscription matched)")
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    _wait(lambda: rig.source.get_subscription_count() > 0, "the data-path subscription")
    rig.source.publish(String(data="in flight"))
    assert node.entered.wait(WAIT_S), "the data-path callback never ran"


def _in_thread(call: Any) -> tuple[threading.Event, list[Any]]:
    """Run ``call`` on a thread of its own; (set when it returned, [its result])."""
    done, result = threading.Event(), []

    def run() -> None:
        try:
            result.append(call())
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    return done, result


def _returned(node: Any) -> None:
    """Wait until the held callback left the guard (which logs its late return before it does)."""
    assert node.returned.wait(WAIT_S), "the released callback never returned"
    _wait(lambda: node._guard.in_flight is None, "the callback's exit from the guard")


def _stuck_timeout() -> list[Any]:
    from rclpy.parameter import Parameter

    return [Parameter("deactivate_timeout", value=STUCK_TIMEOUT_S)]


def test_deactivate_and_cleanup_wait_for_the_callback_in_flight(ros_env) -> None:
    from rclpy.lifecycle import TransitionCallbackReturn

    with _spinning(ros_env) as rig:
        node = rig.node
        _hold_one(rig)
        done, answers = _in_thread(lambda: [node.trigger_deactivate(), node.trigger_cleanup()])
        # The deactivate has started (or, without the guard, already completed and cleanup closed the
        # processor under the callback): the held callback is released only then.
        _wait(lambda: node.state_label() != "active" or done.is_set(), "the deactivate to start")
        assert "close" not in node.events and not done.is_set(), node.events
        node.release.set()
        assert done.wait(WAIT_S), "deactivate + cleanup never returned"
        assert answers == [[TransitionCallbackReturn.SUCCESS] * 2], answers
        # Event order, not timing: the callback ended before the deactivate completed and cleanup closed.
        assert node.events == ["open", "callback-start", "callback-end", "deactivate success", "close"], \
            node.events
        assert node.state_label() == "unconfigured"
        _wait(lambda: rig.received == ["in flight"], "the held callback's output (published while active)")
        info = node.infos[0]  # (msg, info) callbacks get rclpy's MessageInfo through the guard
        assert "source_timestamp" in info and "received_timestamp" in info, info


def test_shutdown_goes_on_past_a_stuck_callback_without_closing_under_it(ros_env, capfd) -> None:
    from rclpy.lifecycle import TransitionCallbackReturn

    with _spinning(ros_env, parameter_overrides=_stuck_timeout()) as rig:
        node = rig.node
        _hold_one(rig)
        done, answer = _in_thread(node.trigger_shutdown)
        # Before: shutdown waited for the callback without a bound (SIGTERM held until SIGKILL).
        assert done.wait(WAIT_S), "shutdown never returned while the callback was held"
        assert answer == [TransitionCallbackReturn.SUCCESS] and node.state_label() == "finalized"
        assert not node.returned.is_set(), "the callback was not held through the shutdown"
        assert "close" not in node.events, f"closed under the running callback: {node.events}"
        _wait(lambda: any(level == 2 and message.startswith("shutdown: the data-path callback on /held_in")
                          for level, message in rig.statuses), "the shutdown's ERROR status")
        node.release.set()  # its result meets a destroyed publisher: logged, not a fault
        _returned(node)
        # One read once the node logged (capfd loses a line written while it reads).
        assert "ignored: the node was released without it" in capfd.readouterr().err
        assert node.fault is None and "close" not in node.events, node.events  # left to process exit


def test_error_processing_goes_on_past_a_stuck_callback_and_configure_closes_after_it(ros_env, capfd) -> None:
    from rclpy.lifecycle import TransitionCallbackReturn

    with _spinning(ros_env, parameter_overrides=_stuck_timeout()) as rig:
        node = rig.node
        _hold_one(rig)
        node.latch("a device failure reported by another thread")  # -> deactivate (ERROR) -> on_error
        # Before: on_error waited for the callback without a bound.
        _wait(lambda: node.state_label() == "unconfigured", "error processing to end while the callback runs")
        assert not node.returned.is_set() and "close" not in node.events, node.events
        _wait(lambda: any(level == 2 and "the data-path callback on /held_in" in message
                          and "going on without it" in message for level, message in rig.statuses),
              "the ERROR status naming the callback")
        # The node's log says so (it said "releasing everything; configure to start again" before).
        log = capfd.readouterr().err  # the state is unconfigured once on_error logged
        assert "error processing (from active): a device failure reported by another thread; releasing " \
               "everything but what the data-path callback on /held_in" in log, log
        # What the call runs on is still open: no configure over it.
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.events == ["open", "callback-start", "deactivate error"], node.events
        node.release.set()
        _returned(node)
        assert "ignored: the node was released without it" in capfd.readouterr().err
        assert node.fault is None, node.fault  # its late end is no new fault
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.events[-2:] == ["close", "open"], node.events  # closed after the call, then opened
        assert node.trigger_shutdown() == TransitionCallbackReturn.SUCCESS
        assert node.events[-1] == "close", node.events


def test_a_failed_create_inputs_leaves_nothing_active_for_error_processing(ros_env) -> None:
    from rclpy.lifecycle import TransitionCallbackReturn

    with _spinning(ros_env) as rig:
        node = rig.node
        node.fail_create_inputs = True
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.trigger_activate() == TransitionCallbackReturn.ERROR
        # Before: the publishers activated just before and the subscription made stayed on.
        assert node.on_error_saw == (False, False), node.on_error_saw
        assert node.state_label() == "unconfigured" and node.events == ["open", "close"], node.events


def test_publishers_are_active_before_the_first_input(ros_env) -> None:
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from std_msgs.msg import String

    latched = QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    with _spinning(ros_env, input_qos=latched) as rig:
        node = rig.node
        node.hold_create_inputs = True
        node.release.set()  # the callback runs through
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        _wait(lambda: node.pub.get_subscription_count() > 0, "the peer's result subscription")
        rig.source.publish(String(data="waiting before activate"))  # kept for the node's subscription
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        assert node.events[:3] == ["open", "callback-start", "callback-end"], node.events
        _wait(lambda: rig.received == ["waiting before activate"],
              "the first input's result (dropped when the publisher was activated after the inputs)")
