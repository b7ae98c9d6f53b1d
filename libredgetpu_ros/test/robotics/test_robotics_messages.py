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
    canvas = messages.MarkerCanvas(64, 64, 64, 64, 0.01)  # no CameraInfo: metres per template pixel
    markers = messages.tracker_markers(header, (10.0, 20.0), canvas)
    assert markers.markers[0].pose.position.x == pytest.approx(0.1) and len(markers.markers[1].points) == 4
    gone = messages.tracker_markers(header, None, canvas)  # no valid target: its sphere deleted
    assert gone.markers[0].action == gone.markers[0].DELETE and len(gone.markers[1].points) == 4
    zones = np.arange(9, dtype=np.float32).reshape(3, 3)
    result = LoomingResult(zones, 1.7, 0.8, 12.5, "ok")
    msg = messages.looming_msg(header, result, 4)
    assert list(msg.zones) == list(range(9)) and msg.ttc_valid and msg.ttc == pytest.approx(0.8)
    assert msg.zones_per_side == 3 and msg.frames_in_history == 4 and msg.ttc_reason == "ok"
    none = messages.looming_msg(header, LoomingResult(zones, 0.9, None, 1.0, "poor_fit"), 1)
    assert not none.ttc_valid and none.ttc == 0.0 and none.ttc_reason == "poor_fit"
    cubes = messages.zone_markers(header, zones, canvas)
    assert len(cubes.markers) == 9 and cubes.markers[8].color.r == pytest.approx(1.0)
    rgb = np.zeros((48, 64, 3), np.uint8)
    image = messages.image_msg(header, messages.annotate_looming(rgb, result))
    assert (image.width, image.height, image.encoding, image.header.frame_id) == (64, 48, "rgb8", "cam")


def test_annotated_images_say_what_is_valid() -> None:
    """The tracker's picture: a valid result's target circled where its offset points, an invalid one's
    decoded position only as a thin grey circle and the reason written; the looming picture: the TTC in
    seconds, or the reason there is none."""
    from libredgetpu_ros.robotics.looming import LoomingResult
    from libredgetpu_ros.robotics.offsets import TrackResult
    from libredgetpu_ros.ros.robotics import messages

    rgb = np.zeros((240, 320, 3), np.uint8)
    found = TrackResult(0.5, 0.5, raw=(0, 0), version=0, valid=True, reason="ok", measured=(0.5, 0.5))
    # a 64x48 spot template: offset 0.5 is template pixel (1.5 * 63 / 2, 1.5 * 47 / 2) = (47.25, 35.25), frame
    # pixel ((47.25 + 0.5) * 5 - 0.5, (35.25 + 0.5) * 5 - 0.5)
    tx, ty = 238, 178

    def at_target(image: np.ndarray, x: int = tx, y: int = ty) -> np.ndarray:
        return image[y - 12:y + 13, x - 12:x + 13].reshape(-1, 3)

    drawn = messages.annotate_tracker(rgb, found, 64, 48)
    assert not rgb.any() and (at_target(drawn) == (0, 255, 255)).all(axis=1).any()  # on a copy, circled
    # a pattern's offsets span the patch corners: (1, 1) is the last 16x16 patch, centred on template pixel
    # (64 - 16 + 7.5, 48 - 16 + 7.5) = (55.5, 39.5), frame (279.5, 199.5); not the frame's corner
    corner = TrackResult(1.0, 1.0, raw=(0, 0), version=0, valid=True, reason="ok", measured=(1.0, 1.0))
    patch = messages.annotate_tracker(rgb, corner, 64, 48, kernel=(16, 16))
    assert (at_target(patch, 280, 200) == (0, 255, 255)).all(axis=1).any()
    assert not (patch[-8:, -8:] == (0, 255, 255)).all(axis=2).any()
    lost = found.invalidated("ambiguous")
    unsure = messages.annotate_tracker(rgb, lost, 64, 48)
    assert not (at_target(unsure) == (0, 255, 255)).all(axis=1).any()  # no confident circle
    assert (at_target(unsure) == (160, 160, 160)).all(axis=1).any()  # where the output decoded to, grey
    assert unsure[:20].any() and not (unsure[:20] == drawn[:20]).all()  # "not valid: ambiguous", not "valid"
    reasons = messages.annotate_tracker(rgb, lost.invalidated("no_target"), 64, 48)
    assert not (reasons[:20] == unsure[:20]).all()  # the reason is written
    zones = np.ones((3, 3), np.float32)
    with_ttc = messages.annotate_looming(rgb, LoomingResult(zones, 1.0, 1.7, 2.0, "ok"))
    other_ttc = messages.annotate_looming(rgb, LoomingResult(zones, 1.0, 0.9, 2.0, "ok"))
    filling = messages.annotate_looming(rgb, LoomingResult(zones, 1.0, None, 2.0, "filling"))
    poor_fit = messages.annotate_looming(rgb, LoomingResult(zones, 1.0, None, 2.0, "poor_fit"))
    tops = [image[:24] for image in (with_ttc, other_ttc, filling, poor_fit)]
    assert all(not (a == b).all() for i, a in enumerate(tops) for b in tops[i + 1:])  # each says its own


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
    # offset 0.5: template pixel 1.5 * 63 / 2 = 47.25, the frame's pixel the 320 / 64 resize took it from
    assert det.bbox.center.position.x == pytest.approx((47.25 + 0.5) * 5 - 0.5)
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
    # the pattern's offsets span the patch corners 0..56: offset 0 is the corner 28, the patch centre 31.5
    assert (det.bbox.center.position.x, det.bbox.center.position.y) == (32.0 * 5 - 0.5, 32.0 * 3.75 - 0.5)


