"""Core perception results -> ROS messages (vision_msgs, our poses, visualization markers, images).

Detections and classes are ``vision_msgs`` 4.1.1, so any vision_msgs consumer subscribes without an adapter:
``ObjectHypothesis.class_id`` is the model's numeric class id as a string (the label map that names them
is ``vision_msgs/LabelInfo`` on the transient-local ``label_info`` topic), boxes are centre + size in
pixels, and the hypothesis' 3D pose is left empty (a 2D detector has none). Poses stay
``libredgetpu_ros_interfaces/PersonPoseArray``: no standard keypoint message exists.

Everything is in pixels of the input image and carries the input image's header. Markers are drawn in the
header's frame (the optical convention: x right, y down, z forward). Once the camera's intrinsics are known
(:class:`ImagePlane`, from its CameraInfo) a pixel (u, v) becomes the point at ``depth`` metres that the
camera projects onto (u, v), so rviz's Camera display overlays the markers exactly on the image and their
size is that of the pixels at that depth; without intrinsics they lie on the plane z = 0, ``scale`` metres
per pixel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import Point
from sensor_msgs.msg import Image
from std_msgs.msg import ColorRGBA, Header
from vision_msgs.msg import (
    BoundingBox2D,
    Classification,
    Detection2D,
    Detection2DArray,
    LabelInfo,
    ObjectHypothesis,
    ObjectHypothesisWithPose,
    VisionClass,
)
from visualization_msgs.msg import Marker, MarkerArray

from libredgetpu_ros.ros.image_msgs import rgb_to_image
from libredgetpu_ros_interfaces.msg import Keypoint, PersonPose, PersonPoseArray

# VisionClass.class_id is uint16.
_MAX_CLASS_ID = 0xFFFF

# COCO keypoint pairs joined by a bone, by keypoint id (nose 0 ... right_ankle 16).
SKELETON: tuple[tuple[int, int], ...] = (
    (5, 6), (5, 7), (7, 9), (6, 8), (8, 10), (5, 11), (6, 12), (11, 12),
    (11, 13), (13, 15), (12, 14), (14, 16), (0, 1), (0, 2), (1, 3), (2, 4),
)


def poses_msg(header: Header, poses: Sequence[Any]) -> PersonPoseArray:
    msg = PersonPoseArray(header=header)
    msg.poses = [
        PersonPose(score=float(p.score),
                   keypoints=[Keypoint(name=k.name, id=int(k.id), x=float(k.x), y=float(k.y),
                                       score=float(k.score)) for k in p.keypoints])
        for p in poses
    ]
    return msg


def detections_msg(header: Header, detections: Sequence[Any]) -> Detection2DArray:
    msg = Detection2DArray(header=header)
    for det in detections:
        xmin, ymin, xmax, ymax = (float(v) for v in det.box)
        d = Detection2D(header=header)
        d.results = [ObjectHypothesisWithPose(
            hypothesis=ObjectHypothesis(class_id=str(int(det.class_id)), score=float(det.score)))]
        d.bbox = BoundingBox2D(size_x=xmax - xmin, size_y=ymax - ymin)
        d.bbox.center.position.x = (xmin + xmax) / 2.0
        d.bbox.center.position.y = (ymin + ymax) / 2.0
        msg.detections.append(d)
    return msg


def classification_msg(header: Header, classes: Sequence[Any]) -> Classification:
    return Classification(header=header, results=[
        ObjectHypothesis(class_id=str(int(c.class_id)), score=float(c.score)) for c in classes])


def label_info_msg(labels: dict[int, str] | None, task: str, threshold: float = 0.0,
                   header: Header | None = None) -> LabelInfo | None:
    """The label map of a detector or classifier (published once per configure), or None without labels.
    Ids beyond LabelInfo's uint16 are left out (no model we run has them)."""
    if not labels or task not in ("detect", "classify"):
        return None
    return LabelInfo(header=header or Header(), threshold=float(threshold), class_map=[
        VisionClass(class_id=int(i), class_name=str(name))
        for i, name in sorted(labels.items()) if 0 <= int(i) <= _MAX_CLASS_ID])


def output_topics(task: str) -> list[tuple[str, type]]:
    """(relative topic, message type) the perception node publishes for ``task``, besides /diagnostics."""
    topics: list[tuple[str, type]] = {
        "pose": [("poses", PersonPoseArray)],
        "detect": [("detections", Detection2DArray)],
        "classify": [("classification", Classification)],
        "segment": [("segmentation", Image), ("segmentation_overlay", Image)],
    }[task]
    topics = [*topics, ("annotated", Image)]
    if task in ("pose", "detect"):
        topics.append(("markers", MarkerArray))
    return topics


