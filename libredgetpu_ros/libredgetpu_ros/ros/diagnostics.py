"""Build diagnostic_msgs/DiagnosticArray messages (diagnostic_updater is not available as a wheel).

Generic: a node keeps counters and a rate meter, and turns them into one ``DiagnosticStatus`` per period.
Every node on an Edge TPU shared in its process (camera nodes through their processors, the control and
reservoir nodes through their engine) shows its stream with :func:`shared_values` and a device fault with
:func:`shared_warnings`; every node whose ``backend: auto`` fell back to the CPU says so with
:func:`fallback_warnings` (the camera nodes through their processor's ``fallbacks()``).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

# Levels as ints (the message constants are 1-byte ``bytes``); ``status`` converts.
OK, WARN, ERROR, STALE = (int.from_bytes(b, "little") for b in (
    DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR, DiagnosticStatus.STALE))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def status(name: str, hardware_id: str, level: int, message: str,
           values: Mapping[str, object]) -> DiagnosticStatus:
    """One status; values are formatted (floats with 3 decimals) in insertion order."""
    return DiagnosticStatus(level=bytes([level]), name=name, message=message, hardware_id=hardware_id,
                            values=[KeyValue(key=k, value=_fmt(v)) for k, v in values.items()])


def shared_values(status: dict[str, Any], prefix: str = "shared_") -> dict[str, object]:
    """Diagnostics key/values of a stream on an accelerator shared with the process's other nodes
    (``edgetpu/broker.py``, a backend's / module's / engine's ``shared_status()``: its name, ``rate_hz`` (the
    node's ``device_share_hz``), served, superseded, latency, faults, the device's users); {} on the CPU."""
    return {f"{prefix}{key}": value for key, value in status.items()}


def shared_warnings(status: dict[str, Any]) -> list[str]:
    """A WARN reason when the shared accelerator of ``status`` (``shared_values``) had a fault."""
    if not status.get("faults"):
        return []
    return [f"device fault on the shared accelerator ({status['faults']} so far, last: "
            f"{status['last_fault']}); reopened {status['device_reopens']} time(s) for its "
            f"{status['device_users']} user(s)"]


def fallback_warnings(fallbacks: Iterable[str], refusable: bool = False) -> list[str]:
    """A WARN reason when ``backend: auto`` fell back to the CPU: ``fallbacks`` are the ``fallback`` texts of
    the runners the node opened (``backends.choose``: why, e.g. "auto: the Edge TPU failed to open: ...";
    "" for one that did not fall back). ``refusable``: the node has ``require_accelerator``, which refuses
    to start so."""
    reasons = list(dict.fromkeys(f for f in fallbacks if f))  # one device: one reason, said once
    if not reasons:
        return []
    return [f"running on the CPU, not the accelerator ({'; '.join(reasons)})"
            + ("; require_accelerator: true refuses to start so" if refusable else "")]


def warned(level: int, message: str, warnings: list[str]) -> tuple[int, str]:
    """``(level, message)`` raised to WARN with the first of ``warnings`` when the node judged itself OK."""
    if level == OK and warnings:
        return WARN, warnings[0]
    return level, message


def array(stamp: Time, statuses: list[DiagnosticStatus]) -> DiagnosticArray:
    msg = DiagnosticArray()
    msg.header.stamp = stamp
    msg.status = statuses
    return msg


class RateMeter:
    """Events per second of a stream, true for slow streams too (a 0.4 Hz camera is 0.4 Hz, not 0.0).

    The rate comes from the intervals between recent events: those of the last ``window_s`` (fast streams),
    and never fewer than the last ``min_events`` (slow ones: a 0.4 Hz stream has at most one event in 2 s).
    While no event is overdue (the time since the last one is within the mean interval) it is
    ``intervals / span``; past that the open gap stands in for one interval, so a stream that stops reads
    lower and lower, and 0.0 once no event came for ``stale_intervals`` mean intervals (at least
    ``window_s``, at most ``max_stale_s``); a stale stream starts afresh (its old events no longer count).
    0.0 also means fewer than two events so far. Memory: the events of ``window_s``, at least
    ``min_events``. Thread-safe (ticks on a data-path thread, reads on the diagnostics timer).
    """

    def __init__(self, window_s: float = 2.0, min_events: int = 5, stale_intervals: float = 3.0,
                 max_stale_s: float = 60.0) -> None:
        self.window_s, self.min_events = window_s, min_events
        self.stale_intervals, self.max_stale_s = stale_intervals, max_stale_s
        self._times: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._times  # O(1) per event: a control loop ticks at 1 kHz
            if times and now - times[-1] > self._stale_after(times[0], times[-1], len(times)):
                times.clear()  # a stale stream restarts: the gap is a pause, not an interval
            times.append(now)
            while len(times) > self.min_events and now - times[0] > self.window_s:
                times.popleft()

    def rate(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            count = len(self._times)
            if count < 2:
                return 0.0
            first, last = self._times[0], self._times[-1]
        span = last - first
        if span <= 0 or now - last > self._stale_after(first, last, count):
            return 0.0
        return (count - 1) / max(span, now - first - span / (count - 1))

    def _stale_after(self, first: float, last: float, count: int) -> float:
        """Seconds without an event after which a stream whose kept events are ``count`` from ``first`` to
        ``last`` reads 0."""
        if count < 2:
            return self.max_stale_s  # one event: no interval known yet, the next may be a minute away
        mean = (last - first) / (count - 1)
        return min(self.max_stale_s, max(self.window_s, self.stale_intervals * mean))


class LogLimiter:
    """At most one log line per cause per ``period_s`` (a flood of bad input must not flood the log; the
    counters in diagnostics carry the totals)."""

    def __init__(self, period_s: float = 10.0) -> None:
        self.period_s = period_s
        self._last: dict[str, float] = {}

    def due(self, cause: str, now: float | None = None) -> bool:
        """True when a line for ``cause`` may be logged now (and records it)."""
        now = time.monotonic() if now is None else now
        if now - self._last.get(cause, -float("inf")) < self.period_s:
            return False
        self._last[cause] = now
        return True


class Counters:
    """Named integer counters, e.g. bad input per cause."""

    def __init__(self) -> None:
        self._counts: collections.Counter[str] = collections.Counter()

    def add(self, key: str, n: int = 1) -> int:
        self._counts[key] += n
        return self._counts[key]

    def get(self, key: str) -> int:
        return self._counts[key]

    def total(self) -> int:
        return sum(self._counts.values())

    def items(self) -> list[tuple[str, int]]:
        return sorted(self._counts.items())

    def reset(self) -> None:
        self._counts.clear()
