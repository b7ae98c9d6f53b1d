"""Robotics results -> ROS messages (every message carries the frame's header; positions in the image plane).

``tracker_messages`` and ``looming_messages`` decide what one processed frame produces: the nodes publish
those and ``process-bag`` (``ros/bag_nodes.py``) writes them, so live and offline results are the same
messages.

Markers are drawn in the frame's ``frame_id`` (x right, y down as in the image): a sphere at the target and a
cross at the image centre (trackers), a cube per zone whose height and colour follow its density (looming).
Once the camera's intrinsics are known (an ``ImagePlane`` from its CameraInfo, ``ros/camera/image_plane.py``)
template-input pixels are mapped back to the frame's pixels (:func:`frame_pixels`) and drawn where the camera
projects them onto those pixels, so rviz's Camera display overlays them on the image; without intrinsics
they lie on z = 0 at ``scale`` metres per template-input pixel (:class:`MarkerCanvas`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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

from libredgetpu_ros.ros.conversions import ImagePlane, pixel_points
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


def frame_pixels(xy: Any, width: int, height: int, frame_width: int, frame_height: int) -> np.ndarray:
    """Template-input pixels (N x 2) -> the frame's pixels: the inverse of the resize that fitted the frame
    to the template (pixel centres map onto pixel centres: u = (x + 0.5) * frame_width / width - 0.5)."""
    xy = np.asarray(xy, np.float64).reshape(-1, 2)
    return (xy + 0.5) * (frame_width / width, frame_height / height) - 0.5


def target_pixel(result: Any, width: int, height: int, kernel: tuple[int, int] | None = None
                 ) -> tuple[float, float]:
    """Where a valid result's target is, in template-input pixels: the spot's position (its offsets span
    the pixel centres 0 .. width - 1), or the centre of the pattern's ``kernel``-sized patch (its offsets
    span the patch corners 0 .. width - kernel width)."""
    return offsets_pixel(float(result.x_offset), float(result.y_offset), width, height, kernel)


def offsets_pixel(x: float, y: float, width: int, height: int, kernel: tuple[int, int] | None = None
                  ) -> tuple[float, float]:
    """Template-input pixel of offsets ``x``, ``y`` (see :func:`target_pixel`)."""
    if kernel is None:
        return (1 + x) * (width - 1) / 2, (1 + y) * (height - 1) / 2
    kw, kh = kernel
    return (1 + x) * (width - kw) / 2 + (kw - 1) / 2, (1 + y) * (height - kh) / 2 + (kh - 1) / 2


@dataclass(frozen=True, slots=True)
class MarkerCanvas:
    """Where markers given in template-input pixels (``width`` x ``height``) are drawn: on the camera's
    image ``plane`` at the frame's pixels they map back to, or without one on z = 0 at ``scale`` metres per
    template pixel."""

    width: int
    height: int
    frame_width: int
    frame_height: int
    scale: float
    plane: ImagePlane | None = None

    def points(self, xy: Any) -> list[Point]:
        xy = np.asarray(xy, np.float64).reshape(-1, 2)
        if self.plane is None:
            return pixel_points(xy, self.scale)
        return self.plane.points(frame_pixels(xy, self.width, self.height, self.frame_width,
                                              self.frame_height))

    @property
    def units(self) -> tuple[float, float]:
        """Metres per template pixel along x and y (a template pixel covers frame / template pixels)."""
        if self.plane is None:
            return self.scale, self.scale
        p = self.plane
        return (p.depth / p.fx * self.frame_width / self.width,
                p.depth / p.fy * self.frame_height / self.height)


def target_msg(header: Header, result: Any, frame_width: int, frame_height: int, box: tuple[float, float],
               template: tuple[int, int] | None = None, kernel: tuple[int, int] | None = None
               ) -> Detection2DArray:
    """The stamped valid flag of a tracked frame: one detection (centre in frame pixels, ``box`` its size,
    score: the pattern's normalised correlation, else the spot's kept softmax mass, else 1) when the result
    is valid, none when it is not. ``template``: the template's input size (width, height; default: the
    frame's), ``kernel`` the pattern's patch size (:func:`target_pixel`)."""
    msg = Detection2DArray(header=header)
    if not result.valid or result.x_offset is None:
        return msg
    score = result.score if result.score is not None else (result.mass if result.mass is not None else 1.0)
    det = Detection2D(header=header)
    det.results = [ObjectHypothesisWithPose(hypothesis=ObjectHypothesis(class_id="target",
                                                                        score=float(score)))]
    det.bbox = BoundingBox2D(size_x=float(box[0]), size_y=float(box[1]))
    width, height = template or (frame_width, frame_height)
    at = target_pixel(result, width, height, kernel)
    (u, v), = frame_pixels(at, width, height, frame_width, frame_height)
    det.bbox.center.position.x, det.bbox.center.position.y = float(u), float(v)
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
                     kernel: tuple[int, int] | None = None,
                     plane: ImagePlane | None = None) -> list[tuple[str, Any]]:
    """(relative topic, message) for one tracked frame, in publishing order: ``offset`` when the result is
    valid (no position when there is no target), ``servo_error`` always (zero when not valid: no command),
    ``target`` always (one detection when valid, none when not: the stamped valid flag); ``markers`` and
    ``annotated`` when ``options`` (the node's parameters: ``gain``, ``publish_markers``,
    ``publish_annotated``, ``marker_scale``) ask for them and ``wanted(topic)`` (default: all) says someone
    receives them. ``width`` x ``height`` is the template's input size, ``kernel`` the pattern's patch
    size, ``plane`` the camera's image plane for the markers (None: ``marker_scale`` on z = 0)."""
    valid = result.valid and result.x_offset is not None
    out: list[tuple[str, Any]] = []
    if valid:
        out.append(("offset", offset_msg(header, result.x_offset, result.y_offset)))
    out.append(("servo_error", servo_error_msg(header, result.servo_error(options.gain))))
    fw, fh = rgb.shape[1], rgb.shape[0]
    box = target_box(result, fw, fh, kernel, width, height)
    out.append(("target", target_msg(header, result, fw, fh, box, (width, height), kernel)))
    if options.publish_markers and (wanted is None or wanted("markers")):
        at = target_pixel(result, width, height, kernel) if valid else None
        canvas = MarkerCanvas(width, height, fw, fh, options.marker_scale, plane)
        out.append(("markers", tracker_markers(header, at, canvas)))
    if options.publish_annotated and (wanted is None or wanted("annotated")):
        out.append(("annotated", image_msg(header, annotate_tracker(rgb, result, width, height, kernel))))
    return out


