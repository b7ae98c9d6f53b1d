"""Servo tracker lifecycle node: camera images in; the target's offset and servo error out (spot or pattern).

A :class:`~libredgetpu_ros.ros.camera.CameraNode` (intake, QoS, newest frame, pixel budget, diagnostics,
faults) whose processor is a ``SpotTracker`` or ``PatternTracker`` (``module`` parameter):

- topics (stamped with the frame's header): ``offset`` (geometry_msgs/PointStamped: x right, y down, in
  [-1, 1] from the image centre; only for frames with a valid target), ``servo_error``
  (geometry_msgs/Vector3Stamped: ``-gain * offset``, zero while no valid target), ``target``
  (vision_msgs/Detection2DArray: one detection when valid, none when not: the stamped valid flag),
  ``markers`` (target and image centre; on the camera's image plane once its CameraInfo arrives:
  ``camera/image_plane.py``), ``annotated`` (sensor_msgs/Image, off by default);
- services (created on configure): ``~/set_color`` (libredgetpu_ros_interfaces/SetColor; spot colour
  templates) and ``~/set_template_region`` (SetTemplateRegion: the patch centred on a box of the last
  processed frame; pattern templates). A refused swap (NaN, wrong template kind, region outside, flat patch)
  answers success=false and changes nothing; the node keeps running either way. Swaps are atomic
  (``reparam``): every frame runs on one parameter version, shown in diagnostics.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from std_msgs.msg import Header

from libredgetpu_ros.errors import InputError, LibrEdgeTpuError
from libredgetpu_ros.ros.camera import CameraNode, Frame
from libredgetpu_ros.ros.camera.image_plane import ImagePlaneInput
from libredgetpu_ros.ros.robotics import messages
from libredgetpu_ros.ros.robotics.params import TRACKER_PARAMS, parse_color
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main
from libredgetpu_ros_interfaces.srv import SetColor, SetTemplateRegion


def open_tracker(p: Any, warn: Callable[[str], Any] | None = None) -> Any:
    """The tracker the node's parameters ask for, with the configured colour / patch swapped in; ``warn``
    hears what was substituted (colour weights clipped to the template's range)."""
    from libredgetpu_ros.errors import ConfigError
    from libredgetpu_ros.robotics.template import load_template

    if not p.template:
        raise ConfigError("parameter template is empty: set it to a robotics template")
    template = load_template(p.template)
    options = {"backend": p.backend, "device": p.device or None, "resize": p.resize}
    if p.module == "spot":
        from libredgetpu_ros.robotics.spot import SpotTracker

        tracker = SpotTracker(template, mode=p.mode, **options)
        color = parse_color(p.color)
        if color is not None:
            swap = tracker.set_color(color)
            if swap.clipped and warn is not None:
                warn(f"colour {list(color)} does not fit the template's filter scale {swap.scale:.6g}: "
                     f"{swap.clipped} weight(s) clipped, the filter is {[round(v, 4) for v in swap.color]}")
        return tracker
    from libredgetpu_ros.robotics.pattern import PatternTracker

    tracker = PatternTracker(template, mode="normalized" if p.mode == "checked" else "libredgetpu", **options)
    if p.template_patch:
        from libredgetpu_ros.perception.images import load_image

        tracker.set_template(load_image(p.template_patch))  # the tracker makes it grey when it tracks grey
    return tracker


def tracker_kernel(tracker: Any) -> tuple[int, int] | None:
    """The pattern tracker's patch size (width, height) in template-input pixels; None for a spot tracker."""
    width = getattr(tracker, "kernel_width", None)
    return None if width is None else (int(width), int(tracker.kernel_height))


def track_fitted(tracker: Any, fitted: Any) -> Any:
    """The TrackResult of a frame already fitted to the template (``tracker.prepare(rgb)[0]``); also what
    offline processing (``ros/bag_nodes.py``) runs."""
    found = tracker.track(fitted)
    return getattr(found, "result", found)  # PatternMatch wraps a TrackResult


class TrackerNode(ImagePlaneInput, CameraNode):
    """Spot / pattern tracking on the newest camera frame; see the module docstring."""

    PARAMS = TRACKER_PARAMS
    DIAGNOSTICS_NAME = "tracker"

    def __init__(self, node_name: str = "tracker", **kwargs: Any) -> None:
        self._tracker: Any = None
        self._lock = threading.Lock()  # the tracker reference against close
        self._pubs: dict[str, Any] = {}
        self._last: tuple[Any, int, int] | None = None  # (template-input image, frame width, frame height)
        self._last_offset: tuple[float, float] | None = None
        self._last_reason = ""
        self._not_valid: dict[str, int] = {}  # frames without a valid target, by reason
        self._describe: dict[str, Any] = {}
        super().__init__(node_name, **kwargs)

    # -- the camera-node hooks ------------------------------------------------------------------------------
    def open_processor(self) -> None:
        tracker = open_tracker(self.params, warn=self.get_logger().warning)
        with self._lock:
            self._tracker = tracker
        self._describe = tracker.describe()

    def close_processor(self) -> None:
        with self._lock:
            tracker, self._tracker = self._tracker, None
        self.close_logged(tracker, "the tracker")

    def create_outputs(self) -> None:
        self._pubs = {topic: self.output(cls, topic) for topic, cls in messages.TRACKER_OUTPUTS.items()}
        self.service(SetColor, "~/set_color", self._on_set_color)
        self.service(SetTemplateRegion, "~/set_template_region", self._on_set_region)

    def destroy_outputs(self) -> None:
        self._pubs = {}

    def process(self, rgb: Any, header: Header, frame: Frame) -> Mapping[str, float] | None:
        tracker = self._tracker
        if tracker is None:
            return None
        t0 = time.monotonic()
        fitted = tracker.prepare(rgb)[0]
        t1 = time.monotonic()
        result = track_fitted(tracker, fitted)
        t2 = time.monotonic()
        self._last = (fitted, rgb.shape[1], rgb.shape[0])
        self._last_offset = (result.x_offset, result.y_offset) if result.valid else None
        self._last_reason = result.reason
        if not result.valid:
            self._not_valid[result.reason] = self._not_valid.get(result.reason, 0) + 1
        pubs = self._pubs
        for topic, msg in messages.tracker_messages(header, rgb, result, tracker.width, tracker.height,
                                                    self.params,
                                                    wanted=lambda t: pubs[t].get_subscription_count() > 0,
                                                    kernel=tracker_kernel(tracker),
                                                    plane=self.image_plane(rgb.shape[1], rgb.shape[0])):
            pubs[topic].publish(msg)
        return {"prepare": (t1 - t0) * 1e3, "track": (t2 - t1) * 1e3,
                "publish": (time.monotonic() - t2) * 1e3}

    def diagnostic_values(self) -> dict[str, object]:
        tracker = self._tracker
        values: dict[str, object] = {"module": self.params.module, "template": self.params.template,
                                     "backend": self._describe.get("backend", "")}
        if tracker is not None:
            values["parameters_version"] = tracker.runner.store.version
            if getattr(tracker, "color", None) is not None:
                values["color"] = " ".join(f"{v:.3f}" for v in tracker.color)
        if self._last_offset is not None:
            from libredgetpu_ros.robotics.offsets import offset_to_direction

            values["direction"] = offset_to_direction(*self._last_offset, self.params.direction_threshold)
        elif self._last_reason:
            values["direction"] = "none"
        if self._last_reason:
            values["last_reason"] = self._last_reason
        for reason, count in sorted(self._not_valid.items()):
            values[f"not_valid_{reason}"] = count
        return values

    def hardware_id(self) -> str:
        return str(self._describe.get("device") or self._describe.get("backend") or "cpu")

    # -- services (main executor) ---------------------------------------------------------------------------
    def _on_set_color(self, request: Any, response: Any) -> Any:
        tracker = self._tracker
        response.version = 0 if tracker is None else tracker.runner.store.version
        if tracker is None or not hasattr(tracker, "set_color"):
            response.success, response.message = False, "this node does not run a spot tracker"
            return response
        try:
            swap = tracker.set_color((request.r, request.g, request.b))
        except LibrEdgeTpuError as exc:
            response.success, response.message = False, str(exc)
            return response
        response.success, response.version = True, swap.version
        response.weights, response.applied = list(swap.weights), list(swap.color)
        response.clipped = swap.clipped
        response.message = f"colour filter {list(swap.weights)} (version {swap.version})" + (
            f", {swap.clipped} weight(s) clipped to the template's range" if swap.clipped else "")
        self.get_logger().info(f"set_color: {response.message}")
        return response

    def _on_set_region(self, request: Any, response: Any) -> Any:
        tracker, last = self._tracker, self._last
        response.version = 0 if tracker is None else tracker.runner.store.version
        if tracker is None or not hasattr(tracker, "set_template"):
            response.success, response.message = False, "this node does not run a pattern tracker"
            return response
        if last is None:
            response.success, response.message = False, "no frame processed yet"
            return response
        fitted, width, height = last
        try:
            x, y = region_patch_corner(request, width, height, tracker)
            swap = tracker.set_template_at(fitted, x, y)
        except LibrEdgeTpuError as exc:
            response.success, response.message = False, str(exc)
            return response
        response.success, response.version, response.patch_x, response.patch_y = True, swap.version, x, y
        response.message = f"template from the patch at ({x}, {y}) of the model input (version " \
                           f"{swap.version})"
        self.get_logger().info(f"set_template_region: {response.message}")
        return response


def region_patch_corner(box: Any, width: int, height: int, tracker: Any) -> tuple[int, int]:
    """Top-left corner (template-input pixels) of the kernel-sized patch centred on ``box`` (frame pixels),
    moved inside the image; a box not inside the frame is an InputError."""
    if box.width <= 0 or box.height <= 0 or box.x < 0 or box.y < 0 or box.x + box.width > width \
            or box.y + box.height > height:
        raise InputError(f"region ({box.x}, {box.y}, {box.width}x{box.height}) is not inside the "
                         f"{width}x{height} frame")
    sx, sy = tracker.width / width, tracker.height / height
    cx, cy = (box.x + box.width / 2) * sx, (box.y + box.height / 2) * sy
    x = round(cx - tracker.kernel_width / 2)
    y = round(cy - tracker.kernel_height / 2)
    return (min(max(x, 0), tracker.width - tracker.kernel_width),
            min(max(y, 0), tracker.height - tracker.kernel_height))


def main(args: list[str] | None = None) -> int:
    return run_lifecycle_node_main(TrackerNode, args, retain_allocations=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
