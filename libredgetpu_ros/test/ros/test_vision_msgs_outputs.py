"""vision_msgs consumers need no adapter (issue 17): plain subscribers in this process, typed with
vision_msgs only, receive the perception node's results from another process over DDS.

Detections: the node process (``_scripted_ssd_node.py``) runs the two-segment SSD on a scripted accelerator
whose answer puts class 17 (score 250/256) on one anchor, a weaker twin on an overlapping one (suppressed by
NMS) and class 0 (128/256) on a far anchor. The subscriber must get a ``vision_msgs/msg/Detection2DArray``
with those two detections: class ids "17" and "0", scores within 1e-6, box centre and size equal to the
anchors' boxes in image pixels within 1e-4 of the width (box decoding runs in float32), the frame's header on
the array and on each detection. The label map arrives as a latched ``vision_msgs/msg/LabelInfo`` to a
subscriber that joins after it was published, and again with a new ``score_threshold`` set at run time
(which also drops the weaker detection). (Classification: test_perception_compressed.py subscribes
with ``vision_msgs/msg/Classification`` across processes and checks classes and headers.)
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

NODE = Path(__file__).resolve().parent / "_scripted_ssd_node.py"
WIDTH, HEIGHT = 640, 480


def test_plain_vision_msgs_subscribers_receive_ssd_detections_and_labels(ros_env, fixture_path,
                                                                        monkeypatch) -> None:
    from rclpy.qos import QoSDurabilityPolicy, QoSProfile, QoSReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Detection2DArray, LabelInfo

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "perception"))
    from _scripted_ssd import FAR_CLASS, FAR_SCORE, FIRST_CLASS, FIRST_SCORE, scripted_ssd

    expected = scripted_ssd(fixture_path)  # the same scripted answer, for the expected boxes
    expected.device.close()
    first, _twin, far = expected.anchors

    config = ros_env.work_dir / "ssd.yaml"
    config.write_text(
        "nodes:\n"
        "  - type: perception\n"
        "    name: ssd\n"
        "    namespace: cam\n"
        "    parameters:\n"
        f"      model: {','.join(str(p) for p in expected.models)}\n"
        "      backend: edgetpu\n"
        f"      labels: {expected.labels}\n"
        "      score_threshold: 0.3\n")
    proc = ros_env.spawn([sys.executable, str(NODE), str(config), "--duration", "90"], "scripted_ssd_node")
    node, executor = ros_env.probe("vision_msgs_consumer")
    detections: list = []
    node.create_subscription(Detection2DArray, "/cam/detections", detections.append, 10)
    camera = node.create_publisher(Image, "/cam/image_raw", qos_profile_sensor_data)

    def log() -> str:
        return (ros_env.work_dir / "scripted_ssd_node.log").read_text()

    def spin_until(predicate, timeout: float, what: str, every=None) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; node log:\n{log()}"
            assert proc.poll() is None, log()
            if every is not None:
                every()
            executor.spin_once(timeout_sec=0.1)

    spin_until(lambda: camera.get_subscription_count() > 0
               and node.count_publishers("/cam/detections") > 0, 60.0, "the node to become active")
    frame = Image(width=WIDTH, height=HEIGHT, encoding="rgb8", step=3 * WIDTH, data=np.random.default_rng(
        3).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8).tobytes())
    frame.header.frame_id, frame.header.stamp.sec, frame.header.stamp.nanosec = "camera_optical", 77, 123

    def arrived() -> bool:
        return any(d.header.stamp.sec == 77 for d in detections)

    spin_until(arrived, 30.0, "the detections", every=lambda: camera.publish(frame))
    msg = next(d for d in detections if d.header.stamp.sec == 77)
    types = dict(node.get_topic_names_and_types())
    assert types["/cam/detections"] == ["vision_msgs/msg/Detection2DArray"]

    assert msg.header == frame.header
    assert len(msg.detections) == 2
    for det, anchor, class_id, score in ((msg.detections[0], first, FIRST_CLASS, FIRST_SCORE),
                                         (msg.detections[1], far, FAR_CLASS, FAR_SCORE)):
        assert det.header == frame.header
        (hypothesis,) = det.results
        assert hypothesis.hypothesis.class_id == str(class_id)
        assert hypothesis.hypothesis.score == pytest.approx(score / 256, abs=1e-6)
        xmin, ymin, xmax, ymax = expected.expected_box(anchor, WIDTH, HEIGHT)
        np.testing.assert_allclose(
            [det.bbox.center.position.x, det.bbox.center.position.y, det.bbox.size_x, det.bbox.size_y],
            [(xmin + xmax) / 2, (ymin + ymax) / 2, xmax - xmin, ymax - ymin], atol=1e-4 * WIDTH)

    # A late subscriber still gets the label map (transient local), published at configure.
    latched = QoSProfile(depth=1, reliability=QoSReliabilityPolicy.RELIABLE,
                         durability=QoSDurabilityPolicy.TRANSIENT_LOCAL)
    labels: list = []
    node.create_subscription(LabelInfo, "/cam/label_info", labels.append, latched)
    spin_until(lambda: labels, 15.0, "the latched label map")
    names = {c.class_id: c.class_name for c in labels[0].class_map}
    assert (names[FIRST_CLASS], names[FAR_CLASS]) == ("dog", "person")
    assert labels[0].threshold == pytest.approx(0.3)

    # A runtime threshold change: the label map is published again with it, and the weaker detection goes.
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    client = node.create_client(SetParameters, "/cam/ssd/set_parameters")
    assert client.wait_for_service(timeout_sec=15.0)
    future = client.call_async(SetParameters.Request(parameters=[
        Parameter("score_threshold", value=0.6).to_parameter_msg()]))
    spin_until(future.done, 15.0, "the parameter change")
    assert future.result().results[0].successful
    spin_until(lambda: labels[-1].threshold == pytest.approx(0.6), 15.0, "the relabelled threshold")
    frame.header.stamp.sec = 78
    spin_until(lambda: any(d.header.stamp.sec == 78 for d in detections), 30.0, "detections at 0.6",
               every=lambda: camera.publish(frame))
    strict = next(d for d in detections if d.header.stamp.sec == 78)
    assert [d.results[0].hypothesis.class_id for d in strict.detections] == [str(FIRST_CLASS)]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0, log()
