"""One running ``~/fit`` of the reservoir node, as a teardown sees it: a cancel request the fit checks between
the bag's messages, every few hundred steps of driving the reservoir, between the row blocks of the normal
equations and before the solve (``ReservoirComputer.fit``'s ``check``), and what a teardown left open under it
(closed by the fit's thread when it returns, never under it)."""

from __future__ import annotations

import threading
from typing import Any

from libredgetpu_ros.errors import LibrEdgeTpuError


class FitCancelled(LibrEdgeTpuError):
    """A fit stopped on a transition's request (message: ``cancelled by <transition>``); nothing installed."""


class FitRun:
    """The cancel switch and the left-open slot of one fit (a new one per fit: a cancel never outlives it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancel = threading.Event()  # set by a transition's thread, read by the fit's
        self._cancelled_by = ""  # the first transition that asked, written before the event is set
        self._done = False
        self._left_open: Any = None

    @property
    def cancelled_by(self) -> str:
        """The transition whose cancel came first; "" while none came."""
        return self._cancelled_by if self._cancel.is_set() else ""

    def cancel(self, transition: str) -> None:
        """Ask the fit to stop at its next check (any thread); a later cancel keeps the first one's name."""
        with self._lock:
            if not self._cancel.is_set():
                self._cancelled_by = transition
                self._cancel.set()

    def check(self) -> None:
        """The fit's thread, at each check point (module docstring): FitCancelled once a cancel was asked."""
        if self._cancel.is_set():
            raise FitCancelled(f"cancelled by {self._cancelled_by}")

    def leave_open(self, what: Any) -> bool:
        """A teardown gave up waiting: ``what`` (the reservoir the fit runs on) is the fit's to close when it
        returns; False when it returned meanwhile (the caller closes it)."""
        with self._lock:
            if self._done:
                return False
            self._left_open = what
            return True

    def finished(self) -> Any:
        """The fit's thread, as it returns: what a teardown left open for it to close, else None."""
        with self._lock:
            self._done = True
            left, self._left_open = self._left_open, None
        return left