def result_messages(header: Header, rgb: np.ndarray, result: Any, options: Any,
                    wanted: Callable[[str], bool] | None = None,
                    plane: ImagePlane | None = None) -> list[tuple[str, Any]]:
    """(relative topic, message) for one processed frame, in publishing order.

    The one place that decides what a frame produces: the node publishes these and ``process-bag`` writes
    them, so live and offline results are the same messages. ``options`` carries ``publish_markers``,
    ``publish_overlay``, ``publish_annotated`` and ``marker_scale`` (the node's parameters). ``wanted``
    (topic -> bool; default: all) skips building messages for topics nobody would receive. ``plane``: the
    camera's image plane for the markers (None: ``marker_scale`` metres per pixel on z = 0).
    """
    def want(topic: str) -> bool:
        return wanted is None or wanted(topic)

    task = result.task
    out: list[tuple[str, Any]] = []
    if task == "pose" and want("poses"):
        out.append(("poses", poses_msg(header, result.poses)))
    elif task == "detect" and want("detections"):
        out.append(("detections", detections_msg(header, result.detections)))
    elif task == "classify" and want("classification"):
        out.append(("classification", classification_msg(header, result.classes)))
    elif task == "segment" and result.mask is not None:
        if want("segmentation"):
            out.append(("segmentation", rgb_to_image(result.mask, header, "mono8")))
        if options.publish_overlay and want("segmentation_overlay"):
            from libredgetpu_ros.perception.draw import colorize_mask

            blended = overlay(rgb, colorize_mask(result.mask))
            out.append(("segmentation_overlay", rgb_to_image(blended, header)))
    if task in ("pose", "detect") and options.publish_markers and want("markers"):
        out.append(("markers", markers_msg(header, result, scale=options.marker_scale, plane=plane)))
    if options.publish_annotated and want("annotated"):
        from libredgetpu_ros.perception.draw import annotate

        out.append(("annotated", rgb_to_image(annotate(rgb, result), header)))
    return out


# -- rviz markers -------------------------------------------------------------------------------------------

