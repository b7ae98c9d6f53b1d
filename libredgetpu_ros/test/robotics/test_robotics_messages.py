"""The robotics nodes' messages: header copied, markers in the image plane, annotated images drawn."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rclpy")


def test_tracker_and_looming_messages() -> None:
    from libredgetpu_ros.robotics.looming import LoomingResult
    from libredgetpu_ros.ros.robotics import messages
    from std_msgs.msg import Header

    header = Header(frame_id="cam")
    header.stamp.sec, header.stamp.nanosec = 12, 500_000_000
    assert messages.stamp_seconds(header) == 12.5
    offset = messages.offset_msg(header, -0.25, 0.5)
    assert offset.header.frame_id == "cam" and (offset.point.x, offset.point.y) == (-0.25, 0.5)
    error = messages.servo_error_msg(header, (0.5, -1.0))
    assert (error.vector.x, error.vector.y, error.header.stamp.sec) == (0.5, -1.0, 12)
    markers = messages.tracker_markers(header, (10.0, 20.0), 64, 64, 0.01)
    assert markers.markers[0].pose.position.x == pytest.approx(0.1) and len(markers.markers[1].points) == 4
    gone = messages.tracker_markers(header, None, 64, 64, 0.01)  # no valid target: its sphere deleted
    assert gone.markers[0].action == gone.markers[0].DELETE and len(gone.markers[1].points) == 4
    zones = np.arange(9, dtype=np.float32).reshape(3, 3)
    result = LoomingResult(zones, 1.7, 0.8, 12.5, "ok")
    msg = messages.looming_msg(header, result, 4)
    assert list(msg.zones) == list(range(9)) and msg.ttc_valid and msg.ttc == pytest.approx(0.8)
    assert msg.zones_per_side == 3 and msg.frames_in_history == 4 and msg.ttc_reason == "ok"
    none = messages.looming_msg(header, LoomingResult(zones, 0.9, None, 1.0, "poor_fit"), 1)
    assert not none.ttc_valid and none.ttc == 0.0 and none.ttc_reason == "poor_fit"
    cubes = messages.zone_markers(header, zones, 64, 64, 0.01)
    assert len(cubes.markers) == 9 and cubes.markers[8].color.r == pytest.approx(1.0)
    rgb = np.zeros((48, 64, 3), np.uint8)
    drawn = messages.annotate_tracker(rgb, (0.5, -0.5))
    assert drawn.any() and not rgb.any()  # drawn on a copy
    assert messages.annotate_tracker(rgb, None, "no_target")[:8].any()  # the reason written at the top
    image = messages.image_msg(header, messages.annotate_looming(rgb, zones, 1.7, 0.8))
    assert (image.width, image.height, image.encoding, image.header.frame_id) == (64, 48, "rgb8", "cam")


class _Options:
    gain, publish_markers, publish_annotated, marker_scale = 2.0, True, True, 0.01


def test_tracker_messages_say_when_there_is_no_target() -> None:
    """A valid result: offset, servo error, one target detection; not valid: no offset, zero servo error,
    an empty target array, the marker deleted."""
    from libredgetpu_ros.robotics.offsets import TrackResult
    from libredgetpu_ros.ros.robotics import messages
    from std_msgs.msg import Header

    header = Header(frame_id="cam")
    rgb = np.zeros((240, 320, 3), np.uint8)
    good = TrackResult(0.5, -0.25, (1, 2), 3, reason="ok", coverage=0.01, mass=0.97, measured=(0.5, -0.25))
    out = dict(messages.tracker_messages(header, rgb, good, 64, 64, _Options()))
    assert list(out) == ["offset", "servo_error", "target", "markers", "annotated"]
    assert (out["servo_error"].vector.x, out["servo_error"].vector.y) == (-1.0, 0.5)
    (det,) = out["target"].detections
    assert det.bbox.center.position.x == pytest.approx(1.5 * 319 / 2)
    assert det.bbox.size_x == pytest.approx((0.01 * 320 * 240) ** 0.5)
    assert det.results[0].hypothesis.score == pytest.approx(0.97)
    lost = good.invalidated("no_target", coverage=0.0, mass=0.0)
    out = dict(messages.tracker_messages(header, rgb, lost, 64, 64, _Options()))
    assert "offset" not in out and list(out["target"].detections) == []
    assert (out["servo_error"].vector.x, out["servo_error"].vector.y) == (0.0, 0.0)
    assert out["markers"].markers[0].action == out["markers"].markers[0].DELETE
    pattern = TrackResult(0.0, 0.0, (0, 0), 1, reason="ok", score=0.93, measured=(0.0, 0.0))
    (det,) = dict(messages.tracker_messages(header, rgb, pattern, 64, 64, _Options(),
                                            kernel=(8, 8)))["target"].detections
    assert (det.bbox.size_x, det.bbox.size_y) == (40.0, 30.0) and det.results[0].hypothesis.score == 0.93
