"""The nodes' services: every handler runs behind one guard, so no exception type ever escapes a service.

An exception escaping a service callback leaves rclpy's executor ``spin()`` with it: the request is never
answered and the node process ends (``~/set_color`` with r = 1e308 ended the tracker that way). Handlers
refuse bad requests themselves with a typed ``LibrEdgeTpuError`` (``success: false`` and the reason); this
guard is the net under them for what they did not foresee: the request is answered with
``success`` / ``accepted`` false and ``internal error (<type>): <message>`` (cut), the traceback goes to the
node's log, and the node keeps spinning. Handlers change their state in one assignment after every check
(the reservoir's readout, the database snapshot, the parameter store), so a request that failed part-way
leaves the previous good state in place.

Every node makes its services with :func:`create_guarded_service` (the camera-node base's ``service()`` does
it for its subclasses). A handler whose work takes seconds (the reservoir's ``~/fit`` on a bag) is a
coroutine function awaiting :class:`OffExecutor`: the work runs on a thread of its own and the node's
executor keeps answering ``get_state``, the other services and its timers meanwhile.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

from libredgetpu_ros.errors import traceback_text
from libredgetpu_ros.textdata import clip

# Boolean fields meaning "the request was done", in the order looked for in a response.
_OK_FIELDS = ("success", "accepted")
MESSAGE_CHARS = 400  # the longest message text a guarded failure answers with


def failure_response(srv_type: Any, message: str) -> Any:
    """A fresh response of ``srv_type`` saying the request was not done (``success`` / ``accepted`` false)
    with ``message``; fields the type lacks are skipped."""
    response = srv_type.Response()
    fields = response.get_fields_and_field_types()
    for name in _OK_FIELDS:
        if name in fields:
            setattr(response, name, False)
    if "message" in fields:
        response.message = clip(message, MESSAGE_CHARS)
    return response


def guard(node: Any, srv_type: Any, name: str,
          callback: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``callback`` answering a failure response (see the module docstring) for any exception it raises
    (a coroutine function stays one: rclpy awaits it)."""

    def failed(exc: Exception) -> Any:  # the net: log it whole, answer, keep the node spinning
        trace = traceback_text(exc)
        node.get_logger().error(f"service {name}: unexpected {type(exc).__name__}, request refused, "
                                f"state unchanged:\n{clip(trace, 8000)}")
        return failure_response(srv_type, f"internal error ({type(exc).__name__}): {clip(exc)}")

    if inspect.iscoroutinefunction(callback):
        async def guarded_async(request: Any, response: Any) -> Any:
            try:
                return await callback(request, response)
            except Exception as exc:
                return failed(exc)

        return guarded_async

    def guarded(request: Any, response: Any) -> Any:
        try:
            return callback(request, response)
        except Exception as exc:
            return failed(exc)

    return guarded


class TimerFaults:
    """The net under a node's timer callbacks (diagnostics, the trainer's pushes): an exception escaping a
    timer leaves the executor's ``spin()`` with it and the node process ends, as a service's would. Guarded,
    the exception is logged whole the first time each callback raises each type (then counted only: a timer
    fires every period), the timer keeps its period, and :attr:`counts` feeds the node's diagnostics."""

    def __init__(self, node: Any) -> None:
        self._node = node
        self.counts: dict[str, int] = {}  # "<callback>: <exception type>" -> times raised
        self.last = ""  # the latest one, for the diagnostics message
        self._reported = 0  # the total at the last take()

    def take(self) -> tuple[int, bool]:
        """(faults so far, whether any came since the last call): a status reports each fault once."""
        total = sum(self.counts.values())
        fresh, self._reported = total > self._reported, total
        return total, fresh

    def wrap(self, callback: Callable[[], Any]) -> Callable[[], Any]:
        name = getattr(callback, "__qualname__", repr(callback))

        def guarded() -> Any:
            try:
                return callback()
            except Exception as exc:
                key = f"{name}: {type(exc).__name__}"
                self.counts[key] = self.counts.get(key, 0) + 1
                self.last = f"timer {key}: {clip(exc)}"
                if self.counts[key] == 1:
                    trace = traceback_text(exc)
                    self._node.get_logger().error(f"timer {name}: unexpected {type(exc).__name__} (logged "
                                                  f"once, then counted in diagnostics):\n{clip(trace, 8000)}")
                return None

        return guarded


class OffExecutor:
    """Long work of a service handler on a thread of its own, so the node's executor keeps answering
    (lifecycle ``get_state``, other services, timers) while it runs: the handler is a coroutine function
    that ``await``s :meth:`run`; rclpy resumes it when the work is done. One piece of work at a time
    (:meth:`busy`); :meth:`join` before releasing what the work uses (the node's teardown)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None

    def busy(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    async def run(self, node: Any, work: Callable[[], Any]) -> Any:
        """``work()``'s result (or its exception, raised here), computed on a new thread."""
        executor = node.executor
        if executor is None:  # not spun by an executor (a direct call): nothing to keep answering
            return work()
        future = executor.create_future()
        # set from the thread, a done future schedules its callbacks as a task: that wakes the executor
        future.add_done_callback(lambda _done: None)

        def target() -> None:
            try:
                future.set_result((True, work()))
            except BaseException as exc:  # handed to the handler, which raises it on the executor
                future.set_result((False, exc))

        self._thread = threading.Thread(target=target, name=self.name, daemon=True)
        self._thread.start()
        ok, value = await future
        if not ok:
            raise value
        return value

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the work running (at most ``timeout`` s when given): True once none runs."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True


def create_guarded_service(node: Any, srv_type: Any, name: str, callback: Callable[[Any, Any], Any],
                           **kwargs: Any) -> Any:
    """``node.create_service`` with ``callback`` behind :func:`guard`. A coroutine function (one that awaits
    :class:`OffExecutor` work) gets a reentrant callback group of its own unless one is given: in the node's
    default (mutually exclusive) group no other callback of the node, ``get_state`` included, could start
    until it returned; reentrant, a second request runs and can be refused while the first is busy."""
    if inspect.iscoroutinefunction(callback) and kwargs.get("callback_group") is None:
        from rclpy.callback_groups import ReentrantCallbackGroup

        kwargs["callback_group"] = ReentrantCallbackGroup()
    return node.create_service(srv_type, name, guard(node, srv_type, name, callback), **kwargs)
