"""``replay``: publish a bag's messages through rclpy at their recorded timing (``ros2 bag play``, no ROS).

Messages go out as the recorded CDR bytes (``Publisher.publish(bytes)``), never decoded; the publisher's
message class comes from the type name (``sensor_msgs/msg/Image`` -> ``sensor_msgs.msg.Image``). QoS is the
one the recording publisher offered (stored in the bag) when present, else the sensor-data profile for
images and a reliable keep-last-10 profile for the rest. ``/clock`` (rosgraph_msgs/Clock) optionally carries
bag time for nodes running with ``use_sim_time``.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from libredgetpu_ros.bags.storage import IMAGE_TYPES, Unreadable, open_reader
from libredgetpu_ros.bags.storage import messages as bag_messages
from libredgetpu_ros.errors import InputError, LibrEdgeTpuError
from libredgetpu_ros.imagefile import DEFAULT_MAX_PIXELS
from libredgetpu_ros.ros.bag_reader import max_message_bytes

# A message of a per-message compressed bag is decompressed within this (the largest frame the nodes accept
# by default); a larger one is skipped and counted, never decompressed whole.
MAX_MESSAGE_BYTES = max_message_bytes(DEFAULT_MAX_PIXELS)


@dataclass(frozen=True)
class ReplayOptions:
    rate: float = 1.0  # playback speed factor
    loop: bool = False
    clock_hz: float = 0.0  # > 0: publish /clock at this rate (and with every message)
    topics: tuple[str, ...] = ()  # empty: all topics
    start_delay_s: float = 0.0
    wait_subscribers: int = 0  # wait until every replayed topic has this many subscribers
    wait_timeout_s: float = 30.0

    def check(self) -> ReplayOptions:
        if not self.rate > 0:
            raise InputError(f"rate must be > 0, got {self.rate}")
        if min(self.clock_hz, self.start_delay_s, self.wait_subscribers, self.wait_timeout_s) < 0:
            raise InputError("clock rate, start delay, subscriber count and timeout must not be negative")
        return self


@dataclass
class ReplaySummary:
    published: int = 0
    loops: int = 0
    skipped_topics: dict[str, str] | None = None
    interrupted: bool = False
    unreadable: int = 0  # messages of damaged chunks / payloads over MAX_MESSAGE_BYTES, not published


def message_class(type_name: str) -> type:
    """``pkg/msg/Name`` -> the rclpy message class; InputError when it is not installed."""
    parts = type_name.split("/")
    if len(parts) != 3 or not all(parts):
        raise InputError(f"message type {type_name!r} is not of the form package/msg/Name")
    package, kind, name = parts
    try:
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"message type {type_name} is not installed ({exc})") from exc


def _value(policy: Any) -> int:
    return int(getattr(policy, "value", policy))  # rosbags' QoS policies are plain Enums


def qos_for(connection: Any) -> Any:
    """The rclpy QoS to replay ``connection`` with (see the module docstring)."""
    from rclpy.duration import Duration
    from rclpy.qos import (
        DurabilityPolicy,
        HistoryPolicy,
        LivelinessPolicy,
        QoSProfile,
        ReliabilityPolicy,
        qos_profile_sensor_data,
    )

    offered = list(getattr(connection.ext, "offered_qos_profiles", None) or [])
    if not offered:
        if connection.msgtype in IMAGE_TYPES:
            return qos_profile_sensor_data
        return QoSProfile(depth=10)
    # Several recorded publishers: as ros2 bag play, reliable / transient-local only when all of them were.
    reliable = all(_value(q.reliability) == ReliabilityPolicy.RELIABLE.value for q in offered)
    latched = all(_value(q.durability) == DurabilityPolicy.TRANSIENT_LOCAL.value for q in offered)
    first = offered[0]

    def duration(t: Any) -> Duration:
        return Duration(seconds=int(t.sec), nanoseconds=int(t.nsec))

    keep_all = _value(first.history) == HistoryPolicy.KEEP_ALL.value
    return QoSProfile(
        history=HistoryPolicy.KEEP_ALL if keep_all else HistoryPolicy.KEEP_LAST,
        depth=max(1, max(int(q.depth) for q in offered)),
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
        deadline=duration(first.deadline), lifespan=duration(first.lifespan),
        liveliness=(LivelinessPolicy.MANUAL_BY_TOPIC if _value(first.liveliness) == 3
                    else LivelinessPolicy.AUTOMATIC),
        liveliness_lease_duration=duration(first.liveliness_lease_duration))


class Replayer:
    """Publishers for a bag's topics on ``node``; ``play(stop)`` publishes to the end or until ``stop``."""

    def __init__(self, node: Any, bag: str | Path, options: ReplayOptions = ReplayOptions(),
                 log: Callable[[str], None] = print) -> None:
        self.node = node
        self.options = options.check()
        self.log = log
        self.reader = open_reader(bag)
        wanted = set(options.topics)
        known = {c.topic for c in self.reader.connections}
        missing = sorted(wanted - known)
        if missing:
            raise InputError(f"bag {bag} has no topic {', '.join(missing)} "
                             f"(topics: {', '.join(sorted(known))})")
        self.publishers: dict[str, Any] = {}
        self.skipped: dict[str, str] = {}
        self.connections = []
        for conn in self.reader.connections:
            if wanted and conn.topic not in wanted:
                continue
            if conn.topic in self.publishers:
                continue  # same topic recorded from several publishers: one publisher replays them all
            try:
                cls = message_class(conn.msgtype)
            except InputError as exc:
                self.skipped[conn.topic] = str(exc)
                log(f"warning: not replaying {conn.topic}: {exc}")
                continue
            self.publishers[conn.topic] = node.create_publisher(cls, conn.topic, qos_for(conn))
        self.connections = [c for c in self.reader.connections if c.topic in self.publishers
                            and message_class_matches(c, self.publishers[c.topic])]
        if not self.connections:
            raise InputError(f"bag {bag}: nothing to replay (skipped: {self.skipped or 'no messages'})")
        self.unreadable = 0
        self.clock_pub = None
        if options.clock_hz > 0:
            from rosgraph_msgs.msg import Clock

            self.clock_pub = node.create_publisher(Clock, "/clock", 10)

    def wait_for_subscribers(self, stop: threading.Event) -> None:
        n = self.options.wait_subscribers
        if n <= 0:
            return
        deadline = time.monotonic() + self.options.wait_timeout_s
        while not stop.is_set():
            short = {t: p.get_subscription_count() for t, p in self.publishers.items()
                     if p.get_subscription_count() < n}
            if not short:
                return
            if time.monotonic() >= deadline:
                raise LibrEdgeTpuError(f"waited {self.options.wait_timeout_s:g} s for {n} subscriber(s): "
                                       + ", ".join(f"{t} has {c}" for t, c in sorted(short.items())))
            stop.wait(0.05)

    def play(self, stop: threading.Event) -> ReplaySummary:
        summary = ReplaySummary(skipped_topics=self.skipped)
        self.wait_for_subscribers(stop)
        if self.options.start_delay_s:
            stop.wait(self.options.start_delay_s)
        while not stop.is_set():
            summary.published += self._play_once(stop)
            summary.loops += 1
            if not self.options.loop:
                break
        summary.interrupted = stop.is_set()
        summary.unreadable = self.unreadable
        return summary

    def _play_once(self, stop: threading.Event) -> int:
        first_ns: int | None = None
        start = time.monotonic()
        published = 0
        clock_period = 1.0 / self.options.clock_hz if self.options.clock_hz > 0 else None
        # bags.storage.messages: rosbags' failures on damaged bytes become one InputError naming the bag, and
        # per-message compressed payloads are decompressed within a budget (rosbags has none).
        for conn, timestamp, raw in bag_messages(self.reader, self.connections, MAX_MESSAGE_BYTES):
            if raw is None or isinstance(raw, Unreadable):
                self.unreadable += 1
                continue
            if first_ns is None:
                first_ns = timestamp
            due = start + (timestamp - first_ns) / 1e9 / self.options.rate
            while not stop.is_set():  # sleep until due, ticking /clock with interpolated bag time
                now = time.monotonic()
                if now >= due:
                    break
                if clock_period is None:
                    stop.wait(due - now)
                else:
                    self._publish_clock(first_ns + round((now - start) * self.options.rate * 1e9))
                    stop.wait(min(clock_period, due - now))
            if stop.is_set():
                break
            if clock_period is not None:
                self._publish_clock(timestamp)
            self.publishers[conn.topic].publish(bytes(raw))
            published += 1
        return published

    def _publish_clock(self, ns: int) -> None:
        from rosgraph_msgs.msg import Clock

        msg = Clock()
        msg.clock.sec, msg.clock.nanosec = divmod(int(ns), 1_000_000_000)
        self.clock_pub.publish(msg)  # type: ignore[union-attr]

    def close(self) -> None:
        for pub in self.publishers.values():
            self.node.destroy_publisher(pub)
        if self.clock_pub is not None:
            self.node.destroy_publisher(self.clock_pub)
        self.publishers = {}
        self.reader.close()