def looming_messages(header: Header, rgb: np.ndarray, result: Any, frames: int, width: int, height: int,
                     options: Any, wanted: Callable[[str], bool] | None = None,
                     plane: ImagePlane | None = None) -> list[tuple[str, Any]]:
    """(relative topic, message) for one looming frame: ``looming`` always (``frames``: samples in the tau
    history), ``markers`` / ``annotated`` as :func:`tracker_messages` decides them."""
    out: list[tuple[str, Any]] = [("looming", looming_msg(header, result, frames))]
    if options.publish_markers and (wanted is None or wanted("markers")):
        canvas = MarkerCanvas(width, height, rgb.shape[1], rgb.shape[0], options.marker_scale, plane)
        out.append(("markers", zone_markers(header, result.zones, canvas)))
    if options.publish_annotated and (wanted is None or wanted("annotated")):
        out.append(("annotated", image_msg(header, annotate_looming(rgb, result))))
    return out


def _marker(header: Header, ns: str, mid: int, mtype: int, rgba: tuple[float, ...]) -> Marker:
    m = Marker(header=header, ns=ns, id=mid, type=mtype, action=Marker.ADD, lifetime=_LIFETIME)
    m.pose.orientation.w = 1.0
    m.color = ColorRGBA(r=rgba[0], g=rgba[1], b=rgba[2], a=rgba[3])
    return m


def tracker_markers(header: Header, at: tuple[float, float] | None, canvas: MarkerCanvas) -> MarkerArray:
    """A sphere at ``at`` (template-input pixels; None: no valid target, the sphere is deleted) and a cross
    at the image centre, drawn on ``canvas``."""
    ux, uy = canvas.units
    target = _marker(header, "target", 0, Marker.SPHERE, (1.0, 0.2, 0.1, 0.9))
    if at is None:
        target.action = Marker.DELETE
    else:
        target.pose.position = canvas.points(at)[0]
    target.scale.x, target.scale.y, target.scale.z = 4 * ux, 4 * uy, 4 * ux
    centre = _marker(header, "centre", 0, Marker.LINE_LIST, (0.2, 1.0, 0.2, 0.8))
    cx, cy = (canvas.width - 1) / 2, (canvas.height - 1) / 2
    centre.points = canvas.points([(cx - 3, cy), (cx + 3, cy), (cx, cy - 3), (cx, cy + 3)])
    centre.scale.x = ux / 2
    return MarkerArray(markers=[target, centre])