def _plane(fx: float, fy: float, cx: float, cy: float, depth: float):
    from libredgetpu_ros.ros.conversions import ImagePlane

    return ImagePlane(fx, fy, cx, cy, depth)


def _project(point, plane) -> tuple[float, float]:
    """The camera's pixel for an optical-frame point (what rviz's Camera display draws it on)."""
    assert point.z == pytest.approx(plane.depth)
    return plane.fx * point.x / point.z + plane.cx, plane.fy * point.y / point.z + plane.cy


@pytest.mark.parametrize("kernel", [None, (8, 8)])
def test_tracker_markers_on_the_image_plane_land_on_the_target_pixel(kernel) -> None:
    """With the camera's intrinsics, the target sphere projects onto the frame pixel the target detection
    names (template pixels mapped back through the resize), the centre cross onto the frame's centre; sizes
    are frame pixels at marker_depth."""
    import cv2
    from libredgetpu_ros.robotics.offsets import TrackResult
    from libredgetpu_ros.ros.robotics import messages
    from std_msgs.msg import Header

    rgb = np.zeros((240, 320, 3), np.uint8)
    plane = _plane(400.0, 380.0, 161.0, 118.0, 2.0)
    result = TrackResult(0.5, -0.25, (1, 2), 3, reason="ok", coverage=0.01, mass=0.9, measured=(0.5, -0.25))
    out = dict(messages.tracker_messages(Header(frame_id="cam"), rgb, result, 64, 64, _Options(),
                                         kernel=kernel, plane=plane))
    (det,) = out["target"].detections
    target, centre = out["markers"].markers
    u, v = _project(target.pose.position, plane)
    assert (u, v) == (pytest.approx(det.bbox.center.position.x), pytest.approx(det.bbox.center.position.y))
    # and that pixel is where the target is in the frame: a dot drawn there, fitted to the template as the
    # tracker fits frames, peaks at the template pixel the offsets decode to
    dot = np.zeros((240, 320), np.float32)
    cv2.circle(dot, (round(u * 16), round(v * 16)), 8 * 16, 1.0, -1, shift=4)
    small = cv2.resize(dot, (64, 64), interpolation=cv2.INTER_AREA)
    ys, xs = np.nonzero(small)
    want = messages.target_pixel(result, 64, 64, kernel)
    weights = small[ys, xs]
    centroid = (float((xs * weights).sum() / weights.sum()), float((ys * weights).sum() / weights.sum()))
    assert centroid == (pytest.approx(want[0], abs=0.1), pytest.approx(want[1], abs=0.1))
    crosses = [_project(p, plane) for p in centre.points]
    assert np.mean(crosses, axis=0) == pytest.approx((159.5, 119.5))
    assert target.scale.x == pytest.approx(4 * 5 * 2.0 / 400.0)  # 4 template pixels = 20 frame pixels
    # no CameraInfo: the old drawing, template pixels at marker_scale on z = 0
    flat = dict(messages.tracker_messages(Header(), rgb, result, 64, 64, _Options(), kernel=kernel))
    sphere = flat["markers"].markers[0].pose.position
    assert sphere.z == 0.0 and sphere.x == pytest.approx(want[0] * 0.01)


def test_zone_markers_on_the_image_plane_land_on_their_zones() -> None:
    """Each zone's cube projects onto the centre of that zone of the frame, its footprint the zone's."""
    from libredgetpu_ros.robotics.looming import LoomingResult
    from libredgetpu_ros.ros.robotics import messages
    from std_msgs.msg import Header

    rgb = np.zeros((240, 320, 3), np.uint8)
    plane = _plane(300.0, 310.0, 150.0, 125.0, 3.0)
    zones = np.arange(9, dtype=np.float32).reshape(3, 3)
    result = LoomingResult(zones, 1.0, None, 1.0, "filling")
    out = dict(messages.looming_messages(Header(), rgb, result, 1, 64, 64, _Options(), plane=plane))
    for cube in out["markers"].markers:
        row, col = divmod(cube.id, 3)
        u, v = _project(cube.pose.position, plane)
        assert (u, v) == (pytest.approx((col + 0.5) * 320 / 3 - 0.5), pytest.approx((row + 0.5) * 80 - 0.5))
        assert cube.scale.x == pytest.approx(320 / 3 * 0.95 * 3.0 / 300.0)
        assert cube.scale.y == pytest.approx(80 * 0.95 * 3.0 / 310.0)
