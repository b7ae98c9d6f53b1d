"""Spinning a node together with its companion callback groups (its data path on an executor of its own).

A node may expose ``companion_groups()``: :class:`CompanionGroup` callback groups of the node itself that
carry a hot path (every node's data path: the control node's state loop, the camera nodes' image
subscription), which must not wait behind the lifecycle and parameter services, timers and diagnostics of
the main executor, and whose executor wake-ups should walk those entities only. Each group gets its own
``SingleThreadedExecutor`` thread, whose executor sees only that group's entities (:class:`_GroupView`; rclpy
lets a node belong to one executor only, so the group's executor does not own the node), and the main
executors here (:class:`MainExecutor`, :class:`MainMultiThreadedExecutor`) skip every ``CompanionGroup``.
The entities stay the node's own, so ``ros2 node info`` lists them (docs/architecture.md "Node style"). A
plain rclpy executor (a test's, a user's) runs those groups like any other: the node works, on one thread.
Single-threaded everywhere: cheaper per callback than the multi-threaded executor; not rclpy's
``EventsExecutor`` (its Kilted wheel busy-loops at 100 % CPU on an idle lifecycle node and ignores SIGTERM,
measured here).

Used by the nodes' ``main()`` (:func:`run_lifecycle_node_main`, which spins with :func:`spin_with_companions`
and turns SIGINT / SIGTERM into a stop request with ``signal_stop.SignalStop``) and ``bringup.py``
(:class:`CompanionSpinners`).

An exception escaping a group's callback never ends its thread silently: a node with a
``companion_failed(companion, exc)`` method is told (on the group's thread; ``companion`` is the node) and the
executor spins on, so the node can recover; without that method the exception is logged with its traceback
on the node's logger and the thread ends. :class:`CompanionFault` is the one implementation of
``companion_failed`` the nodes share (``ros/lifecycle.py``, ``ros/camera/node_base.py``): it logs the
traceback, reports ERROR diagnostics and takes the node through lifecycle ``ErrorProcessing`` to
``unconfigured``.
:func:`destroy_entities` is the nodes' shared teardown of the timers, subscriptions and services they made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import rclpy
from lifecycle_msgs.msg import State
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.duration import Duration
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.service import Service
from rclpy.signals import SignalHandlerOptions
from rclpy.subscription import Subscription
from rclpy.timer import Timer

from libredgetpu_ros.errors import traceback_text
from libredgetpu_ros.ros.signal_stop import SignalStop

# How long a fault's report may wait for reliable subscribers to acknowledge it (see CompanionFault).
REPORT_ACK_TIMEOUT = Duration(seconds=0.5)
JOIN_TIMEOUT_S = 5.0  # an executor thread with no callback known to run is given this long to end


def _ended_by_shutdown(exc: BaseException, context: Any) -> bool:
    """True for rclpy's own shutdown racing an executor: rclpy's signal handlers (in a process that installs
    them; a node's ``main()`` and ``bringup`` do not) shut the context down between the executor's
    ``context.ok()`` check and its wait, and the wait set refuses the dead context with an
    ``RCLError`` ("the given context is not valid") instead of ``ExternalShutdownException``. Seen in about
    1 of 10 stops by a signal (test/ros/test_node_main.py): not a crash."""
    return isinstance(exc, _rclpy.RCLError) and not context.ok()


def _spin_guarded(executor: SingleThreadedExecutor, companion: Any,
                  on_fault: Callable[[Any, BaseException], None] | None) -> None:
    while True:
        try:
            executor.spin()
            return
        except ExternalShutdownException:  # SIGINT/SIGTERM: the caller shuts down quietly
            return
        except Exception as exc:
            if _ended_by_shutdown(exc, executor.context):
                return
            if on_fault is None:
                trace = traceback_text(exc)
                companion.get_logger().fatal(f"executor thread of {companion.get_name()} ends: {trace}")
                raise
            try:
                on_fault(companion, exc)
            except Exception as handler_exc:  # the report failed: say so, keep spinning all the same
                companion.get_logger().error(f"companion_failed raised {handler_exc!r} handling {exc!r}")


class CompanionGroup(MutuallyExclusiveCallbackGroup):
    """A callback group of a node that :class:`CompanionSpinners` spins on a thread of its own, and that
    :class:`MainExecutor` / :class:`MainMultiThreadedExecutor` skip. Its entities must be woken explicitly
    when they change (:meth:`wake`): rclpy wakes only the node's own executor."""

    def __init__(self) -> None:
        super().__init__()
        self.executor: SingleThreadedExecutor | None = None  # set while a CompanionSpinners thread spins it

    def wake(self) -> None:
        """Make the group's executor rebuild its wait set (after an entity of the group was made or
        destroyed)."""
        executor = self.executor
        if executor is not None:
            executor.wake()


def _skips_companion_groups(entity: Any) -> bool:
    return not isinstance(entity.callback_group, CompanionGroup)


class MainExecutor(SingleThreadedExecutor):
    """A node's main executor: everything but its :class:`CompanionGroup` entities."""

    def can_execute(self, entity: Any) -> bool:
        return _skips_companion_groups(entity) and super().can_execute(entity)


class MainMultiThreadedExecutor(MultiThreadedExecutor):
    """``bringup``'s executor: everything but the nodes' :class:`CompanionGroup` entities."""

    def can_execute(self, entity: Any) -> bool:
        return _skips_companion_groups(entity) and super().can_execute(entity)


class _GroupView:
    """One callback group's entities of a node, with the attributes an rclpy executor reads from a node: what
    a :class:`CompanionGroup`'s executor waits on, without owning the node (rclpy lets a node have one
    executor: adding it to a second removes it from the first)."""

    def __init__(self, node: Any, group: CompanionGroup) -> None:
        self._node, self._group = node, group

    def _of(self, entities: list[Any]) -> list[Any]:
        return [e for e in entities if e.callback_group is self._group]

    subscriptions = property(lambda self: self._of(self._node.subscriptions))
    timers = property(lambda self: self._of(self._node.timers))
    clients = property(lambda self: self._of(self._node.clients))
    services = property(lambda self: self._of(self._node.services))
    guards = property(lambda self: self._of(self._node.guards))
    waitables = property(lambda self: self._of(self._node.waitables))

    def get_name(self) -> str:
        return self._node.get_name()

    def get_logger(self) -> Any:
        return self._node.get_logger()


class _GroupExecutor(SingleThreadedExecutor):
    """Spins one :class:`CompanionGroup` of a node (through a :class:`_GroupView`)."""

    def __init__(self, node: Any, group: CompanionGroup, context: Any) -> None:
        super().__init__(context=context)
        self._view = [_GroupView(node, group)]

    def get_nodes(self) -> list[Any]:
        return list(self._view)


class CompanionSpinners:
    """One executor thread per ``node.companion_groups()`` (none if the node has no such method).

    :meth:`stop` shuts the executors down and joins their threads: call it before destroying the node, as
    tearing down DDS entities under a running executor thread can abort the process.
    """

    def __init__(self, node: Any, context: Any = None) -> None:
        self._node = node
        self._running: list[tuple[SingleThreadedExecutor, threading.Thread]] = []
        on_fault = getattr(node, "companion_failed", None)
        context = context if context is not None else node.context
        self._groups: list[CompanionGroup] = list(getattr(node, "companion_groups", list)())
        for i, group in enumerate(self._groups):
            executor = _GroupExecutor(node, group, context)
            group.executor = executor
            self._start(executor, node, on_fault, f"{node.get_name()}_group{i}")
            group.wake()  # entities the group got before its executor existed

    def _start(self, executor: SingleThreadedExecutor, companion: Any,
               on_fault: Callable[[Any, BaseException], None] | None, name: str) -> None:
        thread = threading.Thread(target=_spin_guarded, args=(executor, companion, on_fault), daemon=True,
                                  name=f"spin_{name}")
        thread.start()
        self._running.append((executor, thread))

    def stop(self, settle: Callable[[], str | None] | None = None) -> None:
        """Shut the executors down and join their threads; :class:`CompanionThreadsStuck` if one did not end.

        ``settle`` (a node's ``settle_data_path``, ``ros/lifecycle.py``), called once the executors are shut
        down, is the one bounded wait for a callback still running on their threads: None once none runs
        (the threads then get :data:`JOIN_TIMEOUT_S` to leave rclpy), else that callback described, and the
        threads are not waited for again. Without it each thread gets :data:`JOIN_TIMEOUT_S`."""
        running, self._running = self._running, []
        for group in self._groups:
            group.executor = None
        for executor, _ in running:
            executor.shutdown(timeout_sec=0)  # never waits for a stuck callback (settle does)
        stuck = settle() if settle is not None and running else None
        join_timeout = 0.0 if stuck is not None else JOIN_TIMEOUT_S
        hung = []
        for _, thread in running:
            thread.join(timeout=join_timeout)
            if thread.is_alive():
                hung.append(thread.name)
        if hung:  # destroying their nodes now could crash the process: never silent
            raise CompanionThreadsStuck(hung, stuck, self._node)


class CompanionThreadsStuck(RuntimeError):
    """Executor threads of :class:`CompanionSpinners` did not end after their shutdown (a callback stuck in
    them): their node must not be destroyed (nor its entities) while they run."""

    def __init__(self, threads: list[str], stuck: str | None, node: Any = None) -> None:
        self.threads = threads
        self.stuck = stuck  # the callback the node's settle gave up on (its description), or None
        self.node = node  # whose threads they are (left undestroyed: ros/stuck_exit.py reports on it)
        why = f"a callback still runs on them: {stuck}" if stuck is not None else \
            f"they did not end within {JOIN_TIMEOUT_S:g} s of their shutdown"
        super().__init__(f"executor threads {', '.join(threads)} did not end: {why}")


def spin_with_companions(node: Any, stop: SignalStop | None = None) -> None:
    """Spin ``node`` on a main ``SingleThreadedExecutor`` in this thread and its companion groups on their
    own threads until ``stop`` is requested (or, without one, the context shuts down); then, in this order,
    ``stop`` is disconnected, the companion executors shut down and their threads joined (after the node's
    ``settle_data_path``, if it has one: :meth:`CompanionSpinners.stop`), the main executor shut down: nothing
    spins when this returns (an exception of the node's own reaches the caller; :class:`CompanionThreadsStuck`
    if a companion thread still runs a callback: then something still runs)."""
    from libredgetpu_ros.edgetpu.locks import set_holder_name

    set_holder_name(node.get_fully_qualified_name())  # named by another process's refused open
    executor = MainExecutor(context=node.context)
    executor.add_node(node)
    companions = CompanionSpinners(node)
    try:
        if stop is None:
            executor.spin()
        else:
            executor.spin_until_future_complete(stop.requested)
    finally:
        if stop is not None:
            stop.disconnect()
        try:
            companions.stop(getattr(node, "settle_data_path", None))
        finally:
            executor.shutdown()


class CompanionFault:
    """Carries a crash of a companion's executor thread to the node's main executor, where the lifecycle
    transition must run (a transition started on the companion's thread would race the main executor's).

    The node owns one, created in its ``__init__`` (it makes a guard condition on the node), and:

    - routes ``companion_failed(companion, exc)`` (the spinner's hook) to :meth:`companion_failed`, and may
      :meth:`latch` a fault it caught itself (the perception node's device failures);
    - while :attr:`cause` is set, ignores its data path's input (the node is on its way to ``on_error``);
    - returns ``TransitionCallbackReturn.ERROR`` from ``on_deactivate`` while :attr:`cause` is set (lifecycle
      ``ErrorProcessing`` -> ``on_error`` -> ``unconfigured``) and calls :meth:`clear` in ``on_error`` and
      ``on_configure``.

    On the main executor the fault is reported once through ``report(message)`` (the node publishes an ERROR
    diagnostics status naming the cause), then an ``active`` node is deactivated. ``report`` may return the
    publisher it used: the status is then given up to :data:`REPORT_ACK_TIMEOUT` to be acknowledged by
    reliable subscribers first, as ``on_error`` usually destroys that publisher right after (a status
    published just before was seen lost in 1 of ~15 runs). A fault that raced a transition out of
    ``active`` is only reported: the node already left the state whose work failed.
    """

    def __init__(self, node: Any, what: str, report: Callable[[str], Any]) -> None:
        self._node, self._what, self._report = node, what, report
        self.cause: str | None = None  # the first fault since the last clear(), as reported
        self._guard = node.create_guard_condition(self._on_main_executor)

    def companion_failed(self, companion: Any, exc: BaseException) -> None:
        """An exception escaped a callback of ``companion`` (called on its thread by the spinner, which then
        spins on): logged with its traceback, latched."""
        trace = traceback_text(exc)
        self.latch(f"{self._what} crashed ({companion.get_name()}): {type(exc).__name__}: {exc}", trace)

    def latch(self, cause: str, detail: str = "") -> None:
        """Log ``cause`` (and ``detail``, e.g. a traceback) and, if no fault is latched yet, latch it and wake
        the main executor. Any thread."""
        self._node.get_logger().error(f"{cause}; taking the node to error processing"
                                      + (f"\n{detail}" if detail else ""))
        if self.cause is None:
            self.cause = cause
            self._guard.trigger()

    def clear(self) -> None:
        self.cause = None

    def _on_main_executor(self) -> None:
        cause = self.cause
        if cause is None:
            return
        publisher = self._report(cause)
        if publisher is not None:
            publisher.wait_for_all_acked(REPORT_ACK_TIMEOUT)
        if self._node._state_machine.current_state[0] == State.PRIMARY_STATE_ACTIVE:
            self._node.trigger_deactivate()  # on_deactivate returns ERROR: ErrorProcessing -> on_error
        else:
            self.cause = None  # already left 'active' (the fault raced a transition)


def destroy_entities(node: Any, entities: Iterable[Any]) -> None:
    """Destroy the timers (cancelled first), subscriptions and services ``node`` created: the teardown of
    what a lifecycle node makes at configure / activate. The caller drops its list afterwards."""
    for entity in entities:
        if isinstance(entity, Timer):
            entity.cancel()
            node.destroy_timer(entity)
        elif isinstance(entity, Subscription):
            node.destroy_subscription(entity)
        elif isinstance(entity, Service):
            node.destroy_service(entity)
        else:
            raise TypeError(f"destroy_entities: a {type(entity).__name__} is not a timer, subscription or "
                            "service")


_PRIMARY_STATES = ("unconfigured", "inactive", "active")


def run_lifecycle_node_main(node_factory: Callable[[], Any], args: list[str] | None = None, *,
                            retain_allocations: bool = False) -> int:
    """The ``main()`` of a node process: ROS's discovery and transport as the environment gives them
    (never changed here; only ``ROS_LOG_DIR`` when rcl would have nowhere to log), ``rclpy.init(args)``
    without rclpy's signal handlers (:class:`SignalStop` instead; the parent's exit is a SIGTERM too,
    ``ros/lifetime.py``), the node and its companion groups spun
    (:func:`spin_with_companions`) until Ctrl-C / SIGTERM, then torn down in the main thread alone; 0.

    ``retain_allocations``: keep multi-MB heap blocks for reuse (``ros/memory.py``), for nodes whose messages
    are large (state vectors, weights, camera frames); applied before rclpy so its threads allocate under the
    same rules. Teardown, in this order, once no executor thread runs: a node in a primary state goes through
    its ``shutdown`` transition (the context is still up: a signal no longer shuts it down), any other
    (stuck in a transition) is released by ``node.teardown()`` (idempotent); the node is destroyed; rclpy
    shuts down; SIGINT / SIGTERM are ignored from then on (the process exits next). An unexpected exception
    still propagates after the teardown (a traceback, exit code 1). A data-path callback still running once
    the node's one wait for it (``deactivate_timeout``) is over: no teardown, the process exits with
    status 3 (``stuck_exit.EXIT_DATA_PATH_STUCK``).
    """
    from libredgetpu_ros.ros.environment import ensure_log_dir
    from libredgetpu_ros.ros.lifetime import stop_with_parent
    from libredgetpu_ros.ros.memory import retain_large_allocations
    from libredgetpu_ros.ros.stuck_exit import exit_data_path_stuck
    from libredgetpu_ros.threads import limit_library_threads

    ensure_log_dir()
    limit_library_threads()  # BLAS / OpenMP / OpenCV pools (threads.py); a node parameter may change it later
    retained = retain_large_allocations() if retain_allocations else False
    stop = SignalStop()  # before rclpy.init: a signal during start-up is a stop request too
    stop_with_parent()  # SIGTERM when the launcher exits (ros2 launch orphans its nodes: lifetime.py)
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        node = node_factory()
        if retain_allocations:
            node.get_logger().debug(f"large allocations retained for reuse (mallopt): {retained}")
        try:
            spin_with_companions(node, stop)
        except CompanionThreadsStuck as exc:
            exit_data_path_stuck(node, exc, stop.requested.result() if stop.requested.done() else None)
        except ExternalShutdownException:  # someone else shut the context down: tear down all the same
            pass
        except Exception as exc:
            if not _ended_by_shutdown(exc, node.context):
                raise
        finally:
            if node.context.ok() and node._state_machine.current_state[1] in _PRIMARY_STATES:
                node.trigger_shutdown()
            else:
                node.teardown()
            node.destroy_node()
            rclpy.try_shutdown()
    finally:
        stop.close(restore=False)  # the process exits next: a signal from now on must not change its status
    return 0