def zone_markers(header: Header, zones: np.ndarray, canvas: MarkerCanvas) -> MarkerArray:
    """A cube per zone centred on it (on the image plane: its centre projects onto the zone's centre),
    colour by density, and its height (z: away from the image on z = 0, along the view on the plane)."""
    side = zones.shape[0]
    top = float(zones.max()) or 1.0
    ux, uy = canvas.units
    cell_w, cell_h = canvas.width / side, canvas.height / side  # template pixels
    out = MarkerArray()
    for row in range(side):
        for col in range(side):
            level = float(zones[row, col]) / top
            m = _marker(header, "zones", row * side + col, Marker.CUBE, (level, 0.3, 1.0 - level, 0.6))
            # the zone's centre as a pixel index (pixel i covers [i, i + 1))
            m.pose.position = canvas.points(((col + 0.5) * cell_w - 0.5, (row + 0.5) * cell_h - 0.5))[0]
            if canvas.plane is None:
                m.pose.position.z = level * 5 * ux
            m.scale.x, m.scale.y = cell_w * ux * 0.95, cell_h * uy * 0.95
            m.scale.z = max(level * 10 * ux, ux / 10)
            out.markers.append(m)
    return out


def image_msg(header: Header, rgb: np.ndarray) -> Image:
    rgb = np.ascontiguousarray(rgb)
    return Image(header=header, height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8",
                 step=rgb.shape[1] * 3, data=rgb.tobytes())


def _label(out: np.ndarray, text: str, colour: tuple[int, int, int]) -> None:
    """``text`` at the frame's top left on a black box (readable over any scene)."""
    import cv2

    h = out.shape[0]
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, max(0.3, h / 640)
    (tw, th), base = cv2.getTextSize(text, font, scale, 1)
    y = max(12, h // 12)
    cv2.rectangle(out, (0, y - th - 4), (tw + 8, y + base + 2), (0, 0, 0), -1)
    cv2.putText(out, text, (4, y), font, scale, colour, 1, cv2.LINE_AA)


def annotate_tracker(rgb: np.ndarray, result: Any, width: int, height: int,
                     kernel: tuple[int, int] | None = None) -> np.ndarray:
    """The frame with a cross at its centre and the tracking ``result`` (a ``TrackResult``): valid, a circle
    where the target is, a line from the centre and "valid" with the offsets; not valid, "not valid" and
    the reason, with a thin grey circle where the template's output decoded to (``measured``, what a
    controller must not act on) when there is one. ``width`` x ``height`` is the template's input size and
    ``kernel`` the pattern's patch: the circle is on the frame pixel the markers and the target box use."""
    import cv2

    out = rgb.copy()
    h, w = out.shape[:2]
    cx, cy = w // 2, h // 2
    size = max(4, min(w, h) // 30)
    cv2.drawMarker(out, (cx, cy), (0, 255, 0), cv2.MARKER_CROSS, size * 2, 1)

    def pixel(offset: tuple[float, float]) -> tuple[int, int]:
        at = frame_pixels(offsets_pixel(offset[0], offset[1], width, height, kernel), width, height, w, h)[0]
        return round(float(at[0])), round(float(at[1]))

    if not result.valid or result.x_offset is None or result.y_offset is None:
        if result.measured is not None:
            cv2.circle(out, pixel(result.measured), size, (160, 160, 160), 1)
        _label(out, f"not valid: {result.reason}", (255, 40, 20))
        return out
    tx, ty = pixel((result.x_offset, result.y_offset))
    cv2.circle(out, (tx, ty), size, (0, 255, 255), 2)  # cyan: seen on a red target too
    cv2.line(out, (cx, cy), (tx, ty), (255, 200, 0), 1)
    _label(out, f"valid  x {result.x_offset:+.2f}  y {result.y_offset:+.2f}", (0, 255, 0))
    return out


def annotate_looming(rgb: np.ndarray, result: Any) -> np.ndarray:
    """The frame with the zone grid, the centre zone's outline and the looming ``result`` (a
    ``LoomingResult``): tau, and the TTC in seconds when there is one, else why not (``ttc_reason``)."""
    import cv2

    out = rgb.copy()
    h, w = out.shape[:2]
    zones, tau = result.zones, result.tau
    side = zones.shape[0]
    for i in range(1, side):
        cv2.line(out, (i * w // side, 0), (i * w // side, h - 1), (255, 255, 0), 1)
        cv2.line(out, (0, i * h // side), (w - 1, i * h // side), (255, 255, 0), 1)
    c = side // 2
    colour = (255, 40, 20) if tau > 1 else (0, 255, 0)
    cv2.rectangle(out, (c * w // side, c * h // side), ((c + 1) * w // side, (c + 1) * h // side), colour, 2)
    ttc = f"ttc {result.ttc_s:.2f} s" if result.ttc_s is not None else f"no ttc: {result.ttc_reason or '?'}"
    _label(out, f"tau {tau:.2f}  {ttc}", colour)
    return out
