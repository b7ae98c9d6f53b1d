"""Flow results -> ROS messages: what one frame produces, decided in one place (:func:`flow_messages`) that
the flow node publishes from and ``process-bag`` (``ros/bag_nodes.py``) writes from, so live and offline
results are the same messages."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from geometry_msgs.msg import Point, QuaternionStamped, TwistStamped
from std_msgs.msg import Header
from visualization_msgs.msg import Marker

# relative topic -> message class: every topic the flow node publishes; the node makes its publishers from
# these, process-bag (ros/bag_nodes.py) its output connections
FLOW_OUTPUTS: dict[str, type] = {"heading": QuaternionStamped, "flow": TwistStamped, "flow_marker": Marker}


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


def flow_messages(header: Header, result: Any, heading_deg: float, fov_deg: float, projection: str,
                  width: int, options: Any, wanted: Callable[[str], bool] | None = None
                  ) -> list[tuple[str, Any]]:
    """(relative topic, message) for one compass step (``VisualCompass.step``), in publishing order:
    ``heading`` always; ``flow`` (TwistStamped: centre flow in px/s, yaw rate) for a pair with an estimate
    and a positive stamp difference, never with a non-finite value; ``flow_marker`` with it when
    ``options.publish_marker`` and ``wanted("flow_marker")`` (default: all). ``width`` is the frame's."""
    out: list[tuple[str, Any]] = [("heading", heading_msg(header, heading_deg))]
    flow = result.flow
    if not (result.valid and flow.dt > 0.0):
        return out
    vx = centre_pixels(result.yaw_deg, flow.vx, projection, fov_deg, width) / flow.dt
    vy = flow.vy / flow.dt
    if not all(math.isfinite(v) for v in (vx, vy, result.yaw_rate)):  # never publish NaN
        return out
    twist = TwistStamped(header=header)
    twist.twist.linear.x, twist.twist.linear.y = vx, vy
    twist.twist.angular.z = result.yaw_rate
    out.append(("flow", twist))
    if options.publish_marker and (wanted is None or wanted("flow_marker")):
        out.append(("flow_marker", arrow_marker(header, vx, vy, options.marker_scale)))
    return out
