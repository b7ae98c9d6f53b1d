"""The data-path guard of a ``ManagedNode`` (``ros/lifecycle.py``): the data path never races the teardown.

Every data-path callback (:meth:`DataPathGuard.wrap`) runs holding the guard's lock, and only while the inputs
are on and no fault is latched, recorded meanwhile as :class:`InFlight` (what it is, since when). A transition
that must not run beside it (deactivate, and every teardown: cleanup, shutdown, error processing)
:meth:`~DataPathGuard.settle`-s: the inputs off, then a wait for the callback in flight (taking the lock),
bounded, with a WARN naming it once a second. A wait that passes its bound gives up on that call: it is
recorded (:attr:`~DataPathGuard.gave_up`) and the caller chooses the safe way on (the node's docstring): never
a close of what the call runs on. When such a call returns at last it is logged; an exception it raises after
a teardown went on without it (:attr:`~DataPathGuard.abandoned`: the node was released meanwhile, its
publishers destroyed) is logged and dropped, not taken for a new fault of a node that no longer runs.

An uncontended lock costs well under a microsecond per message (the control loop's latency:
docs/control_node.md). No ROS imports: the node hands over its logger and how to tell a latched fault.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

WAIT_LOG_PERIOD_S = 1.0  # a wait for the data-path callback in flight is logged this often
_POLL_S = 0.05  # how soon a wait sees STOP_HURRIED
# Once the stop is hurried a wait still lasts this long from its start (or its timeout, if shorter): a
# normal call in flight (a camera frame, a control step: milliseconds) returns within it and is not taken for
# a stuck one; the few such waits of one stop (bringup's nodes, in turn) stay well inside launch's 5 s
# sigkill_timeout.
HURRY_GRACE_S = 0.5
# ... and every wait of one hurried stop ends at the latest this long after the hurry, whatever its own
# start: a bringup whose nodes all share one wedged device waits one budget, not a grace per node.
HURRY_BUDGET_S = 2.0


class StopHurried:
    """The process's stop, hurried: a second stop signal came while the stop waits (``signal_stop.SignalStop``
    sets it: launch's SIGTERM ``sigterm_timeout`` after its SIGINT, a second Ctrl-C). Every
    :meth:`DataPathGuard.settle` running or starting from then on gives up on a callback still in flight once
    it has waited :data:`HURRY_GRACE_S` (at once if it began that long before): the process exits next, and
    whoever sent the signal is not kept waiting for a call that may never return (launch's SIGKILL follows
    ``sigkill_timeout`` later and would cut the exit's ERROR line off); a normal call in flight still returns
    within that grace. Process-wide, as signals are."""

    def __init__(self) -> None:
        self.hurried_at = 0.0  # time.monotonic() of the hurry
        self.reason = ""  # set once: what hurried the stop ("a second stop signal (SIGTERM, ...)")

    def hurry(self, reason: str) -> None:
        if not self.reason:
            self.hurried_at = time.monotonic()
            self.reason = reason

    def clear(self) -> None:
        self.reason = ""

    def ends(self, started: float, timeout: float) -> bool:
        """A wait begun at ``started`` (``time.monotonic()``), bounded by ``timeout``, ends now: the stop is
        hurried and the wait's grace (:data:`HURRY_GRACE_S`, or ``timeout`` if shorter) is over, or the
        stop's whole budget (:data:`HURRY_BUDGET_S` since the hurry) is."""
        if not self.reason:
            return False
        now = time.monotonic()
        return now - started >= min(timeout, HURRY_GRACE_S) or now - self.hurried_at >= HURRY_BUDGET_S

    def bound(self, waited: float, timeout: float) -> str:
        """The bound of a wait of ``waited`` s that :meth:`ends` ended (``timeout``: its
        ``deactivate_timeout``), for a message saying a call "did not return within" it."""
        return _hurried_bound(waited, self.reason, timeout)

    def wait(self, done: Callable[[float], bool], timeout: float) -> tuple[bool, str]:
        """``done(slice_s)`` (a join: True once what it waits for ended) called in slices of at most
        ``_POLL_S`` until it says so, ``timeout`` passes or the stop is hurried (:meth:`ends`): (ended, else
        the bound the wait had, for a message saying it "did not ... within" it)."""
        started = time.monotonic()
        deadline = started + timeout
        while not done(max(0.0, min(_POLL_S, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                return False, f"deactivate_timeout ({timeout:g} s)"
            if self.ends(started, timeout):
                return False, self.bound(time.monotonic() - started, timeout)
        return True, ""


STOP_HURRIED = StopHurried()


def _hurried_bound(waited: float, reason: str, timeout: float) -> str:
    return f"{waited:.1f} s: {reason} ended the wait before deactivate_timeout ({timeout:g} s)"


@dataclasses.dataclass(frozen=True)
class InFlight:
    """The data-path callback running now: what it is (its topic and function) and since when."""

    what: str
    started: float  # time.monotonic()

    def describe(self) -> str:
        return f"the data-path callback {self.what} (running for {time.monotonic() - self.started:.1f} s)"


class DataPathGuard:
    """The lock, the inputs' on/off switch and the callback in flight of one node's data path."""

    def __init__(self, logger: Any, faulted: Callable[[], bool]) -> None:
        self._logger = logger  # rclpy's RcutilsLogger of the node (any thread)
        self._faulted = faulted  # a latched fault: callbacks do not start their work
        self._lock = threading.Lock()
        self._on = False  # callbacks run (read under the lock)
        self.in_flight: InFlight | None = None  # set under the lock by the callback running
        self.gave_up: InFlight | None = None  # the call the last settle() gave up waiting for
        self.gave_up_by = ""  # which transition gave up on it ("deactivate", "shutdown", ...)
        # A teardown went on past gave_up: what that call runs on was left open (the node closes it once the
        # call returned: at its next configure, or process exit).
        self.abandoned = False
        self._cut_short: tuple[float, str] | None = None  # a settle ended by STOP_HURRIED: (waited s, why)

    def wrap(self, callback: Callable[..., None], what: str) -> Callable[..., None]:
        """``callback`` (``(msg)`` or ``(msg, info)``, as rclpy calls it) run under the lock while the inputs
        are on and no fault is latched, recorded as in flight (``what``) meanwhile; the same arity, so rclpy
        passes what it expects."""

        def run(*args: Any) -> None:
            with self._lock:
                if not self._on or self._faulted():
                    return
                record = self.in_flight = InFlight(what, time.monotonic())
                late = ""
                try:
                    callback(*args)
                except Exception as exc:
                    if not (self.abandoned and record is self.gave_up):
                        raise
                    late = (f"; it raised {type(exc).__name__}: {exc}, ignored: the node was released "
                            "without it")
                finally:
                    if record is self.gave_up:
                        self._logger.warning(f"{record.describe()} returned after {self.gave_up_by} gave up "
                                             f"waiting for it{late}")
                    self.in_flight = None

        def guarded(msg: Any) -> None:
            run(msg)

        def guarded_with_info(msg: Any, info: Any) -> None:
            run(msg, info)

        try:
            inspect.signature(callback).bind(object())
        except TypeError:
            return guarded_with_info
        return guarded

    def turn_on(self) -> None:
        """Activate: callbacks run from now on."""
        with self._lock:
            self._on = True

    def resume(self) -> None:
        """Back on after a deactivate gave up (:meth:`settle`): the stuck call holds the lock, so no other one
        ran meanwhile (a message taken in the instant it returns is ignored, as during any deactivate)."""
        self._on = True

    def turn_off(self) -> None:
        """No callback starts its work from now on (the one in flight, if any, goes on)."""
        self._on = False

    def settle(self, timeout: float, why: str) -> InFlight | None:
        """Turn the inputs off and wait for the callback in flight, at most ``timeout`` s, with a WARN naming
        it once a second (``why``: the transition waiting): None once none runs (none starts its work from
        then on); else the one still running, recorded as :attr:`gave_up` (by ``why``). The wait ends early
        once the process's stop is hurried (:data:`STOP_HURRIED`, past its grace :data:`HURRY_GRACE_S`:
        :meth:`bound` then says so)."""
        self._on = False
        started = time.monotonic()
        deadline, next_log = started + timeout, started + WAIT_LOG_PERIOD_S
        self._cut_short = None
        while True:
            now = time.monotonic()
            last = deadline - now <= _POLL_S
            if self._lock.acquire(timeout=max(0.0, min(_POLL_S, deadline - now))):
                self._lock.release()
                self.gave_up = None
                return None
            stuck = self.in_flight
            if last:
                break
            if STOP_HURRIED.ends(started, timeout):
                self._cut_short = (time.monotonic() - started, STOP_HURRIED.reason)
                break
            now = time.monotonic()
            if now >= next_log and next_log < deadline:
                self._logger.warning(f"{why}: waiting {now - started:.1f} s for "
                                     f"{stuck.describe() if stuck is not None else 'the data-path callback'} "
                                     f"to return (deactivate_timeout {timeout:g} s)")
                while next_log <= now:
                    next_log += WAIT_LOG_PERIOD_S
        if stuck is None:  # caught entering or leaving a callback: give it one more period
            if self._lock.acquire(timeout=_POLL_S if self._cut_short else WAIT_LOG_PERIOD_S):
                self._lock.release()
                self.gave_up = None
                return None
            stuck = self.in_flight or InFlight("(unnamed)", started)
        self.gave_up, self.gave_up_by = stuck, why
        return stuck

    def bound(self, timeout: float) -> str:
        """What the last :meth:`settle` that gave up waited (``timeout``: its ``deactivate_timeout``), for the
        message saying the call "did not return within" it."""
        if self._cut_short is None:
            return f"deactivate_timeout ({timeout:g} s)"
        waited, reason = self._cut_short
        return _hurried_bound(waited, reason, timeout)

    def stuck(self) -> InFlight | None:
        """The call a settle gave up on while it still runs, else None."""
        gave_up = self.gave_up
        return gave_up if gave_up is not None and gave_up is self.in_flight else None


__all__ = ["HURRY_BUDGET_S", "HURRY_GRACE_S", "STOP_HURRIED", "WAIT_LOG_PERIOD_S", "DataPathGuard",
           "InFlight", "StopHurried"]