def message_class_matches(connection: Any, publisher: Any) -> bool:
    """Whether ``connection`` has the type of ``publisher`` (a topic recorded with two types replays one)."""
    cls = publisher.msg_type
    return connection.msgtype == f"{cls.__module__.split('.')[0]}/msg/{cls.__name__}"


def run(bag: str | Path, options: ReplayOptions, linger_s: float = 0.5,
        log: Callable[[str], None] = print) -> ReplaySummary:
    """``libredgetpu-ros replay``: one node, publish, exit. Ctrl-C / SIGTERM stop it cleanly."""
    import rclpy

    from libredgetpu_ros.ros.environment import ensure_log_dir
    from libredgetpu_ros.ros.signal_stop import rclpy_until_signal

    ensure_log_dir()  # discovery and transport: the environment's (ROS defaults unless set)
    with rclpy_until_signal() as stop:
        node = rclpy.create_node("bag_replay")
        replayer = None
        try:
            replayer = Replayer(node, bag, options, log)
            log(f"replaying {bag}: {', '.join(sorted(replayer.publishers))} at x{options.rate:g}"
                + (" (loop)" if options.loop else ""))
            summary = replayer.play(stop)
            if not stop.is_set():
                stop.wait(linger_s)  # let reliable subscribers fetch the last messages
            log(f"published {summary.published} messages" + (" (interrupted)" if summary.interrupted else "")
                + (f"; {summary.unreadable} unreadable (damaged chunk or over the size budget), not published"
                   if summary.unreadable else ""))
            return summary
        finally:
            if replayer is not None:
                replayer.close()
            node.destroy_node()
