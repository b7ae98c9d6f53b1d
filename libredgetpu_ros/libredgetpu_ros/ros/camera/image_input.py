"""The image subscription of a :class:`~libredgetpu_ros.ros.camera.CameraNode`: its reliability chosen from
the publishers (``camera/qos.py``) and chosen again when a publisher appears or an incompatible one is
reported, and what diagnostics say about it (values, QoS and fragment-loss warnings, the no-input warning
that lists the image topics that exist).

A mixin of ``CameraNode`` only: it reads the node's ``cfg``, ``_intake`` and ``_on_image`` callback, makes
the subscription with ``ManagedNode.data_subscription`` (the node's data path) and keeps ``_sub`` (the
subscription), ``_sub_reliability`` / ``_sub_reason`` (what it was created with, and why), ``_incompatible``
and the silence state, set by :meth:`_init_image_input`.
"""

from __future__ import annotations

import time
from typing import Any

from rclpy.event_handler import SubscriptionEventCallbacks
from sensor_msgs.msg import CompressedImage, Image

from libredgetpu_ros.ros.camera import qos as image_qos
from libredgetpu_ros.ros.camera.params import ImageParams, input_subscription

_IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
# Frames this large travel as many UDP fragments (when they miss shared memory): read best effort from a
# reliable writer, one lost fragment loses the frame (docs/perception_node.md).
_FRAGMENTED_BYTES = 1 << 20


