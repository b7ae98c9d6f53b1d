"""Spinning a node together with its companion nodes (its hot path on an executor of its own).

A node may expose ``companion_nodes()``: plain nodes carrying a hot path (the control node's state loop, the
perception node's camera) that must not wait behind the lifecycle and parameter services, timers and
diagnostics of the main executor, and whose executor wake-ups should walk one entity, not a dozen. Each
companion gets its own ``SingleThreadedExecutor`` thread. Single-threaded everywhere: cheaper per callback
than the multi-threaded executor; not rclpy's ``EventsExecutor`` (its Kilted wheel busy-loops at 100 % CPU
on an idle lifecycle node and ignores SIGTERM, measured here).

Used by both nodes' ``main()`` (:func:`spin_with_companions`) and ``bringup.py`` (:class:`CompanionSpinners`).

An exception escaping a companion's callback never ends its thread silently: a node with a
``companion_failed(companion, exc)`` method is told (on the companion's thread) and the executor spins on, so
the node can recover (the control node goes through ``on_error``); without that method the exception is
logged with its traceback on the companion's logger and the thread ends, as before.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor


def _spin_guarded(executor: SingleThreadedExecutor, companion: Any,
                  on_fault: Callable[[Any, BaseException], None] | None) -> None:
    while True:
        try:
            executor.spin()
            return
        except ExternalShutdownException:  # SIGINT/SIGTERM: the caller shuts down quietly
            return
        except Exception as exc:
            if on_fault is None:
                trace = "".join(traceback.format_exception(exc)).rstrip()
                companion.get_logger().fatal(f"executor thread of {companion.get_name()} ends: {trace}")
                raise
            try:
                on_fault(companion, exc)
            except Exception as handler_exc:  # the report failed: say so, keep spinning all the same
                companion.get_logger().error(f"companion_failed raised {handler_exc!r} handling {exc!r}")


class CompanionSpinners:
    """One executor thread per ``node.companion_nodes()`` (none if the node has no such method).

    :meth:`stop` shuts the executors down and joins their threads: call it before destroying the node, as
    tearing down DDS entities under a running executor thread can abort the process.
    """

    def __init__(self, node: Any, context: Any = None) -> None:
        self._running: list[tuple[SingleThreadedExecutor, threading.Thread]] = []
        on_fault = getattr(node, "companion_failed", None)
        for companion in getattr(node, "companion_nodes", list)():
            executor = SingleThreadedExecutor(context=context if context is not None else node.context)
            executor.add_node(companion)
            thread = threading.Thread(target=_spin_guarded, args=(executor, companion, on_fault), daemon=True,
                                      name=f"spin_{companion.get_name()}")
            thread.start()
            self._running.append((executor, thread))

    def stop(self) -> None:
        running, self._running = self._running, []
        for executor, thread in running:
            executor.shutdown()
            thread.join(timeout=5.0)


def spin_with_companions(node: Any) -> None:
    """Spin ``node`` on a main ``SingleThreadedExecutor`` in this thread and its companions on their own
    threads, until shutdown (``KeyboardInterrupt`` / ``ExternalShutdownException`` reach the caller)."""
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    companions = CompanionSpinners(node)
    try:
        executor.spin()
    finally:
        companions.stop()
        executor.shutdown()
