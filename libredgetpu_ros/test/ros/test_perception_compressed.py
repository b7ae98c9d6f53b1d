"""The perception node on a compressed camera (`transport: compressed`, image_transport's naming: it reads
`<input_topic>/compressed`), across processes over real DDS.

`config/perception_classify.yaml` subscribes to `image_raw/compressed` by default; this checks that path live:
JPEG and PNG frames in, the same classes as the in-process pipeline on the decoded pixels, received by a plain
`vision_msgs/msg/Classification` subscriber (class ids as strings) with the frame's header copied, and a frame
that does not decode counted as bad input without stopping the node.
"""

from __future__ import annotations

import pytest

from ._perception_probe import LABELS, MODEL, Probe, bringup_classifier


@pytest.mark.ros
def test_compressed_frames_are_classified_like_the_pipeline(ros_env, fixture_path) -> None:
    import cv2
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline
    from sensor_msgs.msg import CompressedImage

    proc = bringup_classifier(ros_env, fixture_path, "", "image_raw", labels=True, transport="compressed")
    probe = Probe(ros_env, proc, CompressedImage, "/cam/image_raw/compressed")

    rgb = load_image(fixture_path("images/cat.bmp"))
    frames = {}
    for i, ext in enumerate((".jpg", ".png")):
        ok, encoded = cv2.imencode(ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        assert ok
        frames[ext] = (i + 1, encoded.tobytes())

    def frame(stamp_sec: int, fmt: str, data: bytes) -> CompressedImage:
        msg = CompressedImage(format=fmt, data=data)
        msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id = stamp_sec, 250, "camera"
        return msg

    def result(stamp: int):
        return next((r for r in probe.results if r.header.stamp.sec == stamp), None)

    for ext, (stamp, data) in frames.items():
        msg = frame(stamp, ext.strip("."), data)
        probe.spin_until(lambda s=stamp: result(s), 20.0, f"the {ext} result",
                         every=lambda m=msg: probe.camera.publish(m))
    from libredgetpu_ros.ros.perception_node import PARAMS, pipeline_config

    # The pipeline as the node opens it (its parameters: score_threshold 0, top_k and max_results defaults).
    params = PARAMS.values_type(**(PARAMS.defaults() | {
        "model": str(fixture_path(MODEL)), "backend": "cpu", "labels": str(fixture_path(LABELS)),
        "score_threshold": 0.0}))
    with PerceptionPipeline.from_config(pipeline_config(params)) as pipeline:
        for ext, (stamp, _data) in frames.items():
            ok, encoded = cv2.imencode(ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            decoded = cv2.cvtColor(cv2.imdecode(encoded, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
            want = pipeline.process(decoded).classes
            got = result(stamp)
            assert got.header == frame(stamp, "", b"").header, ext  # stamp and frame_id copied
            assert [r.class_id for r in got.results] == [str(c.class_id) for c in want], ext
            assert [r.score for r in got.results] == pytest.approx([c.score for c in want], abs=1e-6)
    # A frame that is not an image: logged, counted in diagnostics, no result, and the node keeps going.
    bad = frame(100, "jpeg", b"not a jpeg")
    probe.spin_until(lambda: probe.diag.get("bad_input", "0") != "0", 10.0, "bad_input in diagnostics",
                     every=lambda: probe.camera.publish(bad))
    assert result(100) is None and probe.diag["bad_input_format"] != "0"  # neither PNG nor JPEG
    jpeg_stamp, jpeg = frames[".jpg"]
    again = frame(jpeg_stamp + 10, "jpeg", jpeg)
    probe.spin_until(lambda: result(jpeg_stamp + 10), 20.0, "a result after the bad frame",
                     every=lambda: probe.camera.publish(again))
    probe.stop()