_PALETTE = np.array([[230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
                     [145, 30, 180], [70, 240, 240], [240, 50, 230], [210, 245, 60], [250, 190, 212]],
                    dtype=np.float32) / 255.0


def _color(index: int, alpha: float = 1.0) -> ColorRGBA:
    r, g, b = _PALETTE[index % len(_PALETTE)]
    return ColorRGBA(r=float(r), g=float(g), b=float(b), a=alpha)


@dataclass(frozen=True, slots=True)
class ImagePlane:
    """A pinhole camera's intrinsics (pixels) and the depth (m) markers are drawn at: pixel (u, v) -> the
    optical-frame point ((u - cx) / fx * depth, (v - cy) / fy * depth, depth), which projects onto (u, v)."""

    fx: float
    fy: float
    cx: float
    cy: float
    depth: float

    @classmethod
    def from_camera_info(cls, info: Any, width: int, height: int, depth: float) -> ImagePlane | None:
        """From a ``sensor_msgs/CameraInfo`` (its K), scaled to a ``width`` x ``height`` frame when the
        camera's calibration is for another resolution; None for an uncalibrated camera (K all zero, as
        CameraInfo marks it), ValueError for a K that is no pinhole."""
        fx, cx, fy, cy = (float(info.k[i]) for i in (0, 2, 4, 5))
        if fx == fy == cx == cy == 0.0:
            return None
        cal_w, cal_h = int(info.width), int(info.height)
        if not all(math.isfinite(v) for v in (fx, fy, cx, cy)) or fx <= 0 or fy <= 0:
            raise ValueError(f"CameraInfo K has fx={fx}, fy={fy}, cx={cx}, cy={cy}: not a pinhole camera")
        if cal_w > 0 and cal_h > 0 and (cal_w, cal_h) != (width, height):
            sx, sy = width / cal_w, height / cal_h
            fx, cx, fy, cy = fx * sx, cx * sx, fy * sy, cy * sy
        return cls(fx, fy, cx, cy, float(depth))

    @property
    def metres_per_pixel(self) -> float:
        return self.depth / self.fx

    def points(self, uv: np.ndarray) -> list[Point]:
        d = self.depth
        return [Point(x=(float(u) - self.cx) / self.fx * d, y=(float(v) - self.cy) / self.fy * d, z=d)
                for u, v in uv]


def pixel_points(xy: np.ndarray, scale: float, plane: ImagePlane | None = None) -> list[Point]:
    if plane is not None:
        return plane.points(xy)
    return [Point(x=float(x) * scale, y=float(y) * scale, z=0.0) for x, y in xy]


def _marker(header: Header, ns: str, mid: int, mtype: int, lifetime: Duration) -> Marker:
    m = Marker(header=header, ns=ns, id=mid, type=mtype, action=Marker.ADD, lifetime=lifetime)
    m.pose.orientation.w = 1.0
    return m


def markers_msg(header: Header, result: Any, scale: float = 0.001, keypoint_threshold: float = 0.2,
                lifetime_s: float = 1.0, plane: ImagePlane | None = None) -> MarkerArray:
    """DELETEALL, then boxes + labels (LINE_STRIP + TEXT_VIEW_FACING) and skeletons (LINE_LIST + SPHERE_LIST),
    on the camera's image ``plane`` when known, else on z = 0 at ``scale`` metres per pixel.

    Marker ids are the object's index in the result, so rviz replaces markers in place frame to frame;
    the leading DELETEALL removes objects that disappeared. ``lifetime_s`` clears markers of a stopped node.
    """
    out = MarkerArray()
    clear = Marker(header=header, action=Marker.DELETEALL)
    out.markers.append(clear)
    lifetime = Duration(sec=int(lifetime_s), nanosec=int((lifetime_s % 1.0) * 1e9))
    if plane is not None:
        scale = plane.metres_per_pixel  # sizes in pixels of the image at the plane's depth
    line = 2.0 * scale  # 2 px wide lines
    for i, det in enumerate(result.detections):
        xmin, ymin, xmax, ymax = (float(v) for v in det.box)
        box = _marker(header, "boxes", i, Marker.LINE_STRIP, lifetime)
        box.scale.x = line
        box.color = _color(int(det.class_id))
        box.points = pixel_points(np.array([[xmin, ymin], [xmax, ymin], [xmax, ymax], [xmin, ymax],
                                            [xmin, ymin]]),
                             scale, plane)
        text = _marker(header, "labels", i, Marker.TEXT_VIEW_FACING, lifetime)
        text.scale.z = 16.0 * scale
        text.color = box.color
        text.pose.position = pixel_points(np.array([[xmin, ymin - 10.0]]), scale, plane)[0]
        text.text = f"{det.label or det.class_id} {det.score:.2f}"
        out.markers.extend((box, text))
    for i, pose in enumerate(result.poses):
        if not pose.keypoints:
            continue
        kp = np.array([(k.x, k.y, k.score) for k in pose.keypoints], dtype=np.float64)
        ids = np.array([k.id for k in pose.keypoints])
        by_id = np.full((17, 3), np.nan)
        valid = (ids >= 0) & (ids < 17)
        by_id[ids[valid]] = kp[valid]
        visible = by_id[:, 2] >= keypoint_threshold
        bones = np.array([(a, b) for a, b in SKELETON if visible[a] and visible[b]], dtype=np.int64)
        skel = _marker(header, "skeletons", i, Marker.LINE_LIST, lifetime)
        skel.scale.x = line
        skel.color = _color(i)
        if len(bones):
            skel.points = pixel_points(by_id[bones.ravel(), :2], scale, plane)
        joints = _marker(header, "keypoints", i, Marker.SPHERE_LIST, lifetime)
        joints.scale.x = joints.scale.y = joints.scale.z = 6.0 * scale
        joints.color = _color(i)
        joints.points = pixel_points(by_id[visible, :2], scale, plane)
        out.markers.extend((skel, joints))
    return out


# -- images ------------------------------------------------------------------------------------------

def overlay(rgb: np.ndarray, colors: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """Blend a colour image (e.g. a colourised mask) over ``rgb``; integer arithmetic, no float copy."""
    if colors.shape != rgb.shape:
        raise ValueError(f"overlay colours {colors.shape} do not match image {rgb.shape}")
    a = round(alpha * 256)
    blended = (rgb.astype(np.uint16) * (256 - a) + colors.astype(np.uint16) * a) >> 8
    return blended.astype(np.uint8)
