"""Image messages <-> NumPy and result -> message conversions, against OpenCV and hand-computed references."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from libredgetpu_ros.perception.results import ClassScore, Detection, Keypoint, PerceptionResult, Pose
from libredgetpu_ros.ros import conversions
from libredgetpu_ros.ros.image_msgs import BadImage, compressed_to_rgb, image_to_rgb, rgb_to_image
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header
from visualization_msgs.msg import Marker

RNG = np.random.default_rng(7)
RGB = RNG.integers(0, 256, size=(37, 53, 3), dtype=np.uint8)  # odd sizes: no accidental alignment
HEADER = Header(frame_id="camera_optical")
HEADER.stamp.sec, HEADER.stamp.nanosec = 12, 345


def _raw(pixels: np.ndarray, encoding: str, pad: int = 0) -> Image:
    """An Image message with ``pad`` junk bytes after each row."""
    h, w = pixels.shape[:2]
    rows = pixels.reshape(h, -1)
    padded = np.concatenate([rows, np.full((h, pad), 0xEE, np.uint8)], axis=1)
    return Image(header=HEADER, height=h, width=w, encoding=encoding, step=rows.shape[1] + pad,
                 data=padded.tobytes())


# OpenCV conversions as the independent reference for each encoding.
CASES = {
    "rgb8": (RGB, None),
    "bgr8": (cv2.cvtColor(RGB, cv2.COLOR_RGB2BGR), cv2.COLOR_BGR2RGB),
    "rgba8": (cv2.cvtColor(RGB, cv2.COLOR_RGB2RGBA), cv2.COLOR_RGBA2RGB),
    "bgra8": (cv2.cvtColor(RGB, cv2.COLOR_RGB2BGRA), cv2.COLOR_BGRA2RGB),
    "mono8": (cv2.cvtColor(RGB, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB),
}


@pytest.mark.parametrize("pad", [0, 3, 64])
@pytest.mark.parametrize("encoding", list(CASES))
def test_raw_encodings_match_opencv(encoding: str, pad: int) -> None:
    pixels, code = CASES[encoding]
    expected = pixels if code is None else cv2.cvtColor(pixels, code)
    got = image_to_rgb(_raw(pixels, encoding, pad))
    assert got.shape == (37, 53, 3) and got.dtype == np.uint8
    np.testing.assert_array_equal(got, expected)


def test_unpadded_rgb8_is_a_view_not_a_copy() -> None:
    msg = _raw(RGB, "rgb8")
    got = image_to_rgb(msg)
    assert not got.flags.owndata  # zero-copy view over the message buffer
    np.testing.assert_array_equal(got, RGB)


@pytest.mark.parametrize(("msg", "cause"), [
    (Image(height=4, width=4, encoding="16UC1", step=8, data=bytes(32)), "encoding"),
    (Image(height=4, width=4, encoding="rgb8", step=12, data=b""), "empty"),
    (Image(height=0, width=4, encoding="rgb8", step=12, data=bytes(12)), "empty"),
    (Image(height=4, width=4, encoding="rgb8", step=12, data=bytes(47)), "size"),
    (Image(height=4, width=4, encoding="rgb8", step=11, data=bytes(48)), "step"),
])
def test_bad_raw_frames_name_their_cause(msg: Image, cause: str) -> None:
    with pytest.raises(BadImage) as info:
        image_to_rgb(msg)
    assert info.value.cause == cause
    assert info.value.exit_code == 2


@pytest.mark.parametrize("ext", [".png", ".jpg"])
def test_compressed_matches_opencv_decode(ext: str) -> None:
    ok, buf = cv2.imencode(ext, cv2.cvtColor(RGB, cv2.COLOR_RGB2BGR))
    assert ok
    msg = CompressedImage(header=HEADER, format=ext[1:], data=buf.tobytes())
    expected = cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    np.testing.assert_array_equal(compressed_to_rgb(msg), expected)
    if ext == ".png":  # lossless: the original pixels come back
        np.testing.assert_array_equal(compressed_to_rgb(msg), RGB)


def test_undecodable_compressed_is_bad_input() -> None:
    with pytest.raises(BadImage) as info:
        compressed_to_rgb(CompressedImage(format="jpeg", data=b"\xff\xd8not a jpeg"))
    assert info.value.cause == "decode"


def test_rgb_to_image_round_trip_and_mono8() -> None:
    msg = rgb_to_image(RGB, HEADER)
    assert (msg.width, msg.height, msg.step, msg.encoding) == (53, 37, 159, "rgb8")
    assert msg.header.stamp.nanosec == 345
    np.testing.assert_array_equal(image_to_rgb(msg), RGB)
    mask = RNG.integers(0, 21, size=(5, 7), dtype=np.uint8)
    m = rgb_to_image(mask, HEADER, "mono8")
    assert (m.step, m.encoding) == (7, "mono8")
    np.testing.assert_array_equal(np.frombuffer(m.data, np.uint8).reshape(5, 7), mask)


def _pose(offset: float, low: set[int] = frozenset()) -> Pose:
    return Pose(keypoints=[Keypoint(f"k{i}", i, 10.0 * i + offset, 5.0 * i, 0.05 if i in low else 0.9)
                           for i in range(17)], score=0.8)


def test_results_to_vision_msgs_and_pose_messages() -> None:
    poses = conversions.poses_msg(HEADER, [_pose(0.0), _pose(100.0)])
    assert poses.header == HEADER and len(poses.poses) == 2
    kp = poses.poses[1].keypoints[3]
    assert (kp.name, kp.id, kp.x, kp.y) == ("k3", 3, 130.0, 15.0)

    det = Detection(class_id=17, label="cat", score=0.75, box=(10.0, 20.0, 110.0, 220.0))
    dets = conversions.detections_msg(HEADER, [det, Detection(3, "", 0.5, (0.0, 0.0, 2.0, 4.0))])
    assert type(dets).__module__.startswith("vision_msgs.")
    assert dets.header == HEADER and dets.detections[0].header == HEADER
    d = dets.detections[0]
    assert (d.bbox.center.position.x, d.bbox.center.position.y, d.bbox.size_x, d.bbox.size_y) == \
        (60.0, 120.0, 100.0, 200.0)
    # vision_msgs: the class id as a string (names come from LabelInfo), one hypothesis, no 3D pose.
    assert (d.results[0].hypothesis.class_id, d.results[0].hypothesis.score) == ("17", 0.75)
    assert d.results[0].pose.pose.position.x == 0.0
    assert dets.detections[1].results[0].hypothesis.class_id == "3"

    cls = conversions.classification_msg(HEADER, [ClassScore(283, "tiger cat", 0.6)])
    assert type(cls).__module__.startswith("vision_msgs.")
    assert (cls.results[0].class_id, cls.results[0].score, cls.header) == ("283", pytest.approx(0.6), HEADER)


def test_label_info_maps_ids_to_names() -> None:
    labels = {0: "person", 17: "dog", 90: "toothbrush", 70000: "beyond uint16"}
    info = conversions.label_info_msg(labels, "detect", threshold=0.25, header=HEADER)
    assert type(info).__module__.startswith("vision_msgs.") and info.header == HEADER
    assert [(c.class_id, c.class_name) for c in info.class_map] == [(0, "person"), (17, "dog"),
                                                                     (90, "toothbrush")]
    assert info.threshold == pytest.approx(0.25)
    assert conversions.label_info_msg(labels, "classify") is not None
    assert conversions.label_info_msg(labels, "pose") is None  # keypoint names live in the poses
    assert conversions.label_info_msg(None, "detect") is None


def test_markers_deleteall_first_stable_ids_and_skeleton_geometry() -> None:
    result = PerceptionResult(task="pose", image_size=(640, 480), backend="cpu",
                              poses=[_pose(0.0), _pose(50.0, low={9, 10})],
                              detections=[Detection(1, "person", 0.9, (10.0, 20.0, 30.0, 60.0))])
    scale = 0.01
    out = conversions.markers_msg(HEADER, result, scale=scale, keypoint_threshold=0.2)
    assert out.markers[0].action == Marker.DELETEALL
    by_key = {(m.ns, m.id): m for m in out.markers[1:]}
    assert set(by_key) == {("boxes", 0), ("labels", 0), ("skeletons", 0), ("keypoints", 0),
                           ("skeletons", 1), ("keypoints", 1)}
    box = by_key[("boxes", 0)]
    assert box.type == Marker.LINE_STRIP
    np.testing.assert_allclose([(p.x, p.y) for p in box.points],
                               [(0.1, 0.2), (0.3, 0.2), (0.3, 0.6), (0.1, 0.6), (0.1, 0.2)])
    label = by_key[("labels", 0)]
    assert label.type == Marker.TEXT_VIEW_FACING and label.text == "person 0.90"
    full, partial = by_key[("skeletons", 0)], by_key[("skeletons", 1)]
    assert full.type == Marker.LINE_LIST and len(full.points) == 2 * len(conversions.SKELETON)
    # Wrists 9 and 10 are below the threshold: their two bones (7-9, 8-10) and joints are left out.
    assert len(partial.points) == 2 * (len(conversions.SKELETON) - 2)
    assert len(by_key[("keypoints", 1)].points) == 15
    first_bone = conversions.SKELETON[0]
    assert (full.points[0].x, full.points[1].x) == pytest.approx((first_bone[0] * 0.1, first_bone[1] * 0.1))
    assert all(m.header.frame_id == "camera_optical" for m in out.markers)


def _camera_info(fx: float, fy: float, cx: float, cy: float, width: int, height: int):
    from sensor_msgs.msg import CameraInfo

    return CameraInfo(width=width, height=height, k=[fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0])


def test_markers_on_the_image_plane_project_back_onto_their_pixels() -> None:
    """With the camera's intrinsics, a marker point is where the pinhole projects it onto the result's pixel
    (what rviz's Camera display overlays on the image), at marker_depth; sizes are pixels at that depth."""
    result = PerceptionResult(task="pose", image_size=(640, 480), backend="cpu", poses=[_pose(0.0)],
                              detections=[Detection(1, "person", 0.9, (10.0, 20.0, 300.0, 460.0))])
    # calibrated at 1280 x 960: the intrinsics are halved for the 640 x 480 frame
    info = _camera_info(1100.0, 1000.0, 650.0, 470.0, 1280, 960)
    plane = conversions.ImagePlane.from_camera_info(info, 640, 480, depth=2.5)
    assert (plane.fx, plane.fy, plane.cx, plane.cy, plane.depth) == (550.0, 500.0, 325.0, 235.0, 2.5)
    out = conversions.markers_msg(HEADER, result, plane=plane)
    by_key = {(m.ns, m.id): m for m in out.markers[1:]}

    def project(points) -> list[tuple[float, float]]:
        assert all(p.z == pytest.approx(2.5) for p in points)
        return [(550.0 * p.x / p.z + 325.0, 500.0 * p.y / p.z + 235.0) for p in points]

    np.testing.assert_allclose(project(by_key[("boxes", 0)].points),
                               [(10, 20), (300, 20), (300, 460), (10, 460), (10, 20)], atol=1e-9)
    assert by_key[("boxes", 0)].scale.x == pytest.approx(2 * 2.5 / 550.0)  # 2 px wide at 2.5 m
    assert project([by_key[("labels", 0)].pose.position]) == [pytest.approx((10.0, 10.0))]
    keypoints = [(k.x, k.y) for k in _pose(0.0).keypoints]
    np.testing.assert_allclose(project(by_key[("keypoints", 0)].points), keypoints, atol=1e-9)
    # the same frame calibrated at its own size: used as is
    same = conversions.ImagePlane.from_camera_info(_camera_info(550, 500, 325, 235, 640, 480), 640, 480, 1.0)
    assert (same.fx, same.cx) == (550.0, 325.0)
    # an uncalibrated camera (K all zero, CameraInfo's convention): no image plane, not an error
    assert conversions.ImagePlane.from_camera_info(_camera_info(0, 0, 0, 0, 640, 480), 640, 480, 1.0) is None
    for bad in (_camera_info(0.0, 500, 325, 235, 640, 480), _camera_info(float("nan"), 500, 325, 235, 0, 0)):
        with pytest.raises(ValueError, match="not a pinhole camera"):
            conversions.ImagePlane.from_camera_info(bad, 640, 480, 1.0)


def test_overlay_blend_matches_float_reference() -> None:
    colors = RNG.integers(0, 256, size=RGB.shape, dtype=np.uint8)
    got = conversions.overlay(RGB, colors, alpha=0.5)
    expected = (RGB.astype(np.float64) + colors) / 2.0
    assert np.abs(got.astype(np.float64) - expected).max() <= 1.0


def test_result_messages_skip_unwanted_topics_without_building_them(monkeypatch) -> None:
    """The node passes ``wanted`` (topics with subscribers): an unwanted annotated image is never drawn."""
    from types import SimpleNamespace

    from libredgetpu_ros.perception import draw

    result = PerceptionResult(task="pose", image_size=(53, 37), backend="cpu", poses=[_pose(0.0)])
    options = SimpleNamespace(publish_markers=True, publish_overlay=False, publish_annotated=True,
                              marker_scale=0.001)
    drawn: list[bool] = []
    real_annotate = draw.annotate
    monkeypatch.setattr(draw, "annotate", lambda rgb, res: drawn.append(True) or real_annotate(rgb, res))

    everything = conversions.result_messages(HEADER, RGB, result, options)
    assert [t for t, _ in everything] == ["poses", "markers", "annotated"] and drawn == [True]
    only_poses = conversions.result_messages(HEADER, RGB, result, options, wanted=lambda t: t == "poses")
    assert [t for t, _ in only_poses] == ["poses"] and drawn == [True]  # annotate not called again
    assert only_poses[0][1] == everything[0][1]  # the same message as without the filter
