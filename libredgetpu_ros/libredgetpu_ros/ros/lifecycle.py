"""``ManagedNode``: the lifecycle skeleton of every node: control, reservoir, SPU, trainer and, through
``ros/camera/node_base.py`` ``CameraNode``, the camera nodes (the node style: docs/architecture.md "Node
style"), so that each of them keeps only its own logic in a few hooks.

A subclass sets ``PARAMS`` (its ``ParamTable``), ``DIAGNOSTICS_NAME`` (status name ``"<node>: <name>"``) and
``FAULT_WHAT`` (what a crash of its data path is called), and defines:

- ``open_processor()``: configure, with ``self.cfg`` read (``read_config()``, overridable): open what the node
  runs (engine, runner, session). An exception of ``CONFIGURE_ERRORS`` fails configure: logged as
  ``configure failed: <configure_failed_message(exc)>``, everything made so far released, ``unconfigured``;
- ``create_outputs()``: configure, after ``open_processor``: publishers (:meth:`output`), services
  (:meth:`service`), timers (:meth:`timer`), released by the base; ``describe()``: the ``configured: ...`` log
  line;
- ``create_inputs()``: activate: the data path's subscriptions (:meth:`data_subscription`) and timers
  (:meth:`timer` with ``while_active``); the base drops them on deactivate (``drop_inputs()``, which a node
  may extend; :meth:`drop_input` drops one, e.g. to subscribe again);
- ``close_processor()``: release what ``open_processor`` opened (idempotent; must not raise);
- ``diagnostic_status()`` -> ``(level, message, values)`` and ``hardware_id()``: the node's ``/diagnostics``
  status, published every ``diagnostics_period()`` s (None: the node publishes it itself) while configured,
  inactive too, and once with ERROR when a fault is reported (``report_fault()``, overridable);
- optionally ``check_parameters(params)`` (a reason to refuse a change the table allows, or None) and
  ``parameters_changed(params)`` (after a change; the table's ``runtime`` parameters are already in
  ``self.cfg``).

Lifecycle (the ros2/demos ``lifecycle_py`` rhythm): configure opens and creates the outputs, the
``/diagnostics`` publisher and its timer; activate activates the lifecycle publishers, then creates the inputs
(so a result of the very first input goes out, never to a publisher still inactive); deactivate drops the
inputs, then deactivates the publishers; cleanup and shutdown release everything (``teardown()``,
idempotent). The ``/diagnostics`` publisher is a plain one,
not a lifecycle one: it is the node's health, not its output, so a configured node keeps reporting while
inactive (a diagnostics aggregator would otherwise show it stale), and the ERROR status of a fault goes out
whatever the state the fault raced. A fault
of the data path (an exception escaping one of its callbacks, handed over by ``ros/spinning.py``, or one the
node :meth:`latch`-es itself) goes through ``spinning.CompanionFault``: logged with its traceback, one ERROR
diagnostics status naming the cause, then deactivate returns ERROR -> ``ErrorProcessing`` -> ``on_error``
releases everything -> ``unconfigured``, from where a supervisor can configure the node again.

Threads: the data path (:meth:`data_subscription`) is a callback group of the node,
``spinning.CompanionGroup``, which the node's ``main()`` and ``bringup`` spin on an executor thread of its
own: a state never waits behind a service call, a parameter request or the diagnostics timer, and
``ros2 node info`` lists the subscription on the node itself. Everything else runs on the main executor. A
plain rclpy executor (a test's) runs the group along with the rest, on its one thread.

The data path never races the teardown (the camera nodes' frames included): every callback of
:meth:`data_subscription` runs under the node's ``data_guard.DataPathGuard``, only while the inputs are on
(from activate until they are dropped) and no fault is latched. Deactivate turns the inputs off and waits for
the callback in flight before it destroys the subscriptions, so it deactivates the publishers only after that
callback's result went out; a message the executor took meanwhile is ignored. Every teardown waits the same
way: cleanup, shutdown and ``on_error`` (``teardown()`` -> ``drop_inputs()``), an activate whose
``create_inputs()`` raised. Each wait is bounded by the ``deactivate_timeout`` parameter
(``params.MANAGED_NODE_PARAMS``, every node's), with a WARN naming the callback and how long it has run once a
second; it runs on the main executor, so the node's diagnostics timer, parameter and other services wait
behind it. Past the bound the safe way on, never a close of what the call runs on:

- deactivate fails cleanly: the inputs on again, nothing destroyed or deactivated, the node ``active`` with
  its engine open under the call, an ERROR log and ``/diagnostics`` ERROR saying so while that call runs; the
  next deactivate waits again (a runner without a transfer timeout of its own, e.g. a stuck accelerator other
  than the Edge TPU, hung the transition forever before);
- a teardown (shutdown, error processing, cleanup, a failed activate or configure) goes on without it: ERROR
  log and ``/diagnostics`` ERROR naming the call, everything released but what ``close_processor()`` closes
  (the engine, interpreter, device stream, session it runs on), left open; the transition completes, so a
  SIGTERM ends the process (before, it waited until launch's SIGKILL). Once that call returned, the next
  configure closes it first (it waits for the call as long, and fails naming it if it still runs); the
  ``on_error`` log line says what was left open. An exception it raises on its way out is logged and
  dropped (the node was released without it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecyclePublisher, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter

from libredgetpu_ros.errors import LibrEdgeTpuError, traceback_text
from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.data_guard import DataPathGuard
from libredgetpu_ros.ros.output_qos import output_publisher
from libredgetpu_ros.ros.params import DEACTIVATE_TIMEOUT, MANAGED_NODE_PARAMS, ParamTable, resolved_topic
from libredgetpu_ros.ros.services import TimerFaults, create_guarded_service
from libredgetpu_ros.ros.spinning import REPORT_ACK_TIMEOUT, CompanionFault, CompanionGroup, destroy_entities
from libredgetpu_ros.textdata import clip_repr

# What a wait for the data path says it is waiting for: the transition (rcl's state label while it runs).
_TRANSITION_NAMES = {"configuring": "configure", "activating": "activate", "deactivating": "deactivate",
                     "cleaningup": "cleanup", "shuttingdown": "shutdown",
                     "errorprocessing": "error processing"}


class ManagedNode(LifecycleNode):
    """Lifecycle node with the shared skeleton; see the module docstring for the subclass API."""

    PARAMS: ClassVar[ParamTable]
    DIAGNOSTICS_NAME: ClassVar[str]
    FAULT_WHAT: ClassVar[str] = "data path"
    CONFIGURE_ERRORS: ClassVar[tuple[type[BaseException], ...]] = (LibrEdgeTpuError,)
    RELEASE_NOTE: ClassVar[str] = "releasing everything"  # what on_error's log line says it does

    def __init__(self, node_name: str, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._data_path = CompanionGroup()  # the data path's callback group (module docstring)
        self.cfg: Any = None  # the parameters read at configure (runtime ones updated when they change)
        self._configured = False
        self._made: list[Any] = []  # services and timers made at configure
        self._timer_faults = TimerFaults(self)  # nothing escapes a timer (services.py)
        self._live: list[Any] = []  # subscriptions and timers made at activate
        self._output_pubs: list[Any] = []  # publishers made by output() (lifecycle ones and plain ones)
        self._diag_pub: Any = None
        # A fault of the data path, carried to the main executor (transitions cannot run on its thread).
        self._crash = CompanionFault(self, self.FAULT_WHAT, self._report_fault)
        # Every data-path callback runs under it; the transitions wait for the one in flight through it.
        self._guard = DataPathGuard(self.get_logger(), lambda: self._crash.cause is not None)
        self.PARAMS.declare(self)
        MANAGED_NODE_PARAMS.declare(self)  # deactivate_timeout (the same on every node; read by this base)
        self._table_validator = self.PARAMS.validator(self.is_configured)
        self._managed_validator = MANAGED_NODE_PARAMS.validator(self.is_configured)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._after_set_parameters)

    # ----- the subclass API --------------------------------------------------------------------------

    def read_config(self) -> Any:
        """The configuration from the parameters (``ConfigError`` names a bad value), every ``*_topic`` and
        ``*_service`` one a valid name once resolved (``params.resolved_topic``: a bad one passed configure,
        then failed activate or the diagnostics timer). A node overriding this starts from it."""
        cfg = self.PARAMS.read(self)
        for name in self.PARAMS.specs:
            value = getattr(cfg, name, None)
            if value and name.endswith(("_topic", "_service")):
                service = name.endswith("_service")
                resolved_topic(self.resolve_service_name if service else self.resolve_topic_name, value,
                               f"parameter {name} ({clip_repr(value)})", service=service)
        return cfg

    def open_processor(self) -> None:
        raise NotImplementedError

    def create_outputs(self) -> None:
        """Publishers, services and timers of the configured node."""

    def create_inputs(self) -> None:
        """Subscriptions and timers of the active node."""

    def close_processor(self) -> None:
        """Release what ``open_processor`` opened (idempotent; must not raise)."""

    def describe(self) -> str:
        """The ``configured: ...`` log line's text."""
        return ""

    def configure_failed_message(self, exc: BaseException) -> str:
        return str(exc)

    def diagnostics_period(self) -> float | None:
        """Seconds between ``/diagnostics`` statuses; None: the node publishes them itself."""
        return float(self.cfg.diagnostics_period)

    def diagnostic_status(self) -> tuple[int, str, dict[str, object]]:
        """(level, message, key/values) of the configured node's status."""
        raise NotImplementedError

    def hardware_id(self) -> str:
        return ""

    def fallback_warnings(self, fallbacks: list[str]) -> list[str]:
        """The WARN reason of a ``backend: auto`` that fell back to the CPU (``fallbacks``: the ``fallback``
        of each runner or engine the node opened), as every node says it (``diagnostics.fallback_warnings``);
        for ``diagnostics.warned`` in ``diagnostic_status``."""
        return diagnostics.fallback_warnings(fallbacks, "require_accelerator" in self.PARAMS.specs)

    def check_parameters(self, params: list[Parameter]) -> str | None:
        """Why a parameter change the table allows is refused, or None."""
        return None

    def parameters_changed(self, params: list[Parameter]) -> None:
        """After a parameter change (``self.cfg`` holds the table's runtime values already)."""

    # ----- entities the base releases ----------------------------------------------------------------

    def output(self, msg_type: Any, topic: str, qos: Any, *, lifecycle: bool = True) -> Any:
        """A lifecycle publisher with overridable QoS (``ros/output_qos.py``), destroyed on cleanup; with
        ``lifecycle`` false a plain one (e.g. a transient-local map valid from configure on)."""
        pub = output_publisher(self, msg_type, topic, qos, lifecycle=lifecycle)
        self._output_pubs.append(pub)
        return pub

    def service(self, srv_type: Any, name: str, callback: Any) -> Any:
        """A service of the configured node (no exception escapes its handler), destroyed on cleanup."""
        srv = create_guarded_service(self, srv_type, name, callback)
        self._made.append(srv)
        return srv

    def timer(self, period_s: float, callback: Any, *, while_active: bool = False) -> Any:
        """A timer on the main executor, destroyed on cleanup, or with ``while_active`` (made in
        ``create_inputs``) on deactivate."""
        timer = self.create_timer(period_s, self._timer_faults.wrap(callback))  # nothing escapes it
        (self._live if while_active else self._made).append(timer)
        return timer

    def data_subscription(self, msg_type: Any, topic: str, callback: Any, qos: Any, *, note: str = "",
                          **options: Any) -> Any:
        """A subscription of the active node on the data path (its own executor thread), dropped on
        deactivate; logged (with ``note`` in brackets, e.g. the QoS chosen and why). ``callback`` runs under
        the data-path lock, only while the inputs are on and no fault is latched (module docstring)."""
        what = f"on {self.resolve_topic_name(topic)} ({getattr(callback, '__qualname__', repr(callback))})"
        sub = self.create_subscription(msg_type, topic, self._guard.wrap(callback, what), qos,
                                       callback_group=self._data_path, **options)
        self._live.append(sub)
        self._data_path.wake()  # its executor waits on the group's entities: rebuild its wait set
        self.get_logger().info(f"active: subscribed to {sub.topic_name}" + (f" ({note})" if note else ""))
        return sub

    def drop_input(self, entity: Any) -> None:
        """Destroy one input made in ``create_inputs`` before deactivate (e.g. to subscribe again); the
        inputs stay on."""
        if entity in self._live:
            self._live.remove(entity)
            destroy_entities(self, [entity])
            self._data_path.wake()

    def is_configured(self) -> bool:
        return self._configured

    def inputs_active(self) -> bool:
        """Whether the inputs exist (from activate to deactivate)."""
        return bool(self._live)

    def state_label(self) -> str:
        """Current lifecycle state: unconfigured, inactive, active, finalized (or a transition state)."""
        return self._state_machine.current_state[1]

    def transition_name(self) -> str:
        """The transition running, as logs name it (cleanup, shutdown, error processing, ...)."""
        label = self.state_label()
        return _TRANSITION_NAMES.get(label, label)

    # ----- faults ------------------------------------------------------------------------------------

    @property
    def fault(self) -> str | None:
        """The latched fault (its cause) while the node is on its way to ``on_error``; the data path's
        callbacks do not run meanwhile (:meth:`data_subscription`)."""
        return self._crash.cause

    def latch(self, cause: str, detail: str = "") -> None:
        """A fault the node caught itself (any thread): as a crash of the data path."""
        self._crash.latch(cause, detail)

    def companion_failed(self, companion: Any, exc: BaseException) -> None:
        """An exception escaped a data-path callback (called on its thread by ``ros/spinning.py``, which then
        spins on): logged with its traceback, ERROR diagnostics, the node goes to ``on_error``."""
        self._crash.companion_failed(companion, exc)

    def companion_groups(self) -> list[CompanionGroup]:
        """Callback groups a host spins on executor threads of their own (``ros/spinning.py``)."""
        return [self._data_path]

    def report_fault(self, cause: str) -> None:
        """Main executor, once per latched fault, before the node leaves 'active': one ERROR status naming
        the cause (a node whose own status carries its errors overrides this)."""
        self.publish_diagnostics(diagnostics.ERROR, cause)

    def _report_fault(self, cause: str) -> Any:
        """``report_fault``; the publisher is returned so that CompanionFault lets subscribers acknowledge
        the status before teardown destroys the publisher."""
        self.report_fault(cause)
        return self._diag_pub

    # ----- lifecycle ---------------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._crash.clear()
        if not self._close_left_open():
            return TransitionCallbackReturn.FAILURE
        try:
            self.cfg = self.read_config()
            self.open_processor()
            self.create_outputs()  # a ConfigError from qos_overrides fails configure too
        except self.CONFIGURE_ERRORS as exc:
            self.get_logger().error(f"configure failed: {self.configure_failed_message(exc)}")
            self.teardown()
            return TransitionCallbackReturn.FAILURE
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        period = self.diagnostics_period()
        if period is not None:
            self.timer(period, self.publish_diagnostics)
        self._configured = True
        self.get_logger().info(f"configured: {self.describe()}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        # The publishers first: a data-path callback may run as soon as its subscription exists (on its own
        # thread), and its result must not meet a publisher still inactive (dropped with a warning).
        result = super().on_activate(state)
        if result != TransitionCallbackReturn.SUCCESS:
            return result
        self._guard.turn_on()
        try:
            self.create_inputs()
        except Exception as exc:  # rclpy would take it for ERROR silently, the publishers still active
            self.get_logger().error(f"activate failed: creating the inputs raised {type(exc).__name__}: "
                                    f"{exc}; inputs dropped, publishers deactivated\n"
                                    + traceback_text(exc))
            self.drop_inputs()
            super().on_deactivate(state)
            return TransitionCallbackReturn.ERROR  # -> ErrorProcessing -> on_error
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._crash.cause is None:
            timeout = self.deactivate_timeout()
            stuck = self._guard.settle(timeout, "deactivate")
            if stuck is not None:
                self._guard.resume()  # still active, consistent; the next deactivate retries
                self.report_stuck(f"deactivate failed: {stuck.describe()} did not return within "
                                   f"{self._guard.bound(timeout)}; the node stays active, nothing "
                                   "closed under it; deactivate again to retry")
                return TransitionCallbackReturn.FAILURE
        self.drop_inputs()
        if self._crash.cause is not None:
            return TransitionCallbackReturn.ERROR  # -> ErrorProcessing -> on_error
        return super().on_deactivate(state)

    def deactivate_timeout(self) -> float:
        """The ``deactivate_timeout`` parameter (runtime: read when a wait starts)."""
        return float(self.get_parameter(DEACTIVATE_TIMEOUT.name).value)

    def settle_data_path(self) -> str | None:
        """A process's exit (``spinning.CompanionSpinners.stop``, the data path's executor shut down): the
        inputs off and the callback in flight waited for, at most ``deactivate_timeout``, with a WARN once a
        second; a call an earlier wait gave up on (a failed deactivate, a teardown) and still running is not
        waited for again. None once none runs (the shutdown transition then waits no more); else that call
        described, for the exit's ERROR line (``ros/stuck_exit.py``)."""
        guard = self._guard
        stuck = guard.stuck()
        if stuck is not None:
            guard.turn_off()
            guard.abandoned = True  # its late return (or exception) is logged and dropped, not a new fault
            return (f"{stuck.describe()}, given up on by {guard.gave_up_by} before, "
                    "still runs: not waited for again")
        timeout = self.deactivate_timeout()
        stuck = guard.settle(timeout, "exit")
        if stuck is None:
            return None
        guard.abandoned = True
        return f"{stuck.describe()} did not return within {guard.bound(timeout)}"

    def report_stuck(self, message: str) -> None:
        """A wait for the data path gave up: ERROR log and ``/diagnostics`` ERROR, given a moment to be
        acknowledged (a teardown destroys that publisher next, or the process exits)."""
        self.get_logger().error(message)
        self.publish_diagnostics(diagnostics.ERROR, message)
        pub = self._diag_pub
        if pub is not None:
            pub.wait_for_all_acked(REPORT_ACK_TIMEOUT)

    def _close_left_open(self) -> bool:
        """Configure: close what a teardown left open under a data-path call that outlived it, once the call
        returned (waited for at most ``deactivate_timeout``); False (logged) while it still runs."""
        guard = self._guard
        if not guard.abandoned:
            return True
        timeout = self.deactivate_timeout()
        stuck = guard.settle(timeout, "configure")
        if stuck is not None:
            self.get_logger().error(
                f"configure failed: {stuck.describe()} still runs on what the node opened before, left open "
                f"under it by a teardown (waited deactivate_timeout, {timeout:g} s, for it again); configure "
                "again once it returned (logged)")
            return False
        guard.abandoned = False
        self.close_processor()
        return True

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        cause = self._crash.cause or "transition callback failed"
        stuck = self._guard.stuck() if self._guard.abandoned else None
        release = (f"{self.RELEASE_NOTE}; configure to start again" if stuck is None else
                   f"releasing everything but what {stuck.describe()} runs on (not {self.RELEASE_NOTE} under "
                   "it); configure once it returned")
        self.get_logger().error(f"error processing (from {state.label}): {cause}; {release}")
        self.teardown()
        self._crash.clear()
        return TransitionCallbackReturn.SUCCESS  # -> unconfigured

    def teardown(self) -> None:
        """Drop every entity made at configure / activate and close the processor (idempotent; also what
        ``run_lifecycle_node_main`` calls for a node stuck in a transition)."""
        self.drop_inputs()
        made, self._made = self._made, []
        destroy_entities(self, made)
        outputs, self._output_pubs = self._output_pubs, []
        for pub in outputs:
            if isinstance(pub, LifecyclePublisher):
                self.destroy_lifecycle_publisher(pub)
            else:
                self.destroy_publisher(pub)
        if self._diag_pub is not None:
            pub, self._diag_pub = self._diag_pub, None
            self.destroy_publisher(pub)
        self._configured = False
        if self._guard.abandoned and self._guard.stuck() is not None:
            return  # never closed under the call still running (drop_inputs said so): the next configure does
        self._guard.abandoned = False
        self.close_processor()

    def drop_inputs(self) -> None:
        """Deactivate / teardown: every input made in ``create_inputs`` destroyed, then the callback in flight
        waited for, at most ``deactivate_timeout``; past it the teardown goes on without it, what it runs on
        left open (module docstring). A node extends this, e.g. to forget what its inputs gave."""
        inputs, self._live = self._live, []
        destroy_entities(self, inputs)
        if inputs:
            self._data_path.wake()
        guard = self._guard
        if guard.abandoned and guard.stuck() is not None:
            guard.turn_off()  # an earlier wait of this teardown gave up on it already: none twice
            return
        timeout = self.deactivate_timeout()
        why = self.transition_name()
        stuck = guard.settle(timeout, why)
        if stuck is not None:
            guard.abandoned = True
            self.report_stuck(f"{why}: {stuck.describe()} did not return within {guard.bound(timeout)}; "
                               "going on without it: everything released but what it runs "
                               "on (engine, session), left open, never closed under it: closed by the next "
                               "configure once it returned, or at process exit")

    # ----- parameters --------------------------------------------------------------------------------

    def _on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        for validator in (self._table_validator, self._managed_validator):
            verdict = validator(params)
            if not verdict.successful:
                return verdict
        reason = self.check_parameters(params)
        return SetParametersResult(successful=False, reason=reason) if reason else verdict

    def _after_set_parameters(self, params: list[Parameter]) -> None:
        runtime = {p.name: p.value for p in params if p.name in self.PARAMS.runtime_names()}
        if runtime and self.cfg is not None:
            # One reference swap: a callback on another thread sees the old config or the new one.
            self.cfg = dataclasses.replace(self.cfg, **runtime)
        self.parameters_changed(params)

    # ----- diagnostics -------------------------------------------------------------------------------

    def publish_diagnostics(self, level: int | None = None, message: str = "") -> None:
        """Publish the node's status; ``level`` / ``message`` override its own verdict (a fault report)."""
        pub = self._diag_pub
        if pub is None or self.cfg is None:
            return
        own_level, own_message, values = self.diagnostic_status()
        faults = self._timer_faults
        total, fresh = faults.take()
        if total:
            values = {**values, "timer_faults": total}
        if level is None:
            level, message = own_level, own_message
            if fresh and level < diagnostics.ERROR:  # ERROR for the period it happened in; then counted
                level, message = diagnostics.ERROR, f"{faults.last} ({total} timer fault(s) so far)"
            stuck = self._guard.stuck()
            if stuck is not None and level < diagnostics.ERROR:
                level, message = diagnostics.ERROR, (f"{stuck.describe()} outlived a "
                                                     f"{self._guard.gave_up_by} (deactivate_timeout): the "
                                                     "data path is stuck")
        status = diagnostics.status(f"{self.get_fully_qualified_name()}: {self.DIAGNOSTICS_NAME}",
                                    self.hardware_id(), level, message, values)
        pub.publish(diagnostics.array(self.get_clock().now().to_msg(), [status]))


__all__ = ["ManagedNode"]
