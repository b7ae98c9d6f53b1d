"""Flow lifecycle node: camera images in; image-plane motion, yaw rate, heading and an rviz arrow out.

A :class:`~libredgetpu_ros.ros.camera.CameraNode` (image intake, QoS, compressed input, pixel budget, newest
frame only, bad input counted, faults through ``on_error``, diagnostics) whose processor is a
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

import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from sensor_msgs.msg import CameraInfo
from std_msgs.msg import Header
from std_srvs.srv import Trigger

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.ros.camera import CameraNode, Frame
from libredgetpu_ros.ros.camera.qos import CAMERA_INFO_QOS
from libredgetpu_ros.ros.flow.messages import FLOW_OUTPUTS, centre_pixels, flow_messages, stamp_seconds
from libredgetpu_ros.ros.flow.params import PARAMS

__all__ = ["CAMERA_INFO_QOS", "FlowNode", "centre_pixels", "open_compass", "stamp_seconds"]

# Settings of the flow that may change while active (applied under the processor lock).
_RUNTIME_FLOW = ("temperature", "min_texture", "min_confidence", "min_margin", "max_gap", "min_match")
# Reasons a pair has no estimate because of the scene (diagnostics warn when most pairs have one).
_SCENE_REASONS = ("low_texture", "low_confidence", "ambiguous", "saturated")


def open_compass(p: Any) -> Any:
    """The compass (over its optical flow) the node's parameters ask for (also what ``process-bag`` runs)."""
    from libredgetpu_ros.robotics.compass import VisualCompass

    return VisualCompass.from_template(
        p.model, p.fov_deg, p.projection, backend=p.backend, device=p.device or None, mode=p.mode,
        search_range=p.search_range, pool_factor=p.pool_factor, temperature=p.temperature,
        min_texture=p.min_texture, min_confidence=p.min_confidence, min_margin=p.min_margin,
        max_gap=p.max_gap, refine=p.refine, min_match=p.min_match)


