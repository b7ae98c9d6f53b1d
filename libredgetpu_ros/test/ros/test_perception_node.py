"""The perception node as a separate process over real (localhost-only) DDS, driven like a robot would.

The test process plays camera and supervisor: it publishes fixture images, drives the lifecycle through
``/<node>/change_state``, changes parameters with ``SetParameters`` and reads results and /diagnostics.
Poses are checked against Google's PoseNet decoder reference (model-input coordinates 641x481, scaled back to
the 1920x1278 image): pose scores within 0.01, scores of confident keypoints (ref >= 0.5) within 0.02 and
their positions within 2 model-input pixels.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

supervision = load_helper(Path(__file__).resolve().parent / "_lifecycle_supervisor.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(90)]

POSENET = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"
REFERENCE = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_reference.csv"
MODEL_W, MODEL_H = 641, 481
WAIT_S = 15.0  # bound on any single wait (discovery of a new process can take a few seconds)


class Supervisor(supervision.LifecycleSupervisor):
    """Camera publisher, lifecycle/parameter client and result listener in the test process."""

    def __init__(self, ros_env: Any, node_name: str) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from libredgetpu_ros.ros.perception_node import RESULT_QOS
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image

        from libredgetpu_ros_interfaces.msg import PersonPoseArray

        super().__init__(ros_env, "test_supervisor", f"/{node_name}", WAIT_S)
        self.camera = self.node.create_publisher(Image, "image_raw", qos_profile_sensor_data)
        self.poses: list[Any] = []
        self.diagnostics: list[dict[str, str]] = []
        self.timings: dict[tuple[int, int], dict[str, float]] = {}  # the node's ~/timing, by frame stamp
        self.node.create_subscription(PersonPoseArray, "poses", self.poses.append, RESULT_QOS)
        self.node.create_subscription(DiagnosticArray, f"/{node_name}/timing", self._on_timing, RESULT_QOS)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        self._stamp = 0

    def _on_diag(self, msg: Any) -> None:
        for st in msg.status:
            if st.name.endswith(": perception"):
                self.diagnostics.append({kv.key: kv.value for kv in st.values} | {"_message": st.message})

    def _on_timing(self, msg: Any) -> None:
        stamp = (msg.header.stamp.sec, msg.header.stamp.nanosec)
        self.timings[stamp] = {kv.key: float(kv.value) for kv in msg.status[0].values}

    def image(self, rgb: np.ndarray, encoding: str = "rgb8", data: bytes | None = None) -> Any:
        """A stamped camera frame; every frame gets a unique stamp so results can be matched to it."""
        from sensor_msgs.msg import Image

        self._stamp += 1
        msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding=encoding, step=rgb.shape[1] * 3,
                    data=rgb.tobytes() if data is None else data)
        msg.header.frame_id = "test_camera"
        msg.header.stamp.sec, msg.header.stamp.nanosec = 1000 + self._stamp, 4242
        return msg

    def result_for(self, frame: Any) -> Any:
        """Publish ``frame`` (again each second) until the poses with its stamp arrive."""
        stamp = (frame.header.stamp.sec, frame.header.stamp.nanosec)

        def match() -> Any:
            return next((p for p in self.poses
                         if (p.header.stamp.sec, p.header.stamp.nanosec) == stamp), None)

        return self.wait_for(f"poses for stamp {stamp}", match, every=lambda: self.camera.publish(frame))


def _params_file(tmp: Path, model: str, **extra: Any) -> Path:
    import yaml

    # 0.2 is the PoseNet decoder op's own threshold, with which Google's reference was made (it also
    # shapes pose scores, not only which poses are kept).
    params = {"model": model, "backend": "cpu", "task": "pose", "score_threshold": 0.2,
              "diagnostics_period": 0.3, **extra}
    path = tmp / "perception_test.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    return path


def _spawn_node(ros_env: Any, params: Path, name: str) -> Any:
    return ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.perception_node", "--ros-args",
                          "-r", f"__node:={name}", "--params-file", str(params)], name)


def _reference(path: Path) -> dict[int, tuple[float, dict[str, tuple[float, float, float]]]]:
    poses: dict[int, tuple[float, dict[str, tuple[float, float, float]]]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            _, kps = poses.setdefault(int(row["pose_id"]), (float(row["pose_score"]), {}))
            kps[row["keypoint_label"].lower()] = (float(row["keypoint_x"]), float(row["keypoint_y"]),
                                                 float(row["keypoint_score"]))
    return poses


def _check_against_reference(msg: Any, reference: dict, width: int, height: int) -> None:
    sx, sy = width / MODEL_W, height / MODEL_H
    assert len(msg.poses) == len(reference)
    for pid, (ref_score, ref_kps) in sorted(reference.items()):
        pose = msg.poses[pid]
        assert pose.score == pytest.approx(ref_score, abs=0.01)
        got = {k.name: k for k in pose.keypoints}
        assert set(got) == set(ref_kps)
        for name, (x, y, score) in ref_kps.items():
            k = got[name]
            assert k.score == pytest.approx(score, abs=0.02), name
            if score >= 0.5:
                assert abs(k.x / sx - x) <= 2.0 and abs(k.y / sy - y) <= 2.0, (name, k.x / sx, k.y / sy, x, y)


def test_lifecycle_poses_thresholds_and_bad_frames(ros_env, fixture_path, tmp_path: Path) -> None:
    from libredgetpu_ros.perception.images import load_image

    rgb = load_image(fixture_path("images/test_couple.jpg"))
    height, width = rgb.shape[:2]
    reference = _reference(fixture_path(REFERENCE))
    _spawn_node(ros_env, _params_file(tmp_path, str(fixture_path(POSENET))), "perception_test")
    sup = Supervisor(ros_env, "perception_test")

    assert sup.state() == "unconfigured"
    assert sup.transition("configure")
    assert sup.state() == "inactive"

    # Inactive: frames are ignored and no result is published; /diagnostics (a plain publisher, as every
    # node's: ros/lifecycle.py) goes on, saying so.
    for _ in range(3):
        sup.camera.publish(sup.image(rgb))
        sup.spin_for(0.3)
    sup.wait_for("an inactive status", lambda: sup.diagnostics)
    assert sup.poses == []
    assert all(d["_message"] == "inactive" and d["frames_received"] == "0" and d["frames_processed"] == "0"
               and d["subscribed_reliability"] == "" for d in sup.diagnostics), sup.diagnostics

    assert sup.transition("activate")
    frame = sup.image(rgb)
    result = sup.result_for(frame)
    assert result.header.frame_id == "test_camera"
    assert (result.header.stamp.sec, result.header.stamp.nanosec) == (frame.header.stamp.sec, 4242)
    _check_against_reference(result, reference, width, height)

    # Per-frame timing, stamped like the frame: the backend's stages and where the rest of the time went.
    timing = sup.wait_for("the frame's ~/timing", lambda: sup.timings.get((frame.header.stamp.sec, 4242)))
    assert {"preprocess_ms", "inference_ms", "postprocess_ms", "total_ms", "wait_ms", "queued_ms",
            "convert_ms", "publish_ms", "node_ms"} <= set(timing)
    assert timing["inference_ms"] > 0.0 and timing["total_ms"] >= timing["inference_ms"]
    # node_ms (callback -> published) spans hand-off, conversion, pipeline and publishing
    assert timing["node_ms"] >= timing["total_ms"] + timing["wait_ms"] + timing["publish_ms"] - 0.01

    # Runtime threshold: the second person (pose score 0.73) falls below 0.8; bad values are refused, by the
    # table (range) and by the decoder (PoseNet needs a threshold < 1).
    rejected = sup.set_param("score_threshold", 1.5)
    assert not rejected.successful and "score_threshold" in rejected.reason
    rejected = sup.set_param("score_threshold", 1.0)
    assert not rejected.successful and "score_threshold" in rejected.reason
    model_change = sup.set_param("model", "/elsewhere/model_edgetpu.tflite")
    assert not model_change.successful and "cleanup" in model_change.reason
    assert sup.set_param("score_threshold", 0.8).successful
    strict = sup.result_for(sup.image(rgb))
    assert len(strict.poses) == 1 and strict.poses[0].score >= 0.8
    assert strict.poses[0].keypoints[0].x == pytest.approx(result.poses[0].keypoints[0].x, abs=1e-6)

    # Bad frames: unknown encoding, short data. The node logs, counts them per cause and keeps working.
    sup.camera.publish(sup.image(rgb, encoding="32FC1"))
    sup.spin_for(0.2)
    sup.camera.publish(sup.image(rgb, data=rgb.tobytes()[: rgb.nbytes // 2]))
    sup.spin_for(0.2)
    assert len(sup.result_for(sup.image(rgb)).poses) == 1
    diag = sup.wait_for("bad input and 3 results in diagnostics", lambda: next(
        (d for d in reversed(sup.diagnostics) if int(d.get("frames_processed", 0)) >= 3
         and int(d.get("bad_input_encoding", 0)) >= 1 and int(d.get("bad_input_size", 0)) >= 1), None))
    assert diag["backend"] == "cpu" and diag["_message"] == "2 bad input frames"
    assert float(diag["inference_ms"]) > 0.0
    # More frames of the same cause are counted, not logged again (one line per cause per 10 s).
    again = sup.image(rgb, encoding="32FC1")
    sup.wait_for("more encoding errors counted",
                 lambda: any(int(d.get("bad_input_encoding", 0)) >= 3 for d in sup.diagnostics),
                 every=lambda: sup.camera.publish(again))
    log = (ros_env.work_dir / "perception_test.log").read_text()
    assert log.count("bad input frame (encoding") == 1, log[-3000:]

    # Deactivated: frames are ignored again.
    assert sup.transition("deactivate")
    assert sup.state() == "inactive"
    seen = len(sup.poses)
    for _ in range(3):
        sup.camera.publish(sup.image(rgb))
        sup.spin_for(0.3)
    assert len(sup.poses) == seen

    assert sup.transition("cleanup")
    assert sup.state() == "unconfigured"


def test_configure_with_missing_model_fails_and_stays_unconfigured(ros_env, fixture_path,
                                                                   tmp_path: Path) -> None:
    missing = tmp_path / "no_such_model_edgetpu.tflite"
    proc = _spawn_node(ros_env, _params_file(tmp_path, str(missing)), "perception_missing")
    sup = Supervisor(ros_env, "perception_missing")

    assert not sup.transition("configure")
    assert sup.state() == "unconfigured"
    assert proc.poll() is None  # the process lives on, waiting for a usable configuration
    # Unconfigured, the model may change; configuring again then succeeds.
    assert sup.set_param("model", str(fixture_path(POSENET))).successful
    assert sup.transition("configure")
    assert sup.state() == "inactive"
    log = (ros_env.work_dir / "perception_missing.log").read_text()
    assert "configure failed" in log and str(missing) in log


def test_device_lost_while_processing_releases_the_device_and_unconfigures(ros_env, fixture_path,
                                                                           monkeypatch) -> None:
    """Fault injection in process: the backend raises DeviceLostError on a frame (as when a USB accelerator
    is unplugged); the node goes through ErrorProcessing, closes the pipeline and lands in unconfigured."""
    from libredgetpu_ros.errors import DeviceLostError
    from libredgetpu_ros.ros.perception_node import PerceptionNode
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    context = ros_env.init_rclpy()
    node = PerceptionNode("perception_fault", context=context, parameter_overrides=[
        Parameter("model", value=str(fixture_path(POSENET))), Parameter("backend", value="cpu")])
    camera_node = Node("fault_camera", context=context)
    executor = SingleThreadedExecutor(context=context)  # a plain executor runs the camera group too
    executor.add_node(node)
    executor.add_node(camera_node)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        pipeline = node.processor.pipeline
        closed = []
        monkeypatch.setattr(pipeline, "close", lambda: closed.append(True))

        def unplugged(prepared: object) -> None:  # the backend's stage (run), as a device lost mid-inference
            raise DeviceLostError("Edge TPU 2-1.4 disappeared (test)")

        monkeypatch.setattr(pipeline, "run", unplugged)
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        camera = camera_node.create_publisher(Image, "image_raw", qos_profile_sensor_data)
        frame = Image(height=4, width=4, encoding="rgb8", step=12, data=bytes(48))
        end = time.monotonic() + WAIT_S
        while node.state_label() != "unconfigured" and time.monotonic() < end:
            camera.publish(frame)
            executor.spin_once(timeout_sec=0.1)
        assert node.state_label() == "unconfigured"
        assert closed == [True] and node.processor is None
    finally:
        executor.shutdown()
        camera_node.destroy_node()
        node.destroy_node()


def test_a_slow_model_gets_the_newest_frame_and_every_skipped_frame_is_counted(ros_env, fixture_path,
                                                                              monkeypatch) -> None:
    """In process, one executor thread: while a frame is processed, 12 more arrive; the reader keeps 5 of
    them (sensor-data depth). The next frame processed must be the newest, and all 11 skipped frames counted:
    4 taken and skipped, 7 overwritten in the reader (from the publisher's sequence numbers)."""
    from libredgetpu_ros.ros.perception_node import PerceptionNode
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    context = ros_env.init_rclpy()
    node = PerceptionNode("perception_slow", context=context, parameter_overrides=[
        Parameter("model", value=str(fixture_path(POSENET))), Parameter("backend", value="cpu")])
    camera_node = Node("slow_camera", context=context)
    executor = SingleThreadedExecutor(context=context)
    for n in (node, camera_node):
        executor.add_node(n)
    processed: list[int] = []
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        process = node._process_frame
        monkeypatch.setattr(node, "_process_frame", lambda frame, skipped: (
            processed.append(frame.msg.header.stamp.sec), process(frame, skipped)))
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        camera = camera_node.create_publisher(Image, "image_raw", qos_profile_sensor_data)
        end = time.monotonic() + WAIT_S
        while camera.get_subscription_count() < 1 and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)

        def frame(sec: int) -> Image:
            msg = Image(height=48, width=64, encoding="rgb8", step=192, data=bytes(64 * 48 * 3))
            msg.header.stamp.sec = sec
            return msg

        camera.publish(frame(1))
        while not processed and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.1)
        for sec in range(2, 14):  # nothing spins meanwhile: as if frame 1 were still being processed
            camera.publish(frame(sec))
        while len(processed) < 2 and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.1)
        executor.spin_once(timeout_sec=0.3)
        stats = node.stats
        assert processed == [1, 13]
        assert (stats.received, stats.processed, stats.dropped, stats.lost) == (6, 2, 11, 7)
    finally:
        executor.shutdown()
        camera_node.destroy_node()
        node.destroy_node()


