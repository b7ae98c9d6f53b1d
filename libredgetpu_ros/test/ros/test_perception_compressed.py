"""The perception node on a compressed camera (`input_type: compressed`), across processes over real DDS.

`config/perception_classify.yaml` subscribes to `image_raw/compressed` by default; this checks that path live:
JPEG and PNG frames in, the same top-1 class as the in-process pipeline on the decoded pixels, the frame's
header copied, and a frame that does not decode counted as bad input without stopping the node.
"""

from __future__ import annotations

import signal
import time

import pytest

MODEL = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
LABELS = "labels/imagenet_labels.txt"


@pytest.mark.ros
def test_compressed_frames_are_classified_like_the_pipeline(ros_env, fixture_path) -> None:
    import cv2
    from diagnostic_msgs.msg import DiagnosticArray
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig
    from libredgetpu_ros.ros.perception_node import RESULT_QOS
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CompressedImage
    from vision_msgs.msg import Classification

    proc = ros_env.spawn_bringup(
        "nodes:\n"
        "  - type: perception\n"
        "    name: classifier\n"
        "    namespace: cam\n"
        "    parameters:\n"
        f"      model: {fixture_path(MODEL)}\n"
        "      backend: cpu\n"
        f"      labels: {fixture_path(LABELS)}\n"
        "      input_topic: image_raw/compressed\n"
        "      input_type: compressed\n"
        "      score_threshold: 0.0\n"
        "      diagnostics_period: 0.2\n"
    )
    node, executor = ros_env.probe("compressed_camera")
    results: list[Classification] = []
    bad_inputs: list[str] = []

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            bad_inputs.extend(kv.value for kv in status.values if kv.key == "bad_input")

    node.create_subscription(Classification, "/cam/classification", results.append, RESULT_QOS)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
    camera = node.create_publisher(CompressedImage, "/cam/image_raw/compressed", qos_profile_sensor_data)

    rgb = load_image(fixture_path("images/cat.bmp"))
    frames = {}
    for i, ext in enumerate((".jpg", ".png")):
        ok, encoded = cv2.imencode(ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        assert ok
        frames[ext] = (i + 1, encoded.tobytes())

    def send(stamp_sec: int, fmt: str, data: bytes) -> None:
        msg = CompressedImage(format=fmt, data=data)
        msg.header.stamp.sec, msg.header.frame_id = stamp_sec, "camera"
        camera.publish(msg)

    def spin_until(predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; bringup log:\n" + (
                (ros_env.work_dir / "bringup.log").read_text())
            assert proc.poll() is None, (ros_env.work_dir / "bringup.log").read_text()
            executor.spin_once(timeout_sec=0.1)

    def active() -> bool:
        return camera.get_subscription_count() > 0 and node.count_publishers("/cam/classification") > 0

    spin_until(active, 30.0, "the node to become active")
    time.sleep(0.3)  # the far sides of the matches

    def delivered(stamp: int, fmt: str, data: bytes) -> bool:
        """True once the frame's result arrived; else (re)send it (best-effort camera QoS)."""
        if any(r.header.stamp.sec == stamp for r in results):
            return True
        send(stamp, fmt, data)
        return False

    for ext, (stamp, data) in frames.items():
        fmt = ext.strip(".")
        spin_until(lambda s=stamp, f=fmt, d=data: delivered(s, f, d), 20.0, f"the {ext} result")
    with PerceptionPipeline.from_config(PipelineConfig(model=fixture_path(MODEL), backend="cpu",
                                                       labels=fixture_path(LABELS))) as pipeline:
        for ext, (stamp, _data) in frames.items():
            ok, encoded = cv2.imencode(ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            decoded = cv2.cvtColor(cv2.imdecode(encoded, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
            want = pipeline.process(decoded).classes[0]
            got = next(r for r in results if r.header.stamp.sec == stamp)
            assert got.header.frame_id == "camera"
            assert got.results[0].class_id == str(want.class_id), ext
            assert got.results[0].score == pytest.approx(want.score, abs=1e-6)
    # A frame that is not an image: logged, counted in diagnostics, no result, and the node keeps going.
    def counted() -> bool:
        if any(v not in ("", "0") for v in bad_inputs):
            return True
        send(100, "jpeg", b"not a jpeg")
        return False

    spin_until(counted, 10.0, "bad_input in diagnostics")
    assert not any(r.header.stamp.sec == 100 for r in results)
    jpeg_stamp, jpeg = frames[".jpg"]
    spin_until(lambda: delivered(jpeg_stamp + 10, "jpeg", jpeg), 20.0, "a result after the bad frame")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    executor.shutdown()
    node.destroy_node()
