"""Main-executor handlers never wait for good on a frame in progress (``ros/frame_busy.py``).

The flow node's ``~/reset_heading`` and runtime parameter changes take the compass lock, the recognition
node's ``~/enroll`` the extractor's; a frame holds that lock across the model's invoke. Here (real nodes in
process, real models on the cpu backend, configured) another thread holds the lock as a stuck frame would:
each handler answers "a frame is in progress" (success false, nothing changed) within the bound, and does
its work once the lock is free. Before, each blocked the node's main executor as long as the frame: no
deactivate, no diagnostics, no stuck exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

WAIT_S = 15.0  # the bound (1 s) with room on a loaded machine; an unbounded wait never answers


def _answer_while_held(lock: threading.Lock, call: Callable[[], Any]) -> Any:
    """``call()`` run on its own thread while another thread holds ``lock``; its result, or a failure when
    it did not return within WAIT_S (the lock is released before failing, so the call ends)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(WAIT_S * 2)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(WAIT_S)
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    try:
        caller.start()
        caller.join(WAIT_S)
        assert answers, f"the handler did not answer within {WAIT_S:g} s with the lock held: blocked"
        return answers[0]
    finally:
        release.set()
        holder.join(WAIT_S)
        caller.join(WAIT_S)


def test_flow_reset_heading_and_parameters_answer_while_a_frame_holds_the_compass(ros_env) -> None:
    from libredgetpu_ros.ros.flow.node import FlowNode
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter
    from std_srvs.srv import Trigger

    params = {"model": "gabor_64x64_p4", "backend": "cpu", "fov_deg": 60.0}
    node = FlowNode("flow_busy", context=ros_env.init_rclpy(),
                    parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        processor: Any = node.processor
        processor.compass.heading_deg = 12.5
        min_texture = processor.compass.flow.min_texture
        busy = _answer_while_held(processor._lock,
                                  lambda: node._on_reset_heading(Trigger.Request(), Trigger.Response()))
        assert not busy.success and "frame is in progress" in busy.message, busy
        assert processor.compass.heading_deg == 12.5  # nothing changed
        result = _answer_while_held(processor._lock, lambda: node.set_parameters(
            [Parameter("min_texture", value=min_texture + 1.0)])[0])
        assert not result.successful and "frame is in progress" in result.reason, result
        assert processor.compass.flow.min_texture == min_texture
        done = node._on_reset_heading(Trigger.Request(), Trigger.Response())  # the lock free: done
        assert done.success and processor.compass.heading_deg == 0.0, done
    finally:
        node.teardown()
        node.destroy_node()


def test_recognition_enroll_answers_while_a_frame_holds_the_extractor(ros_env) -> None:
    from libredgetpu_ros.ros.recognition.node import RecognitionNode
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    from libredgetpu_ros_interfaces.srv import Enroll

    params = {"backend": "cpu", "template": 256}
    node = RecognitionNode("recognition_busy", context=ros_env.init_rclpy(),
                           parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        processor: Any = node.processor
        processor.last_rgb = np.random.default_rng(3).integers(0, 256, (128, 128, 3), dtype=np.uint8)
        request = Enroll.Request(label="cat")
        busy = _answer_while_held(processor._embed_lock, lambda: node._on_enroll(request, Enroll.Response()))
        assert not busy.success and "frame is in progress" in busy.message, busy
        assert len(processor.db) == 0  # the database unchanged
        done = node._on_enroll(request, Enroll.Response())
        assert done.success and done.entries == 1, done.message
    finally:
        node.teardown()
        node.destroy_node()