def test_segmentation_mask_and_overlay_match_the_pipeline_in_process(ros_env, fixture_path,
                                                                    tmp_path: Path) -> None:
    """DeepLab in the node process vs the same model run by LiteRT in this process: the mono8 class-id image
    must be identical pixel for pixel, and the overlay the 50 % PASCAL-palette blend of it."""
    from libredgetpu_ros.perception.draw import colorize_mask
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig
    from libredgetpu_ros.ros.conversions import overlay
    from libredgetpu_ros.ros.image_msgs import image_to_rgb, rgb_to_image
    from libredgetpu_ros.ros.perception_node import RESULT_QOS
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    model = str(fixture_path("deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite"))
    params = _params_file(tmp_path, model, task="segment", publish_overlay=True, score_threshold=0.5)
    _spawn_node(ros_env, params, "perception_seg")
    rgb = load_image(fixture_path("images/cat.bmp"))
    with PerceptionPipeline.from_config(PipelineConfig(model=model, backend="cpu", task="segment")) as pipe:
        expected = pipe.process(rgb).mask

    sup = Supervisor(ros_env, "perception_seg")
    masks: list[Image] = []
    overlays: list[Image] = []
    sup.node.create_subscription(Image, "segmentation", masks.append, RESULT_QOS)
    sup.node.create_subscription(Image, "segmentation_overlay", overlays.append, RESULT_QOS)
    assert sup.transition("configure") and sup.transition("activate")
    camera = sup.node.create_publisher(Image, "image_raw", qos_profile_sensor_data)
    frame = rgb_to_image(rgb, sup.image(rgb).header)
    sup.wait_for("mask and overlay", lambda: masks and overlays, every=lambda: camera.publish(frame))

    mask = masks[0]
    assert (mask.encoding, mask.width, mask.height, mask.step) == ("mono8", rgb.shape[1], rgb.shape[0],
                                                                   rgb.shape[1])
    assert mask.header.stamp == frame.header.stamp and mask.header.frame_id == "test_camera"
    got = np.frombuffer(mask.data, np.uint8).reshape(rgb.shape[:2])
    np.testing.assert_array_equal(got, expected)
    assert 8 in np.unique(got)  # PASCAL VOC class 8 = cat
    np.testing.assert_array_equal(image_to_rgb(overlays[0]), overlay(rgb, colorize_mask(expected)))