class ImageInput:
    """The camera subscription's part of ``CameraNode``; see the module docstring."""

    cfg: Any
    _intake: Any
    _on_image: Any
    data_subscription: Any
    drop_input: Any

    def _init_image_input(self) -> None:
        self._sub: Any = None
        self._sub_reliability = ""  # what the subscription was created with, and why
        self._sub_reason = ""
        self._incompatible = image_qos.QosIncompatibility()
        self._silence_since = 0.0  # monotonic s of the last frame (or activation) while active
        self._silence_received = 0
        self._silence_warned = False
        # A publisher appeared or an incompatible one was reported (rmw event, camera thread): the reliability
        # is chosen again on the main executor, where the subscription may be replaced.
        self._recheck = self.create_guard_condition(self._recheck_reliability)  # type: ignore[attr-defined]

    def _input_topic(self) -> str:
        return input_subscription(self.cfg, self.resolve_topic_name(self.cfg.input_topic))[0]

    def _publisher_reliabilities(self) -> list[str]:
        return image_qos.publisher_reliabilities(self.get_publishers_info_by_topic(self._input_topic()))

    def _start_silence_clock(self) -> None:
        """Activate: the no-frame WARN counts ``input_timeout`` from now (from 0 it read the machine's uptime
        and warned at the first diagnostics tick)."""
        self._silence_since, self._silence_received = time.monotonic(), self._intake.stats.received
        self._silence_warned = False

    def _subscribe(self) -> None:
        p: ImageParams = self.cfg
        topic, compressed = input_subscription(p, self.resolve_topic_name(p.input_topic))
        msg_type = CompressedImage if compressed else Image
        reliability, why = image_qos.choose_reliability(p.image_reliability, self._publisher_reliabilities())
        if p.input_type:
            self.get_logger().warning(f"input_type is deprecated: use transport (input_type={p.input_type})")
        events = SubscriptionEventCallbacks(message_lost=self._intake.on_message_lost,
                                            incompatible_qos=self._on_incompatible, matched=self._on_matched)
        self._sub = self.data_subscription(msg_type, topic, self._on_image, image_qos.image_qos(reliability),
                                           event_callbacks=events,
                                           note=f"{msg_type.__name__}, {reliability}: {why}")
        self._sub_reliability, self._sub_reason = reliability, why

    def _on_matched(self, event: Any) -> None:  # camera thread
        # A publisher came or went: auto may choose otherwise (reliable again once the last best-effort
        # publisher left; a reliable reader never sees a best-effort one come: the incompatible event does).
        if event.current_count_change != 0 and self.cfg.image_reliability == "auto":
            self._recheck.trigger()

    def _on_incompatible(self, event: Any) -> None:  # camera thread
        self._incompatible.on_event(event)
        if self.cfg.image_reliability == "auto":
            self._recheck.trigger()
        else:
            self.get_logger().warning(
                f"a publisher on {self._input_topic()} offers QoS incompatible with this subscription "
                f"({self._incompatible.policy}; image_reliability={self.cfg.image_reliability}); its "
                f"frames never arrive: set image_reliability to auto")

    def _recheck_reliability(self) -> None:
        """Main executor: subscribe again when ``auto`` now chooses another reliability."""
        if self._sub is None or self.cfg.image_reliability != "auto":
            return
        wanted, _ = image_qos.choose_reliability("auto", self._publisher_reliabilities())
        if wanted != self._sub_reliability:
            old, self._sub = self._sub, None
            self.drop_input(old)
            self._subscribe()

    def _image_status(self) -> tuple[dict[str, object], list[str], bool]:
        """The subscription's diagnostics values and warnings, and whether it is silent (no frame for
        ``input_timeout`` s since activation or the last frame); logs the no-input WARN once per silence."""
        topic = self._input_topic()
        publishers = self._publisher_reliabilities()
        values: dict[str, object] = {
            "input_topic": topic,
            "image_reliability": self.cfg.image_reliability,
            "subscribed_reliability": self._sub_reliability if self._sub is not None else "",
            "reliability_choice": self._sub_reason if self._sub is not None else "",
            "publishers": len(publishers),
            "publisher_reliability": ",".join(sorted(set(publishers))),
            "qos_incompatible": self._incompatible.count,
        }
        warnings: list[str] = []
        if self._incompatible.count:
            values["qos_incompatible_policy"] = self._incompatible.policy
            warnings.append(f"{self._incompatible.count} incompatible QoS ({self._incompatible.policy}) "
                            f"with a publisher on {topic}: its frames never arrive (image_reliability="
                            f"{self.cfg.image_reliability})")
        stats = self._intake.stats
        if (self._sub is not None and self._sub_reliability == "best_effort" and publishers
                and all(r == "reliable" for r in publishers)
                and (stats.largest_frame >= _FRAGMENTED_BYTES or stats.lost > stats.received
                     or not stats.received)):
            warnings.append(f"reliable publisher(s) on {topic} read by a best_effort subscription "
                            f"(image_reliability={self.cfg.image_reliability}; {stats.received} received, "
                            f"{stats.lost} lost, largest {stats.largest_frame / 1e6:.1f} MB): a lost "
                            f"fragment loses a large frame; set image_reliability to auto or reliable")
        silent = self._sub is not None and self._warn_if_silent(topic, len(publishers))
        return values, warnings, silent

    def _warn_if_silent(self, topic: str, n_publishers: int) -> bool:
        """Whether no frame came for ``input_timeout`` s; the WARN log line the first time per silence."""
        now, received = time.monotonic(), self._intake.stats.received
        if received != self._silence_received:
            self._silence_since, self._silence_received, self._silence_warned = now, received, False
            return False
        if now - self._silence_since < self.cfg.input_timeout:
            return False
        if self._silence_warned:
            return True
        self._silence_warned = True
        own = {name for name, _ in self.get_publisher_names_and_types_by_node(self.get_name(),
                                                                             self.get_namespace())}
        # Topics someone publishes: a topic known only from subscriptions (this node's own input among
        # them) is no camera to remap to.
        topics = [f"{name} ({types[0].rsplit('/', 1)[-1]})"
                  for name, types in self.get_topic_names_and_types()
                  if name not in own and any(t in _IMAGE_TYPES for t in types)
                  and self.count_publishers(name)]
        self.get_logger().warning(
            f"no frame on {topic} for {now - self._silence_since:.0f} s ({n_publishers} publisher(s), "
            f"subscribed {self._sub_reliability}); image topics that exist: {', '.join(topics) or 'none'}. "
            f"Remap {self.cfg.input_topic} or set input_topic / transport")
        return True
