"""SIGINT / SIGTERM as a stop request for a process that runs rclpy (a node's ``main()``, ``bringup``,
``replay``): :class:`SignalStop`, :func:`rclpy_until_signal`.

The signal only requests the stop; the process tears down in its own main thread, in order (``spinning.py``).
A second stop signal while that teardown waits for a stuck data-path call hurries it
(``data_guard.STOP_HURRIED``): ``ros2 launch`` sends SIGINT, then SIGTERM ``sigterm_timeout`` (5 s) later,
then SIGKILL ``sigkill_timeout`` (5 s) after that; the node must report its stuck call and exit
(``ros/stuck_exit.py``, status 3) before the SIGKILL, which a wait of ``deactivate_timeout`` (10 s) did not
(docs/reliability.md "A stop with a stuck data path").
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import rclpy
from rclpy.signals import SignalHandlerOptions
from rclpy.task import Future

from libredgetpu_ros.ros.data_guard import STOP_HURRIED
from libredgetpu_ros.ros.stuck_exit import signal_name

# The same signal again this soon after a stop's first one is a copy of the same request, not a second one: a
# terminal's SIGINT to the process group, then launch's own SIGINT to its node (0.4 s later measured on a
# loaded 2-core machine, test_launch_stuck_stop.py). Launch's escalation (SIGTERM after its SIGINT) is
# another signal: it counts at once.
REPEAT_S = 2.0


class SignalStop:
    """SIGINT / SIGTERM as a request to stop spinning, so that the whole teardown runs in the main thread, in
    order, with no other thread inside rclpy.

    Why not rclpy's own signal handlers: on a signal they wake a thread of rclpy's (``_rclpy``'s deferred
    signal handler) that triggers every executor's SIGINT guard condition and ``rcl_shutdown``s every context,
    without synchronising with the Python side; Python's handler has meanwhile raised ``KeyboardInterrupt`` in
    the main thread, whose teardown shuts the executors down (destroying those guard conditions and freeing
    the list that thread walks), destroys the nodes and finalises logging. When the main thread won that race
    the process died with SIGSEGV in that thread (core dump: ``rcl_trigger_guard_condition`` called from
    ``_rclpy_pybind11`` on a ``std::thread``; 4 of 40 ``test_control_launch.py`` runs of 2 launches each;
    docs/install.md "Launch tests").

    Here rclpy installs no handler (``SignalHandlerOptions.NO``): ours only record the signal;
    ``signal.set_wakeup_fd`` makes CPython's C handler write to a pipe at once, and a watcher thread completes
    :attr:`requested`, which wakes the main executor (``spin_until_future_complete``). :meth:`disconnect`
    stops the wake-ups before the executors go. A signal arriving during the teardown does not start anything
    new; the other stop signal (launch's SIGTERM ``sigterm_timeout`` after its SIGINT), or the same one at
    least :data:`REPEAT_S` after the first (a second Ctrl-C), hurries the stop: ``data_guard.STOP_HURRIED``,
    which ends a wait for a stuck data-path call (at once, or once it has lasted ``HURRY_GRACE_S``; the
    process then exits with its ERROR line and status 3, ``ros/stuck_exit.py``, before launch's SIGKILL).
    Copies of one stop request (a terminal's SIGINT to the process group and launch's own SIGINT to its node)
    arrive within a fraction of a second: they do not hurry it. Only :attr:`SIGNALS` count: CPython writes
    the wake-up byte for every signal with a Python handler (the caller's own), which is ignored here. The
    watcher runs until :meth:`close`.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        STOP_HURRIED.clear()  # a new stop of this process (an earlier one, e.g. a test's, is over)
        self.requested: Future[int] = Future()
        self._lock = threading.Lock()
        self._connected = True  # the watcher may complete `requested`
        self._closed = False  # the watcher ends
        self._first: tuple[int, float] | None = None  # the first signal and when (time.monotonic())
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # CPython's C handler must never block on a full pipe
        self._handlers = {signum: signal.signal(signum, self._record) for signum in self.SIGNALS}
        self._wakeup_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="signal_stop")
        self._watcher.start()

    def _record(self, signum: int, frame: Any) -> None:  # main thread, whenever it runs Python code next
        pass  # the wake-up byte already reached the watcher; nothing may be interrupted here

    def _watch(self) -> None:
        while True:
            signums = os.read(self._read, 64)
            now = time.monotonic()
            with self._lock:
                if self._closed:
                    return
                for signum in signums:
                    # CPython writes a byte for every signal with a Python handler (pytest-timeout's SIGALRM,
                    # asyncio's SIGCHLD, a SIGUSR1 of the caller's), not only ours; 0 is close()'s wake-up
                    if signum not in self.SIGNALS:
                        continue
                    if self._first is None:
                        self._first = (signum, now)
                        if self._connected and not self.requested.done():
                            self.requested.set_result(signum)  # its done callback wakes the executor
                    elif signum != self._first[0] or now - self._first[1] >= REPEAT_S:
                        first, at = self._first
                        STOP_HURRIED.hurry(f"a second stop signal ({signal_name(signum)}, {now - at:.1f} s "
                                           f"after {signal_name(first)})")

    def disconnect(self) -> None:
        """No executor is woken from now on (a later signal may still hurry the stop, until :meth:`close`)."""
        with self._lock:
            self._connected = False

    def close(self, restore: bool = True) -> None:
        """End the watcher, restore the previous wake-up fd and, with ``restore``, the previous handlers
        (after ``rclpy`` shut down). Without ``restore`` the signals are ignored from now on: for a process
        that exits next, where a late second Ctrl-C / launch's own SIGINT would otherwise raise
        ``KeyboardInterrupt`` after a clean teardown (exit code -2; seen with 2 SIGINTs 10 ms apart)."""
        with self._lock:
            was_open, self._connected, self._closed = not self._closed, False, True
        if not was_open:
            return
        with contextlib.suppress(BlockingIOError):  # a full pipe wakes the watcher all the same
            os.write(self._write, b"\0")
        self._watcher.join()
        signal.set_wakeup_fd(self._wakeup_fd)
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler if restore else signal.SIG_IGN)
        os.close(self._read)
        os.close(self._write)
        if restore:  # the process goes on (a test, replay's caller): its next waits are not hurried
            STOP_HURRIED.clear()


class StopRequest(threading.Event):
    """Set by SIGINT / SIGTERM (:func:`rclpy_until_signal`); :attr:`signum`: the signal that set it."""

    signum: int | None = None


@contextlib.contextmanager
def rclpy_until_signal() -> Iterator[StopRequest]:
    """For a command that runs rclpy until it is done or interrupted (``bringup``, ``replay``): rclpy
    initialised without its signal handlers, SIGINT / SIGTERM setting the event this yields
    (:class:`SignalStop`: the command tears down in its own thread, in order; a second signal hurries that
    teardown); at exit rclpy shuts down, then the previous handlers come back."""
    stop = StopRequest()
    signals = SignalStop()  # before rclpy.init: a signal during start-up is a stop request too

    def requested(future: Future[int]) -> None:
        stop.signum = future.result()
        stop.set()

    signals.requested.add_done_callback(requested)
    try:
        rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
        try:
            yield stop
        finally:
            rclpy.try_shutdown()
    finally:
        signals.close()


__all__ = ["REPEAT_S", "SignalStop", "StopRequest", "rclpy_until_signal"]
