"""A main-executor handler's bounded wait for a lock a camera frame holds across the model's invoke.

A service handler or parameter callback that shares a processor's state with the camera thread (the flow
node's compass, the perception pipeline, the SPU runner) or swaps weights whose staging waits for the call
in flight on an accelerator (the recognition database, the tracker's filter, the control node's W) takes
that lock; a frame holds it across its invoke, so with a stuck frame an unbounded wait blocked the node's
main executor for good: no deactivate, no diagnostics, no stuck exit (``ros/stuck_exit.py``). The audit of
every main-executor callback: docs/reliability.md section 14. The handler waits at most
:data:`FRAME_BUSY_WAIT_S` and then answers that a frame is in progress (:class:`FrameBusyError`); the camera
thread itself waits as long as it takes (``wait_s=None``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from libredgetpu_ros.errors import LibrEdgeTpuError

FRAME_BUSY_WAIT_S = 1.0  # a frame of any node here takes well under that (bench/results); a caller retries


class FrameBusyError(LibrEdgeTpuError):
    """The lock a frame holds was not free within the handler's bound: a frame in progress, perhaps stuck."""


class Lock(Protocol):
    """``threading.Lock`` or ``threading.RLock`` (the SPU node's)."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...


@contextmanager
def frame_lock(lock: Lock, wait_s: float | None = FRAME_BUSY_WAIT_S) -> Iterator[None]:
    """``lock`` held for the block, waited for at most ``wait_s`` (None: as long as it takes); past that,
    ``FrameBusyError`` and nothing done."""
    if not lock.acquire(timeout=-1 if wait_s is None else wait_s):
        raise FrameBusyError(f"a frame is in progress (stuck?): not free within {wait_s:g} s, try again")
    try:
        yield
    finally:
        lock.release()
