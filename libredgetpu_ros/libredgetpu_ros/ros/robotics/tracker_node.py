"""Servo tracker lifecycle node: camera images in; the target's offset and servo error out (spot or pattern).

A :class:`~libredgetpu_ros.ros.camera.CameraNode` (intake, QoS, newest frame, pixel budget, diagnostics,
faults) whose processor (``robotics/processors.TrackerProcessor``, what ``process-bag`` runs too) is a
``SpotTracker`` or ``PatternTracker`` (``module`` parameter):

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
from typing import Any

from libredgetpu_ros.errors import InputError, LibrEdgeTpuError
from libredgetpu_ros.ros.camera import CameraNode
from libredgetpu_ros.ros.camera.image_plane import ImagePlaneInput
from libredgetpu_ros.ros.robotics.params import TRACKER_PARAMS
from libredgetpu_ros.ros.robotics.processors import TrackerProcessor
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main
from libredgetpu_ros_interfaces.srv import SetColor, SetTemplateRegion


class TrackerNode(ImagePlaneInput, CameraNode):
    """Spot / pattern tracking on the newest camera frame (``TrackerProcessor``); see the module docstring."""

    PARAMS = TRACKER_PARAMS
    PROCESSOR = TrackerProcessor
    DIAGNOSTICS_NAME = "tracker"

    def create_outputs(self) -> None:
        super().create_outputs()
        self.service(SetColor, "~/set_color", self._on_set_color)
        self.service(SetTemplateRegion, "~/set_template_region", self._on_set_region)

    # -- services (main executor) ---------------------------------------------------------------------------
    def _tracker(self) -> Any:
        processor = self.processor
        return None if processor is None else processor.tracker

    def _on_set_color(self, request: Any, response: Any) -> Any:
        processor: Any = self.processor
        tracker = self._tracker()
        response.version = 0 if tracker is None else tracker.runner.store.version
        if tracker is None or not hasattr(tracker, "set_color"):
            response.success, response.message = False, "this node does not run a spot tracker"
            return response
        try:
            # a frame holding the tracker past 1 s: FrameBusyError, refused (the executor not blocked)
            swap = processor.swap(lambda t: t.set_color((request.r, request.g, request.b)))
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
        processor: Any = self.processor
        tracker, last = self._tracker(), None if processor is None else processor.last
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
            swap = processor.swap(lambda t: t.set_template_at(fitted, x, y))
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
