"""Robotics results -> ROS messages (every message carries the frame's header; positions in the image plane).

``tracker_messages`` and ``looming_messages`` decide what one processed frame produces: the nodes publish
those and ``process-bag`` (``ros/bag_nodes.py``) writes them, so live and offline results are the same
messages.

Markers are drawn in the frame's ``frame_id`` with ``scale`` metres per template-input pixel, x right and y
down as in the image: a sphere at the target and a cross at the image centre (trackers), a cube per zone
whose height and colour follow its density (looming).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import Point, PointStamped, Vector3Stamped
from sensor_msgs.msg import Image
from std_msgs.msg import ColorRGBA, Header
from vision_msgs.msg import (
    BoundingBox2D,
    Detection2D,
    Detection2DArray,
    ObjectHypothesis,
    ObjectHypothesisWithPose,
)
from visualization_msgs.msg import Marker, MarkerArray

from libredgetpu_ros_interfaces.msg import Looming

_LIFETIME = Duration(sec=1)

# relative topic -> message class: every topic a node publishes; the live node makes its publishers from
# these, process-bag (ros/bag_nodes.py) its output connections
TRACKER_OUTPUTS: dict[str, type] = {"offset": PointStamped, "servo_error": Vector3Stamped,
                                    "target": Detection2DArray, "markers": MarkerArray, "annotated": Image}
LOOMING_OUTPUTS: dict[str, type] = {"looming": Looming, "markers": MarkerArray, "annotated": Image}


def stamp_seconds(header: Header) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


def offset_msg(header: Header, x: float, y: float) -> PointStamped:
    return PointStamped(header=header, point=Point(x=float(x), y=float(y), z=0.0))


def servo_error_msg(header: Header, error: tuple[float, float]) -> Vector3Stamped:
    msg = Vector3Stamped(header=header)
    msg.vector.x, msg.vector.y = float(error[0]), float(error[1])
    return msg


def target_msg(header: Header, result: Any, frame_width: int, frame_height: int, box: tuple[float, float]
               ) -> Detection2DArray:
    """The stamped valid flag of a tracked frame: one detection (centre in frame pixels, ``box`` its size,
    score: the pattern's normalised correlation, else the spot's kept softmax mass, else 1) when the result
    is valid, none when it is not."""
    msg = Detection2DArray(header=header)
    if not result.valid or result.x_offset is None:
        return msg
    score = result.score if result.score is not None else (result.mass if result.mass is not None else 1.0)
    det = Detection2D(header=header)
    det.results = [ObjectHypothesisWithPose(hypothesis=ObjectHypothesis(class_id="target",
                                                                        score=float(score)))]
    det.bbox = BoundingBox2D(size_x=float(box[0]), size_y=float(box[1]))
    det.bbox.center.position.x = (1 + result.x_offset) * (frame_width - 1) / 2
    det.bbox.center.position.y = (1 + result.y_offset) * (frame_height - 1) / 2
    msg.detections.append(det)
    return msg


def target_box(result: Any, frame_width: int, frame_height: int, kernel: tuple[int, int] | None,
               width: int, height: int) -> tuple[float, float]:
    """The target's size in frame pixels: the pattern's kernel scaled from the template input, or the side
    of a square covering the spot's ``coverage`` of the frame."""
    if kernel is not None:
        return kernel[0] * frame_width / width, kernel[1] * frame_height / height
    side = (float(result.coverage or 0.0) * frame_width * frame_height) ** 0.5
    return side, side


def looming_msg(header: Header, result: Any, frames: int) -> Looming:
    return Looming(header=header, zones_per_side=int(result.zones.shape[0]),
                   zones=[float(v) for v in result.zones.reshape(-1)], tau=float(result.tau),
                   ttc_valid=result.ttc_s is not None, ttc=float(result.ttc_s or 0.0),
                   ttc_reason=result.ttc_reason, frames_in_history=int(frames))


def tracker_messages(header: Header, rgb: np.ndarray, result: Any, width: int, height: int, options: Any,
                     wanted: Callable[[str], bool] | None = None,
                     kernel: tuple[int, int] | None = None) -> list[tuple[str, Any]]:
    """(relative topic, message) for one tracked frame, in publishing order: ``offset`` when the result is
    valid (no position when there is no target), ``servo_error`` always (zero when not valid: no command),
    ``target`` always (one detection when valid, none when not: the stamped valid flag); ``markers`` and
    ``annotated`` when ``options`` (the node's parameters: ``gain``, ``publish_markers``,
    ``publish_annotated``, ``marker_scale``) ask for them and ``wanted(topic)`` (default: all) says someone
    receives them. ``width`` x ``height`` is the template's input size, ``kernel`` the pattern's patch
    size."""
    valid = result.valid and result.x_offset is not None
    out: list[tuple[str, Any]] = []
    if valid:
        out.append(("offset", offset_msg(header, result.x_offset, result.y_offset)))
    out.append(("servo_error", servo_error_msg(header, result.servo_error(options.gain))))
    fw, fh = rgb.shape[1], rgb.shape[0]
    box = target_box(result, fw, fh, kernel, width, height)
    out.append(("target", target_msg(header, result, fw, fh, box)))
    if options.publish_markers and (wanted is None or wanted("markers")):
        at = ((1 + result.x_offset) * (width - 1) / 2, (1 + result.y_offset) * (height - 1) / 2) if valid \
            else None
        out.append(("markers", tracker_markers(header, at, width, height, options.marker_scale)))
    if options.publish_annotated and (wanted is None or wanted("annotated")):
        offset = (result.x_offset, result.y_offset) if valid else None
        out.append(("annotated", image_msg(header, annotate_tracker(rgb, offset, result.reason))))
    return out


