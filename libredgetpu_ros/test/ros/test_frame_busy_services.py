"""Main-executor handlers never wait for good on a frame in progress (``ros/frame_busy.py``).

The flow node's ``~/reset_heading`` and runtime parameter changes take the compass lock, the recognition
node's ``~/enroll`` its frame lock (held across a frame's embedding and match), the perception node's
runtime parameters the pipeline's lock, the tracker node's ``~/set_color`` the tracker's frame lock (held
across its inference); a frame holds that lock across the model's invoke. Here (real nodes in process, real
models on the cpu backend, configured) another thread holds the lock as a stuck frame would
(``_held_lock.py``): each handler answers "a frame is in progress" (success false, nothing changed) within
the bound, and does its work once the lock is free. Before, each blocked the node's main executor as long
as the frame: no deactivate, no diagnostics, no stuck exit (the tracker's swap: on an Edge TPU, whose
staging waits for the frame's inference on the device; ``test_frame_busy_held.py`` shows that wait over
DDS for the MatMul engine's swaps). The recognition node's ``~/load`` reads its file with the frame lock
free: a frame completes while the read is held.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

held_lock = load_helper(Path(__file__).resolve().parent / "_held_lock.py")
_answer_while_held = held_lock.answer_while_held


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
        busy = _answer_while_held(processor._frame_lock, lambda: node._on_enroll(request, Enroll.Response()))
        assert not busy.success and "frame is in progress" in busy.message, busy
        assert len(processor.db) == 0  # the database unchanged
        done = node._on_enroll(request, Enroll.Response())
        assert done.success and done.entries == 1, done.message
    finally:
        node.teardown()
        node.destroy_node()


def test_recognition_load_reads_its_file_while_frames_carry_on(ros_env, tmp_path, monkeypatch) -> None:
    """``~/load`` reads and checks its file with the frame lock free and holds it for the swap only: a
    frame completes while the file's read is held (a large database, a hung network mount), then the load
    succeeds; a bad file is refused for what it is even while a frame holds the lock. Before, the read ran
    inside the frame lock: the frame (the camera thread) waited for the whole read."""
    import threading

    from libredgetpu_ros.robotics import embedding
    from libredgetpu_ros.ros.recognition.node import RecognitionNode
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter
    from std_msgs.msg import Header

    from libredgetpu_ros_interfaces.srv import FilePath

    params = {"backend": "cpu", "template": 256}
    node = RecognitionNode("recognition_load", context=ros_env.init_rclpy(),
                           parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    release = threading.Event()
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        processor: Any = node.processor
        rgb = np.random.default_rng(4).integers(0, 256, (128, 128, 3), dtype=np.uint8)
        database = tmp_path / "db.npz"
        processor.db.add("cat", processor.embed(rgb))
        processor.db.save(database)
        processor.db.remove("cat")
        junk = tmp_path / "junk.npz"
        junk.write_bytes(b"PK\x03\x04 truncated")
        refused = _answer_while_held(processor._frame_lock, lambda: node._on_load(
            FilePath.Request(path=str(junk)), FilePath.Response()))
        assert not refused.success and "not a readable .npz" in refused.message, refused.message

        reading, lock_held_in_read = threading.Event(), []
        read_database = embedding.read_database

        def held_read(path: Any, max_vector_bytes: int) -> Any:  # the file system's read, held
            lock_held_in_read.append(processor._frame_lock.locked())
            reading.set()
            release.wait(held_lock.WAIT_S)
            return read_database(path, max_vector_bytes)

        monkeypatch.setattr(embedding, "read_database", held_read)
        answers: list[Any] = []
        loader = threading.Thread(target=lambda: answers.append(node._on_load(
            FilePath.Request(path=str(database)), FilePath.Response())), daemon=True)
        loader.start()
        assert reading.wait(held_lock.WAIT_S), "~/load never read its file"
        frames: list[Any] = []
        camera = threading.Thread(target=lambda: frames.append(processor.frame(Header(), rgb)), daemon=True)
        camera.start()
        camera.join(held_lock.WAIT_S)
        assert frames, "the frame waited for ~/load's file read: the read ran inside the frame lock"
        assert lock_held_in_read == [False]
        release.set()
        loader.join(held_lock.WAIT_S)
        assert answers and answers[0].success and "loaded 1 entries" in answers[0].message, answers
        result = processor.frame(Header(), rgb).messages[0][1]
        assert [h.class_id for h in result.results] == ["cat"]  # the loaded database matched
    finally:
        release.set()
        node.teardown()
        node.destroy_node()


def test_perception_parameters_answer_while_a_frame_holds_the_pipeline(ros_env, fixture_path) -> None:
    from libredgetpu_ros.ros.perception.node import PerceptionNode
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    model = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"
    node = PerceptionNode("perception_busy", context=ros_env.init_rclpy(), parameter_overrides=[
        Parameter("model", value=str(fixture_path(model))), Parameter("backend", value="cpu")])
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        processor: Any = node.processor
        before = node.get_parameter("score_threshold").value
        result = _answer_while_held(processor._lock, lambda: node.set_parameters(
            [Parameter("score_threshold", value=0.3)])[0])
        assert not result.successful and "frame is in progress" in result.reason, result
        assert node.get_parameter("score_threshold").value == before  # nothing changed
        assert node.set_parameters([Parameter("score_threshold", value=0.3)])[0].successful  # free: applied
    finally:
        node.teardown()
        node.destroy_node()


def test_tracker_set_color_answers_while_a_frame_holds_the_tracker(ros_env) -> None:
    from libredgetpu_ros.ros.robotics.tracker_node import TrackerNode
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    from libredgetpu_ros_interfaces.srv import SetColor

    params = {"module": "spot", "template": "color_red_64x64", "backend": "cpu"}
    node = TrackerNode("tracker_busy", context=ros_env.init_rclpy(),
                       parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        processor: Any = node.processor
        version = processor.tracker.runner.store.version
        request = SetColor.Request(r=0.0, g=1.0, b=0.0)
        busy = _answer_while_held(processor._frame_lock,
                                  lambda: node._on_set_color(request, SetColor.Response()))
        assert not busy.success and "frame is in progress" in busy.message, busy
        assert processor.tracker.runner.store.version == version  # nothing swapped
        done = node._on_set_color(request, SetColor.Response())
        assert done.success and done.version == version + 1, done.message
    finally:
        node.teardown()
        node.destroy_node()