class FlowNode(CameraNode):
    """Optical flow and visual compass on the newest camera frame; see the module docstring."""

    PARAMS = PARAMS
    DIAGNOSTICS_NAME = "flow"

    def __init__(self, node_name: str = "flow", **kwargs: Any) -> None:
        self._compass: Any = None
        self._lock = threading.Lock()  # the compass: camera thread vs parameter changes
        self._describe: dict[str, Any] = {}
        self._pubs: dict[str, Any] = {}
        self._info_sub: Any = None
        self._fov_source = "parameter"
        # pairs per reason since configure, and since the last diagnostics message (camera thread writes,
        # the diagnostics timer reads and swaps the period's: under _count_lock)
        self._count_lock = threading.Lock()
        self._reasons: Counter[str] = Counter()
        self._period: Counter[str] = Counter()
        self._saturated = 0
        self._last_confidence = 0.0
        super().__init__(node_name, **kwargs)

    # -- the camera-node hooks ------------------------------------------------------------------------------

    def open_processor(self) -> None:
        compass = open_compass(self.params)
        flow = compass.flow
        described = flow.runner.describe()
        with self._lock:
            self._compass = compass
        self._describe = {"backend": flow.runner.backend_name, "device": str(described.get("device", "")),
                          "template": flow.template.name, "grid_step_px": flow.grid_step}
        self._fov_source = "parameter"
        with self._count_lock:
            self._reasons, self._period, self._saturated = Counter(), Counter(), 0

    def close_processor(self) -> None:
        with self._lock:
            compass, self._compass = self._compass, None
        self.close_logged(compass, "the flow template")

    def create_outputs(self) -> None:
        self._pubs = {topic: self.output(cls, topic) for topic, cls in FLOW_OUTPUTS.items()}
        self.service(Trigger, "~/reset_heading", self._on_reset_heading)

    def destroy_outputs(self) -> None:
        self._pubs = {}

    def _on_reset_heading(self, request: Any, response: Any) -> Any:
        """``~/reset_heading`` (std_srvs/Trigger): the integrated heading back to 0 (e.g. when the robot is
        known to face its reference direction); the current pair is kept."""
        with self._lock:
            if self._compass is None:
                response.success, response.message = False, "not configured"
                return response
            previous, self._compass.heading_deg = self._compass.heading_deg, 0.0
        response.success, response.message = True, f"heading {previous:.3f} deg -> 0"
        return response

    def on_activate(self, state: Any) -> Any:
        result = super().on_activate(state)
        if self.params.use_camera_info:
            # on the camera path: CameraInfo and frames handled in order on one thread, never concurrently
            self._info_sub = self.camera_subscription(
                CameraInfo, self.resolve_topic_name(self.params.camera_info_topic), self._on_camera_info,
                CAMERA_INFO_QOS)
        with self._lock:
            if self._compass is not None:
                self._compass.flow.reset()  # frames from before the pause do not pair with new ones
        return result

    def on_deactivate(self, state: Any) -> Any:
        if self._info_sub is not None:
            sub, self._info_sub = self._info_sub, None
            self.destroy_camera_subscription(sub)
        return super().on_deactivate(state)

    def process(self, rgb: Any, header: Header, frame: Frame) -> Mapping[str, float] | None:
        started = time.monotonic()
        with self._lock:
            compass = self._compass
            if compass is None:
                return None
            result = compass.step(rgb, stamp_seconds(header))
            heading_deg, fov, projection = compass.heading_deg, compass.fov_deg, compass.projection
        computed = time.monotonic()
        flow = result.flow
        reason = flow.reason or "estimate"
        with self._count_lock:
            self._reasons[reason] += 1
            self._period[reason] += 1
            self._saturated += flow.saturated
        pubs = self._pubs
        out = flow_messages(header, result, heading_deg, fov, projection, rgb.shape[1], self.params,
                            wanted=lambda t: pubs[t].get_subscription_count() > 0)
        for topic, msg in out:
            pubs[topic].publish(msg)
        if result.valid and flow.dt > 0.0:
            self._last_confidence = flow.confidence
            if all(topic != "flow" for topic, _ in out):  # pragma: no cover - never non-finite; counted if so
                self.stats.bad_input.add("non_finite")
        elif result.valid:
            with self._count_lock:
                self._reasons["unstamped"] += 1  # an estimate, but no time between the frames: no rate
        return {"flow": (computed - started) * 1e3, "publish": (time.monotonic() - computed) * 1e3}

    def diagnostic_values(self) -> dict[str, object]:
        with self._lock:
            compass = self._compass
            heading = compass.heading_deg if compass is not None else 0.0
            fov = compass.fov_deg if compass is not None else self.params.fov_deg
        with self._count_lock:
            reasons, saturated = Counter(self._reasons), self._saturated
        values: dict[str, object] = {
            "template": self._describe.get("template", self.params.model),
            "backend": self._describe.get("backend", ""), "mode": self.params.mode,
            "projection": self.params.projection, "fov_deg": round(fov, 3), "fov_source": self._fov_source,
            "heading_deg": round(heading, 3), "estimates": reasons["estimate"],
            "saturated": saturated, "last_confidence": round(self._last_confidence, 3)}
        for reason in (*_SCENE_REASONS, "first_frame", "gap", "size_changed", "stamp", "unstamped"):
            values[f"no_estimate_{reason}"] = reasons[reason]
        return values

    def diagnostic_warnings(self) -> list[str]:
        with self._count_lock:
            period, self._period = self._period, Counter()
        pairs = sum(n for reason, n in period.items() if reason != "first_frame")
        scene = sum(period[r] for r in _SCENE_REASONS)
        if pairs and scene * 2 > pairs:
            detail = ", ".join(f"{r} {period[r]}" for r in _SCENE_REASONS if period[r])
            return [f"no motion estimate for {scene} of {pairs} frame pairs ({detail}): the scene lacks "
                    f"texture or repeats; nothing is published on flow for them"]
        return []

    def hardware_id(self) -> str:
        return str(self._describe.get("device") or self._describe.get("backend") or "cpu")

    def check_runtime_params(self, changes: dict[str, Any]) -> str | None:
        with self._lock:
            compass = self._compass
            if compass is None:
                return None
            if "fov_deg" in changes and self._fov_source == "camera_info":
                return (f"the field of view comes from CameraInfo ({compass.fov_deg:.2f} deg); set "
                        f"use_camera_info false and configure again to use fov_deg")
            if "fov_deg" in changes:
                try:
                    compass.set_fov(float(changes["fov_deg"]))
                except ConfigError as exc:
                    return str(exc)
            for name in _RUNTIME_FLOW:
                if name in changes:
                    setattr(compass.flow, name, float(changes[name]))
        return None

    # -- camera info -----------------------------------------------------------------------------

    def _on_camera_info(self, msg: CameraInfo) -> None:
        from libredgetpu_ros.robotics.compass import fov_from_camera_info

        try:
            fov = fov_from_camera_info(int(msg.width), float(msg.k[0]))
            with self._lock:
                if self._compass is not None and abs(self._compass.fov_deg - fov) > 1e-9:
                    self._compass.set_fov(fov)
                    self._fov_source = "camera_info"
                    self.get_logger().info(f"field of view {fov:.2f} deg from camera info ({msg.width} px, "
                                           f"fx {msg.k[0]:.1f})")
        except ConfigError as exc:
            count = self.stats.bad_input.add("camera_info")
            if count == 1:
                self.get_logger().warning(f"camera info ignored (keeping fov_deg): {exc}")

