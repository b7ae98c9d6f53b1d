"""The image subscription's QoS: which reliability to subscribe with, and the incompatible-QoS count.

REP-2003 asks sensor drivers to publish with the system default QoS (reliable) and subscribers to use the
sensor-data QoS (best effort), which matches any publisher. For small frames that is right. For large ones
(1920x1080 rgb8 is 6 MB, fragmented by DDS) a best-effort reader of a reliable writer loses most frames: a
fragment lost is a frame lost, with no repair (measured in docs/perception_node.md). So ``auto`` (the
default) subscribes reliable when every publisher found on the topic is reliable, best effort when any is
best effort (a reliable reader cannot match a best-effort writer) or none exists yet; the choice is made
again when a publisher comes or goes or an incompatible one is reported.
A reliable reader keeps KEEP_LAST depth :data:`IMAGE_DEPTH`, so a slow node still only holds the newest few
frames and never slows the camera down beyond what the writer's own history allows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rclpy.qos import QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy

RELIABILITY_CHOICES = ("auto", "best_effort", "reliable")
IMAGE_DEPTH = 5  # the sensor-data profile's depth: newest few frames only

_POLICY = {"best_effort": QoSReliabilityPolicy.BEST_EFFORT, "reliable": QoSReliabilityPolicy.RELIABLE}


def image_qos(reliability: str) -> QoSProfile:
    """The subscription profile for ``best_effort`` or ``reliable`` (KEEP_LAST :data:`IMAGE_DEPTH`)."""
    return QoSProfile(history=QoSHistoryPolicy.KEEP_LAST, depth=IMAGE_DEPTH, reliability=_POLICY[reliability])


def publisher_reliabilities(endpoints: Iterable[Any]) -> list[str]:
    """``best_effort`` / ``reliable`` of each publisher (rclpy ``TopicEndpointInfo``) on a topic."""
    return ["best_effort" if e.qos_profile.reliability == QoSReliabilityPolicy.BEST_EFFORT else "reliable"
            for e in endpoints]


def choose_reliability(setting: str, publishers: list[str]) -> tuple[str, str]:
    """(reliability to subscribe with, why) for the ``image_reliability`` setting and the publishers'
    reliabilities (:func:`publisher_reliabilities`)."""
    if setting != "auto":
        return setting, f"image_reliability={setting}"
    if not publishers:
        return "best_effort", "auto: no publisher yet (best_effort matches any; re-checked when one appears)"
    if all(r == "reliable" for r in publishers):
        return "reliable", f"auto: {len(publishers)} reliable publisher(s)"
    return "best_effort", "auto: a best_effort publisher"


class QosIncompatibility:
    """Incompatible-QoS events of the image subscription (rmw thread): how many, and the last policy named."""

    def __init__(self) -> None:
        self.count = 0
        self.policy = ""

    def reset(self) -> None:
        self.count, self.policy = 0, ""

    def on_event(self, event: Any) -> None:
        """rclpy's ``QoSRequestedIncompatibleQoSInfo``."""
        change = int(event.total_count_change)
        if change > 0:
            self.count += change
            kind = event.last_policy_kind
            self.policy = getattr(kind, "name", str(kind)).removeprefix("RMW_QOS_POLICY_")  # "RELIABILITY"


# A camera's CameraInfo: the newest only, best effort so that reliable and best-effort publishers both match.
CAMERA_INFO_QOS = QoSProfile(depth=1, reliability=QoSReliabilityPolicy.BEST_EFFORT)
