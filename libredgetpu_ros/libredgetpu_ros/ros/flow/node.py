"""Flow lifecycle node: camera images in; image-plane motion, yaw rate, heading and an rviz arrow out.

A :class:`~libredgetpu_ros.ros.camera.CameraNode` (image intake, QoS, compressed input, pixel budget, newest
frame only, bad input counted, faults through ``on_error``, diagnostics) whose processor
(``flow/processor.py``, what ``process-bag`` runs too) is a
:class:`~libredgetpu_ros.robotics.compass.VisualCompass` over an
:class:`~libredgetpu_ros.robotics.flow.OpticalFlow` (one accelerator call per frame).

Outputs, each with the camera frame's header:

- ``flow`` (``geometry_msgs/TwistStamped``): ``linear.x`` / ``linear.y`` the image-plane flow in pixels per
  second of the camera image (right / down; at the image centre), ``angular.z`` the yaw rate in rad/s (REP
  103: positive = turning left). Rates divide by the difference of the two frames' header stamps, never
  the wall clock: a bag replayed at any speed, or a camera at 10 Hz or 30 Hz, gives the same numbers.
  Published only for a valid pair: a flat, ambiguous, unsure or saturated pair, the first frame, a frame
  after a gap longer than ``max_gap``, a frame of another size or without a later stamp publishes nothing
  here and is counted in diagnostics by reason;
- ``flow_estimate`` (``geometry_msgs/TwistWithCovarianceStamped``): every pair with a stamp difference,
  valid or not, the same values as ``flow`` where there are some; its covariance says what it is (``flow/
  messages.py``): ``covariance[0] = -1`` no estimate (twist 0), linear variances 1e12 saturated (the motion
  is at least the twist's: beyond the search range), else the variances of a valid estimate from its
  confidence (sigma = 0.05 + 20 (1 - confidence) px, per second);
- ``heading`` (``geometry_msgs/QuaternionStamped``): the integrated heading (rotation about z), every
  processed frame;
- ``flow_marker`` (``visualization_msgs/Marker``): an arrow 1 m ahead of the camera along the flow
  (camera optical frame: x right, y down), ``marker_scale`` m per pixel/s;
- ``~/reset_heading`` (``std_srvs/Trigger``, while configured): the heading back to 0.

The header is the frame's (stamp and frame_id), but the values are not optical-frame components: image-plane
pixels/s and the yaw about the robot's vertical axis (docs/robotics.md "Conventions").

The field of view is ``fov_deg`` until a ``sensor_msgs/CameraInfo`` arrives on ``camera_info_topic`` (when
``use_camera_info``): then ``2·atan(width / (2·fx))``.
"""

from __future__ import annotations

from typing import Any

from sensor_msgs.msg import CameraInfo
from std_srvs.srv import Trigger

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.ros.camera import CameraNode
from libredgetpu_ros.ros.camera.qos import CAMERA_INFO_QOS
from libredgetpu_ros.ros.flow.messages import centre_pixels, stamp_seconds
from libredgetpu_ros.ros.flow.params import PARAMS
from libredgetpu_ros.ros.flow.processor import FlowProcessor
from libredgetpu_ros.ros.frame_busy import FrameBusyError

__all__ = ["CAMERA_INFO_QOS", "FlowNode", "centre_pixels", "stamp_seconds"]


class FlowNode(CameraNode):
    """Optical flow and visual compass (``FlowProcessor``) on the newest camera frame; see the module
    docstring."""

    PARAMS = PARAMS
    PROCESSOR = FlowProcessor
    DIAGNOSTICS_NAME = "flow"

    def create_outputs(self) -> None:
        super().create_outputs()
        self.service(Trigger, "~/reset_heading", self._on_reset_heading)

    def _on_reset_heading(self, request: Any, response: Any) -> Any:
        """``~/reset_heading`` (std_srvs/Trigger): the integrated heading back to 0 (e.g. when the robot is
        known to face its reference direction); the current pair is kept."""
        processor: Any = self.processor
        if processor is None:
            response.success, response.message = False, "not configured"
            return response
        try:
            previous = processor.reset_heading()
        except FrameBusyError as exc:  # a frame holds the compass past the bound: the executor not blocked
            response.success, response.message = False, str(exc)
            return response
        response.success, response.message = True, f"heading {previous:.3f} deg -> 0"
        return response

    def create_inputs(self) -> None:
        super().create_inputs()  # the processor restarts: frames from before the pause pair with no new one
        if self.cfg.use_camera_info:
            # on the data path: CameraInfo and frames handled in order on one thread, never concurrently
            self.data_subscription(CameraInfo, self.resolve_topic_name(self.cfg.camera_info_topic),
                                   self._on_camera_info, CAMERA_INFO_QOS)

    # -- camera info -----------------------------------------------------------------------------

    def _on_camera_info(self, msg: CameraInfo) -> None:
        from libredgetpu_ros.robotics.compass import fov_from_camera_info

        processor: Any = self.processor
        try:
            fov = fov_from_camera_info(int(msg.width), float(msg.k[0]))
            if processor is not None and processor.camera_fov(fov):
                self.get_logger().info(f"field of view {fov:.2f} deg from camera info ({msg.width} px, "
                                       f"fx {msg.k[0]:.1f})")
        except ConfigError as exc:
            count = self.stats.bad_input.add("camera_info")
            if count == 1:
                self.get_logger().warning(f"camera info ignored (keeping fov_deg): {exc}")
