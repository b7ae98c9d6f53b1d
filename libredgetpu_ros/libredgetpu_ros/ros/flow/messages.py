"""Flow results -> ROS messages: what one frame produces, decided in one place (:func:`flow_messages`) that
the flow node publishes from and ``process-bag`` (``ros/bag_nodes.py``) writes from, so live and offline
results are the same messages."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from geometry_msgs.msg import Point, QuaternionStamped, TwistStamped, TwistWithCovarianceStamped
from std_msgs.msg import Header
from visualization_msgs.msg import Marker

# relative topic -> message class: every topic the flow node publishes; the node makes its publishers from
# these, process-bag (ros/bag_nodes.py) its output connections
FLOW_OUTPUTS: dict[str, type] = {"heading": QuaternionStamped, "flow_estimate": TwistWithCovarianceStamped,
                                  "flow": TwistStamped, "flow_marker": Marker}

# flow_estimate's covariance says what the estimate is (docs/robotics.md, Flow node):
NOT_AVAILABLE = -1.0  # covariance[0] of a pair without an estimate (the sensor_msgs convention); twist 0
SATURATED_VARIANCE = 1e12  # linear variances of a saturated pair: the motion is at least what the twist says
# valid: sigma (px) = SIGMA_FLOOR_PX + SIGMA_PER_MISMATCH_PX * (1 - confidence), per second by dt; angular.z's
# sigma is the same in radians (sigma_px / the centre focal length); confidence = 1 - (sigma - floor) / gain
SIGMA_FLOOR_PX = 0.05
SIGMA_PER_MISMATCH_PX = 20.0


def stamp_seconds(header: Header) -> float | None:
    """The header's stamp in seconds, or None when the publisher left it zero (no rates then)."""
    stamp = header.stamp
    if stamp.sec == 0 and stamp.nanosec == 0:
        return None
    return stamp.sec + stamp.nanosec * 1e-9


def centre_pixels(yaw_deg: float, vx: float, projection: str, fov_deg: float, width: int) -> float:
    """Horizontal flow in pixels of a ``width``-pixel pinhole image at its centre. Under the pinhole
    projection the flow was measured in equal-angle columns: its angle (``yaw_deg``) times the centre's
    focal length; under the linear one it is ``vx`` as measured."""
    if projection != "pinhole":
        return vx
    focal = (width / 2.0) / math.tan(math.radians(fov_deg) / 2.0)
    return focal * math.radians(yaw_deg)


def heading_msg(header: Header, heading_deg: float) -> QuaternionStamped:
    """The integrated heading as a rotation about z."""
    heading = QuaternionStamped(header=header)
    rad = math.radians(heading_deg)
    heading.quaternion.z, heading.quaternion.w = math.sin(rad / 2), math.cos(rad / 2)
    return heading


def arrow_marker(header: Header, vx: float, vy: float, scale: float) -> Marker:
    """An arrow 1 m ahead of the camera along the flow (optical frame), ``scale`` m per pixel/s."""
    marker = Marker(header=header, ns="flow", id=0, type=Marker.ARROW, action=Marker.ADD)
    marker.points = [Point(x=0.0, y=0.0, z=1.0), Point(x=vx * scale, y=vy * scale, z=1.0)]
    marker.scale.x, marker.scale.y, marker.scale.z = 0.01, 0.02, 0.02  # shaft and head diameters, m
    marker.color.r, marker.color.g, marker.color.a = 0.1, 0.9, 1.0
    marker.lifetime.nanosec = 500_000_000  # the arrow vanishes when estimates stop
    return marker


def sigma_px(confidence: float) -> float:
    """Standard deviation (frame pixels) that ``flow_estimate`` states for a valid pair's confidence."""
    return SIGMA_FLOOR_PX + SIGMA_PER_MISMATCH_PX * (1.0 - min(1.0, max(0.0, confidence)))


def confidence_of(variance: float, dt: float) -> float:
    """The confidence a ``flow_estimate`` linear variance (px²/s²) stands for (its inverse of sigma_px)."""
    return 1.0 - (math.sqrt(variance) * dt - SIGMA_FLOOR_PX) / SIGMA_PER_MISMATCH_PX


def estimate_msg(header: Header, result: Any, vx: float, vy: float,
                 focal_px: float) -> TwistWithCovarianceStamped:
    """Every pair, what it is: valid (variances from the confidence), saturated (the values seen, linear
    variances SATURATED_VARIANCE) or no estimate (zeros, covariance[0] = NOT_AVAILABLE)."""
    msg = TwistWithCovarianceStamped(header=header)
    flow = result.flow
    covariance = [0.0] * 36
    if result.valid or flow.saturated:
        msg.twist.twist.linear.x, msg.twist.twist.linear.y = vx, vy
        msg.twist.twist.angular.z = result.yaw_rate if result.valid else 0.0
    if result.valid:
        sigma = sigma_px(flow.confidence) / flow.dt
        covariance[0] = covariance[7] = sigma * sigma
        covariance[35] = (sigma / focal_px) ** 2
    elif flow.saturated:
        covariance[0] = covariance[7] = covariance[35] = SATURATED_VARIANCE
    else:
        covariance[0] = NOT_AVAILABLE
    msg.twist.covariance = covariance
    return msg


def flow_messages(header: Header, result: Any, heading_deg: float, fov_deg: float, projection: str,
                  width: int, options: Any, wanted: Callable[[str], bool] | None = None
                  ) -> list[tuple[str, Any]]:
    """(relative topic, message) for one compass step (``VisualCompass.step``), in publishing order:
    ``heading`` always; ``flow_estimate`` (TwistWithCovarianceStamped) for every pair with a positive stamp
    difference, valid or not, its covariance saying which (:func:`estimate_msg`); ``flow`` (TwistStamped:
    centre flow in px/s, yaw rate) only for a valid pair, never with a non-finite value; ``flow_marker``
    with it when ``options.publish_marker`` and ``wanted("flow_marker")`` (default: all). ``width`` is the
    frame's."""
    out: list[tuple[str, Any]] = [("heading", heading_msg(header, heading_deg))]
    flow = result.flow
    if not flow.dt > 0.0:
        return out
    focal = (width / 2.0) / math.tan(math.radians(min(fov_deg, 179.0)) / 2.0)
    # a saturated pair has no yaw from the compass: its angle is its equal-angle columns' share of the fov
    yaw_deg = result.yaw_deg if result.valid else fov_deg * flow.vx / width
    vx = centre_pixels(yaw_deg, flow.vx, projection, fov_deg, width) / flow.dt
    vy = flow.vy / flow.dt
    if not all(math.isfinite(v) for v in (vx, vy, result.yaw_rate)):  # never publish NaN
        return out
    out.append(("flow_estimate", estimate_msg(header, result, vx, vy, focal)))
    if not result.valid:
        return out
    twist = TwistStamped(header=header)
    twist.twist.linear.x, twist.twist.linear.y = vx, vy
    twist.twist.angular.z = result.yaw_rate
    out.append(("flow", twist))
    if options.publish_marker and (wanted is None or wanted("flow_marker")):
        out.append(("flow_marker", arrow_marker(header, vx, vy, options.marker_scale)))
    return out