def looming_messages(header: Header, rgb: np.ndarray, result: Any, frames: int, width: int, height: int,
                     options: Any, wanted: Callable[[str], bool] | None = None) -> list[tuple[str, Any]]:
    """(relative topic, message) for one looming frame: ``looming`` always (``frames``: samples in the tau
    history), ``markers`` / ``annotated`` as :func:`tracker_messages` decides them."""
    out: list[tuple[str, Any]] = [("looming", looming_msg(header, result, frames))]
    if options.publish_markers and (wanted is None or wanted("markers")):
        out.append(("markers", zone_markers(header, result.zones, width, height, options.marker_scale)))
    if options.publish_annotated and (wanted is None or wanted("annotated")):
        out.append(("annotated", image_msg(header, annotate_looming(rgb, result.zones, result.tau,
                                                                    result.ttc_s))))
    return out


def _marker(header: Header, ns: str, mid: int, mtype: int, rgba: tuple[float, ...]) -> Marker:
    m = Marker(header=header, ns=ns, id=mid, type=mtype, action=Marker.ADD, lifetime=_LIFETIME)
    m.pose.orientation.w = 1.0
    m.color = ColorRGBA(r=rgba[0], g=rgba[1], b=rgba[2], a=rgba[3])
    return m


def tracker_markers(header: Header, at: tuple[float, float] | None, width: int, height: int,
                    scale: float) -> MarkerArray:
    """A sphere at ``at`` (template-input pixels; None: no valid target, the sphere is deleted) and a cross
    at the image centre."""
    target = _marker(header, "target", 0, Marker.SPHERE, (1.0, 0.2, 0.1, 0.9))
    if at is None:
        target.action = Marker.DELETE
    else:
        target.pose.position = Point(x=at[0] * scale, y=at[1] * scale, z=0.0)
    target.scale.x = target.scale.y = target.scale.z = 4 * scale
    centre = _marker(header, "centre", 0, Marker.LINE_LIST, (0.2, 1.0, 0.2, 0.8))
    cx, cy, arm = (width - 1) / 2 * scale, (height - 1) / 2 * scale, 3 * scale
    centre.points = [Point(x=cx - arm, y=cy), Point(x=cx + arm, y=cy), Point(x=cx, y=cy - arm),
                     Point(x=cx, y=cy + arm)]
    centre.scale.x = scale / 2
    return MarkerArray(markers=[target, centre])


def zone_markers(header: Header, zones: np.ndarray, width: int, height: int, scale: float) -> MarkerArray:
    side = zones.shape[0]
    top = float(zones.max()) or 1.0
    out = MarkerArray()
    for row in range(side):
        for col in range(side):
            level = float(zones[row, col]) / top
            m = _marker(header, "zones", row * side + col, Marker.CUBE, (level, 0.3, 1.0 - level, 0.6))
            cell_w, cell_h = width / side * scale, height / side * scale
            m.pose.position = Point(x=(col + 0.5) * cell_w, y=(row + 0.5) * cell_h, z=level * 5 * scale)
            m.scale.x, m.scale.y = cell_w * 0.95, cell_h * 0.95
            m.scale.z = max(level * 10 * scale, scale / 10)
            out.markers.append(m)
    return out


def image_msg(header: Header, rgb: np.ndarray) -> Image:
    rgb = np.ascontiguousarray(rgb)
    return Image(header=header, height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8",
                 step=rgb.shape[1] * 3, data=rgb.tobytes())


def annotate_tracker(rgb: np.ndarray, offset: tuple[float, float] | None, reason: str = "") -> np.ndarray:
    """The frame with a cross at its centre and a circle where the target is (``offset``), or the reason
    there is none."""
    import cv2

    out = rgb.copy()
    h, w = out.shape[:2]
    cx, cy = w // 2, h // 2
    size = max(4, min(w, h) // 30)
    cv2.drawMarker(out, (cx, cy), (0, 255, 0), cv2.MARKER_CROSS, size * 2, 1)
    if offset is None:
        cv2.putText(out, f"no target: {reason}", (4, max(12, h // 12)), cv2.FONT_HERSHEY_SIMPLEX,
                    max(0.3, h / 640), (255, 40, 20), 1)
        return out
    tx, ty = round((1 + offset[0]) * (w - 1) / 2), round((1 + offset[1]) * (h - 1) / 2)
    cv2.circle(out, (tx, ty), size, (255, 40, 20), 2)
    cv2.line(out, (cx, cy), (tx, ty), (255, 200, 0), 1)
    return out


def annotate_looming(rgb: np.ndarray, zones: np.ndarray, tau: float, ttc_s: float | None) -> np.ndarray:
    """The frame with the zone grid, the centre zone's outline and tau / TTC."""
    import cv2

    out = rgb.copy()
    h, w = out.shape[:2]
    side = zones.shape[0]
    for i in range(1, side):
        cv2.line(out, (i * w // side, 0), (i * w // side, h - 1), (255, 255, 0), 1)
        cv2.line(out, (0, i * h // side), (w - 1, i * h // side), (255, 255, 0), 1)
    c = side // 2
    colour = (255, 40, 20) if tau > 1 else (0, 255, 0)
    cv2.rectangle(out, (c * w // side, c * h // side), ((c + 1) * w // side, (c + 1) * h // side), colour, 2)
    text = f"tau {tau:.2f}" + (f"  ttc {ttc_s:.2f}s" if ttc_s is not None else "")
    cv2.putText(out, text, (4, max(12, h // 12)), cv2.FONT_HERSHEY_SIMPLEX, max(0.3, h / 640), colour, 1)
    return out
