"""A node's ``main()`` stopped (SIGINT / SIGTERM) while its data-path callback is stuck: the process's exit.

``spinning.run_lifecycle_node_main`` (and ``bringup.run``, for the node ``Bringup.stop`` left) calls
:func:`exit_data_path_stuck` when ``spinning.CompanionSpinners.stop`` raises ``CompanionThreadsStuck``: the
node's one wait for the callback (``ManagedNode.settle_data_path``, ``deactivate_timeout``, or less when a
second stop signal hurried the stop: ``ros/signal_stop.py``) is over and the callback still runs on its
executor thread (a wedged device, a runner that never returns). No teardown follows: the shutdown transition
would close the engine / session under the call, and destroying the node (its DDS entities) or the context
under a thread that is still inside an rclpy executor's callback can abort the process when that thread comes
back into rclpy (the reason ``CompanionSpinners.stop`` joins its threads before any node is destroyed).
Instead one ERROR line (and ``/diagnostics`` ERROR, given a moment to be acknowledged) names the callback and
what is left open, the logs are flushed, and the process ends with ``os._exit`` (``_exit(2)``: no finalizer,
atexit hook or destructor runs, so nothing can run into that thread or wait for it): status
:data:`EXIT_DATA_PATH_STUCK`, no traceback. The kernel then releases what was left open (device handles,
memory, sockets); DDS peers see the node's participant go when its lease expires (an orderly destroy would
have announced it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from typing import Any

# The exit status of a node's main() stopped while its data-path callback is stuck: distinct from 1 (an
# unexpected exception, with a traceback) and from a death by signal (negative in launch's report).
EXIT_DATA_PATH_STUCK = 3


def signal_name(signum: int | None) -> str:
    """``SIGTERM``; ``a stop request`` for None."""
    if signum is None:
        return "a stop request"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _flush_logs() -> None:
    """Python's streams, then every C stdio stream (rcutils' console output goes through ``fprintf``, which
    a redirected stream may buffer): ``_exit`` flushes nothing."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


def exit_data_path_stuck(node: Any, exc: Any, signum: int | None) -> None:
    """Report ``exc`` (a ``spinning.CompanionThreadsStuck``) on ``node`` and end the process with
    :data:`EXIT_DATA_PATH_STUCK`; never returns. ``signum``: the signal that asked for the stop, if any."""
    what = exc.stuck if exc.stuck is not None else str(exc)
    ended = exc.__context__  # an exception the spin ended with, before its threads were stopped
    if isinstance(ended, Exception) and type(ended).__name__ != "ExternalShutdownException":
        what += f" (the spin had ended with {type(ended).__name__}: {ended})"
    message = (f"exit on {signal_name(signum)}: {what}; exiting with status {EXIT_DATA_PATH_STUCK} "
               "without the shutdown transition: what the call runs on (engine, session, device) left open, "
               "never closed under it, and the node's ROS entities not destroyed under its thread; the "
               "process exit releases them")
    try:
        report = getattr(node, "report_stuck", None)
        if report is not None:
            report(message)  # ERROR log and /diagnostics ERROR (if configured), acknowledged at most 0.5 s
        else:
            node.get_logger().error(message)
    finally:
        _flush_logs()
        os._exit(EXIT_DATA_PATH_STUCK)


__all__ = ["EXIT_DATA_PATH_STUCK", "exit_data_path_stuck", "signal_name"]
