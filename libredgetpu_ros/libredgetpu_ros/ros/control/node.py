"""Adaptive control node: state in, ``y = W·x (+ b)`` out, weights swapped at run time by a service.

The node wraps one :class:`~libredgetpu_ros.matmul.MatMulEngine` (a compiled Dense(N) Edge TPU template or its
CPU twin) through a :class:`~libredgetpu_ros.ros.control.controller.Controller`. A controller with
``state_size`` inputs and ``command_size`` outputs occupies the top-left block of the N×N template; the rest
of the template stays zero, so unused outputs are zero and are not published.

Lifecycle (the shared skeleton, ``ros/lifecycle.py`` ``ManagedNode``):

- ``configure`` opens the engine, loads zero weights (or ``initial_weights``) and creates the publishers
  and the ``~/set_weights`` / ``~/get_weights`` services. Weights can be loaded while inactive: a planner
  preloads them before activation.
- ``activate`` subscribes to the state topic; every state produces one command.
- ``deactivate`` drops the subscription; ``cleanup`` closes the engine.

Threading: the state path runs on its own executor thread. The state subscription is in the node's data-path
callback group (``spinning.CompanionGroup``), which the node's ``main()`` and ``bringup`` spin on an executor
of its own, so a state never queues behind a service call, a parameter request or the diagnostics timer;
services, lifecycle and diagnostics run on the main executor (both ``SingleThreadedExecutor``: cheaper per
callback than the multi-threaded one). ``ros2 node info`` lists the subscription on the node.
A state in flight when the node deactivates, cleans up or goes to ``on_error`` finishes first: its command
goes out while the node is still active, and the engine is closed after it (``ManagedNode``'s data-path
lock, ``ros/lifecycle.py``).
The loop reads weights through ``MatMulEngine.matmul_versioned``: each output comes from one complete weight
set (the old one or the new one, never a mix) and carries that set's version. On an engine whose runner
stages the weights (``MatMulEngine.stages_weights``: an accelerator's upload waits for the call in flight on
the device), the loop holds a step lock across its call, and a swap takes it around the staging alone
(validation, quantization and the blob run before, outside it): ``~/set_weights`` waits for it at most
``FRAME_BUSY_WAIT_S`` (``ros/frame_busy.py``), then answers ``accepted: false`` "a frame is in progress
(stuck?)", weights unchanged, so a stuck call never blocks the main executor; a state waits at most for one
staging, which it waited for on the runner's own lock before. The integer CPU twin (compiled kernel or
not) stages nothing: no lock, the loop never waits for a swap. The state subscription keeps
only the latest ``state_queue`` states: a controller wants the newest state, not a backlog.

Faults: a state the engine refuses (NaN/inf) is dropped, counted and reported (diagnostics WARN with the
cause); the next good state produces a command. Any other exception in the loop is a crash: the spinner
(``ros/spinning.py``) hands it to ``companion_failed`` (``spinning.CompanionFault``, shared by every node),
which logs it, publishes ERROR diagnostics and takes the node through ``ErrorProcessing`` (``on_error``
closes the engine, the node ends ``unconfigured`` and can be configured again: the loop's executor thread
keeps running).

Memory: :func:`main` has ``ros.memory.retain_large_allocations`` applied before rclpy starts, so the multi-MB
buffers a full-size ``set_weights`` request passes through are reused from the heap instead of being mapped
fresh (and page-faulted in) on every call; ``LIBREDGETPU_ROS_MALLOC_TUNING=0`` turns that off.
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import sys
import threading
import time
from typing import Any

import numpy as np
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32MultiArray, Header

from libredgetpu_ros import jit
from libredgetpu_ros.errors import DeviceNotFoundError, InputError
from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.control import stats
from libredgetpu_ros.ros.control.codec import as_float32_buffer, describe_non_finite, to_float32_array
from libredgetpu_ros.ros.control.controller import Controller
from libredgetpu_ros.ros.control.params import PARAM_TABLE, ControlConfig
from libredgetpu_ros.ros.frame_busy import FrameBusyError, frame_lock
from libredgetpu_ros.ros.lifecycle import ManagedNode
from libredgetpu_ros.ros.services import MESSAGE_CHARS
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main
from libredgetpu_ros.textdata import clip, clip_repr
from libredgetpu_ros_interfaces.msg import CommandStamped
from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

NODE_NAME = "control_node"
MAX_REQUEST_ID_CHARS = 256  # set_weights request ids: a UUID or "<name>:<session>:<count>" is < 100


class ControlNode(ManagedNode):
    """Lifecycle node computing ``y = W·x (+ b)`` per state message with run-time swappable W."""

    PARAMS = PARAM_TABLE
    DIAGNOSTICS_NAME = "control"
    FAULT_WHAT = "state loop"
    RELEASE_NOTE = "closing the engine"

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._ctl: Controller | None = None
        self._loop = stats.LoopStats()
        self._swaps = stats.SwapStats()
        self._verdict = stats.LoopVerdict()
        self._cmd_pub: Any = None
        self._cmd_stamped_pub: Any = None
        self._plain_out, self._stamped_out = Float32MultiArray(), CommandStamped()  # reused by the loop
        self._swap_lock = threading.Lock()  # one swap at a time even if services move to another group
        # the loop's engine call vs a swap's staging, on an engine whose runner stages weights (docstring)
        self._step_lock: threading.Lock | None = None
        self._step_guard: Any = contextlib.nullcontext()

    # ----- lifecycle hooks (ros/lifecycle.py) -----------------------------------------------------

    def read_config(self) -> ControlConfig:
        cfg = super().read_config()  # state_topic checked (activate failed on a bad one, unconfigured)
        # A params file cannot hold a typed empty list, so [""] means "message order" too.
        return dataclasses.replace(cfg, joint_names=tuple(n for n in cfg.joint_names if n))

    def open_processor(self) -> None:
        with jit.compile_notice(self.get_logger().info):  # one INFO line when the kernel cache was cold
            self._ctl = Controller(self.cfg, self.get_fully_qualified_name())
        # the integer twin stages nothing (a no-op): no lock, a state never waits for a swap
        self._step_lock = threading.Lock() if self._ctl.engine.stages_weights else None
        self._step_guard = self._step_lock or contextlib.nullcontext()  # one per configure, not per state
        self._check_accelerator()

    def create_outputs(self) -> None:
        qos = self._qos(self.cfg)
        self._cmd_pub = self.output(Float32MultiArray, "~/command", qos)
        self._cmd_stamped_pub = self.output(CommandStamped, "~/command_stamped", qos)
        self.service(SetWeights, "~/set_weights", self._on_set_weights)
        self.service(GetWeights, "~/get_weights", self._on_get_weights)
        self._loop, self._swaps, self._verdict = stats.LoopStats(), stats.SwapStats(), stats.LoopVerdict()
        self._warm_service_path()

    def _warm_service_path(self) -> None:
        """The first ``~/set_weights`` costs what the next ones cost: rclpy's first conversion of a
        full-size request is paid here (``Controller.warm_service_path``; measured in
        bench/results/first_call.md)."""
        assert self.cfg is not None and self._ctl is not None
        warm = self._ctl.warm_service_path(self.cfg.clip_policy)
        self._swaps.warm_ups += 1
        if not warm.accepted:  # zeros are always representable: a refusal here is a bug worth seeing
            self.get_logger().warning(f"set_weights warm-up at configure refused: {warm.message}")

    def describe(self) -> str:
        cfg, ctl = self.cfg, self._ctl
        return (f"{ctl.describe()}, controller {ctl.rows}×{ctl.cols} ({cfg.state_type} on "
                f"'{cfg.state_topic}'), weights version {ctl.engine.version}")

    def create_inputs(self) -> None:
        cfg = self.cfg
        joint = cfg.state_type == "joint_state"
        qos = QoSProfile(depth=cfg.state_queue, reliability=self._qos(cfg).reliability)
        self._loop.last_state_time = time.monotonic()  # staleness counts from activation
        self.data_subscription(JointState if joint else Float32MultiArray, cfg.state_topic,
                               self._on_joint_state if joint else self._on_float_state, qos,
                               event_callbacks=SubscriptionEventCallbacks(message_lost=self._on_states_lost))

    @staticmethod
    def _qos(cfg: ControlConfig) -> QoSProfile:
        reliability = ReliabilityPolicy.BEST_EFFORT if cfg.best_effort else ReliabilityPolicy.RELIABLE
        return QoSProfile(depth=cfg.qos_depth, reliability=reliability)

    def close_processor(self) -> None:
        self._cmd_pub = self._cmd_stamped_pub = None
        if self._ctl is not None:
            ctl, self._ctl = self._ctl, None
            ctl.close()

    # ----- control loop (the data path's executor thread) ------------------------------------------

    def _on_float_state(self, msg: Float32MultiArray) -> None:
        now = self.get_clock().now()
        self._step(np.frombuffer(as_float32_buffer(msg.data), dtype=np.float32), None, now, "")

    def _on_joint_state(self, msg: JointState) -> None:
        now = self.get_clock().now()
        cfg, ctl = self.cfg, self._ctl
        assert cfg is not None and ctl is not None
        values = getattr(msg, cfg.joint_field)
        x = np.frombuffer(values, np.float64) if isinstance(values, array.array) else np.asarray(values)
        if ctl.joint_order is not None:
            selected = ctl.joint_order.select(x, msg.name)
            if selected is None:
                self._loop.states += 1
                self._loop.missing_joints += 1
                self._warn_once("joints", f"JointState lacks configured joints {list(cfg.joint_names)} "
                                f"(got {list(msg.name)} with {x.size} {cfg.joint_field} values); "
                                "dropping such states")
                return
            x = selected
        stamp = msg.header.stamp
        # An unstamped JointState (stamp 0) is timed by its arrival, like Float32MultiArray.
        stamped = stamp.sec != 0 or stamp.nanosec != 0
        self._step(x, msg.header if stamped else None, now, msg.header.frame_id)

    def _step(self, x: np.ndarray, header: Header | None, now: Time, frame_id: str) -> None:
        """One state -> one command, or a counted drop logged once per cause.

        ``header`` is the state's own header (reused as the command's), or None to stamp with ``now``.
        Runs on the loop thread only, so the two outgoing messages are allocated once and reused.
        """
        loop, cfg, ctl = self._loop, self.cfg, self._ctl
        assert cfg is not None and ctl is not None
        loop.states += 1
        loop.state_rate.tick()
        loop.last_state_time = time.monotonic()
        n = x.size
        if n != ctl.cols and not (cfg.pad_short_states and n < ctl.cols):
            loop.size_mismatch += 1
            # once for every size: a key per size logged a drifting size (a list grown each cycle) per state
            self._warn_once("size", f"state has {n} values, the controller expects state_size = "
                            f"{ctl.cols}; dropping such states, whatever their size "
                            f"(pad_short_states={cfg.pad_short_states}; counted: size_mismatch)")
            return
        if header is not None:
            age = (now.nanoseconds - (header.stamp.sec * 1_000_000_000 + header.stamp.nanosec)) * 1e-9
            if age > cfg.stale_timeout:
                loop.stale_dropped += 1
                self._warn_once("stale", f"state stamped {age:.3f} s ago exceeds stale_timeout = "
                                f"{cfg.stale_timeout} s; no command is published for stale states")
                return
        else:
            header = Header(stamp=now.to_msg(), frame_id=frame_id)
        xin = ctl.x.copy()  # a fresh buffer per call: never mutate one the engine may still hold
        xin[:n] = x
        try:
            # as long as it takes: a swap holds it across its staging alone (the runner's upload)
            with self._step_guard:
                y, version = ctl.engine.matmul_versioned(xin)  # checks finiteness (float64 overflow included)
        except InputError as exc:
            loop.invalid += 1
            loop.last_invalid = describe_non_finite(xin) if not np.isfinite(xin).all() else str(exc)
            self._warn_once("invalid", f"dropping invalid states, no command for them: {loop.last_invalid}")
            return
        data = to_float32_array(y[: ctl.rows])
        plain, out = self._plain_out, self._stamped_out
        plain.data = data
        self._cmd_pub.publish(plain)
        out.header = header
        out.data = data
        out.weights_version = int(version)
        self._cmd_stamped_pub.publish(out)
        loop.commands += 1
        loop.command_rate.tick()

    def _on_states_lost(self, info: Any) -> None:
        """DDS lost states before the loop took them (best-effort gaps); counted for diagnostics."""
        self._loop.lost += int(info.total_count_change)

    def _warn_once(self, key: str, text: str) -> None:
        if key not in self._loop.warned:
            self._loop.warned.add(key)
            self.get_logger().warning(text)

    # ----- services (main executor) -----------------------------------------------------------------

    def _on_set_weights(self, req: SetWeights.Request, resp: SetWeights.Response) -> SetWeights.Response:
        t0 = time.perf_counter()
        cfg, ctl = self.cfg, self._ctl
        if ctl is None or cfg is None:
            resp.accepted, resp.message = False, "node is not configured"
            return resp
        swaps = self._swaps
        if req.engine not in ("", cfg.engine_name):
            resp.accepted = False
            resp.message = (f"unknown engine {clip_repr(req.engine)}: this node serves {cfg.engine_name!r} "
                            "(or use '')")
            resp.version = int(ctl.engine.version)
        elif len(req.request_id) > MAX_REQUEST_ID_CHARS:  # ids are recorded (1024 of them) and echoed
            resp.accepted = False
            resp.message = (f"request_id of {len(req.request_id)} characters, at most {MAX_REQUEST_ID_CHARS} "
                            "accepted")
            resp.version = int(ctl.engine.version)
        else:
            with self._swap_lock:
                replayed = ctl.replies.replay(req.request_id) if req.request_id else None
                if replayed is not None:  # a retry: its first copy was handled (and its reply maybe lost)
                    swaps.replayed += 1
                    return replayed
                try:
                    device_error = self._swap(ctl, req, resp, cfg.clip_policy, t0)
                except FrameBusyError as exc:  # a step holds the runner past the bound: not blocked, refused
                    resp.accepted, resp.version = False, int(ctl.engine.version)
                    resp.message, device_error = f"weights unchanged: {exc}", None
                else:
                    if req.request_id:  # a busy answer is not recorded: the retry of that id runs
                        ctl.replies.record(req.request_id, resp)
            if device_error:
                self.get_logger().error(device_error)
        resp.total_ms = (time.perf_counter() - t0) * 1e3
        if not resp.accepted:
            swaps.refused += 1
            swaps.last_refusal = clip(resp.message, MESSAGE_CHARS)
            self.get_logger().warning(f"set_weights refused: {resp.message}")
        elif req.dry_run:
            swaps.dry_runs += 1
        else:
            swaps.accepted += 1
            swaps.last_swap_time = time.time()
            swaps.last_swap_total_ms = resp.total_ms
        return resp

    def _swap(self, ctl: Controller, req: SetWeights.Request, resp: SetWeights.Response, clip_policy: str,
              t0: float) -> str | None:
        """``Controller.set_weights`` with its staging (not a dry run's: none) between two steps on an engine
        whose runner stages weights: ``FrameBusyError`` when a step holds the lock past ``FRAME_BUSY_WAIT_S``.
        Validation, quantization and the blob run outside the lock: a state never waits for them."""
        lock = self._step_lock  # MatMulEngine enters the guard around a staging only: never for a dry run
        return ctl.set_weights(req, resp, clip_policy, t0, guard=None if lock is None else frame_lock(lock))

    def _on_get_weights(self, req: GetWeights.Request, resp: GetWeights.Response) -> GetWeights.Response:
        cfg, ctl = self.cfg, self._ctl
        if ctl is None or cfg is None:
            resp.success, resp.message = False, "node is not configured"
        elif req.engine not in ("", cfg.engine_name):
            resp.success = False
            resp.message = (f"unknown engine {clip_repr(req.engine)}: this node serves {cfg.engine_name!r} "
                            "(or use '')")
        else:
            ctl.get_weights(resp)
        return resp

    def _fallback(self) -> str:
        """Why W·x runs on the CPU although ``backend: auto`` would have taken an accelerator, or "" (the
        engine's ``fallback``, from the one auto resolution: ``backends.choose``)."""
        ctl = self._ctl
        return "" if ctl is None else ctl.engine.fallback

    def _check_accelerator(self) -> None:
        """``require_accelerator``: no engine on the CPU (the failed configure closes it)."""
        assert self.cfg is not None and self._ctl is not None
        if self.cfg.require_accelerator and self._ctl.engine.backend != "edgetpu":
            runs_on, reason = self._ctl.engine.backend, self._fallback() or f"backend: {self.cfg.backend}"
            raise DeviceNotFoundError(f"require_accelerator is true but W·x would run on {runs_on} "
                                      f"({reason})")

    # ----- diagnostics ----------------------------------------------------------------------------

    def hardware_id(self) -> str:
        return self.cfg.device or self.cfg.backend

    def diagnostic_status(self) -> tuple[int, str, dict[str, object]]:
        ctl, cfg = self._ctl, self.cfg
        assert ctl is not None
        level, message = self._verdict.judge(self._loop, self.inputs_active(), cfg.stale_timeout)
        engine = ctl.engine
        values = {
            "weights_version": engine.version,
            "controller": f"{ctl.rows}x{ctl.cols} in {engine.rows}x{engine.cols}",
            "engine": ctl.describe(),
            "backend_choice": engine.choice,  # backends.choose's reason, as the camera nodes report it
            **stats.values(self._loop, self._swaps),
        }
        shared = engine.shared_status()  # the engine's stream on an Edge TPU shared in this process
        values.update(diagnostics.shared_values(shared))
        warnings = self.fallback_warnings([self._fallback()]) + diagnostics.shared_warnings(shared)
        level, message = diagnostics.warned(level, message, warnings)
        return level, message, values


def main(args: list[str] | None = None) -> int:
    """``ros2 run libredgetpu_ros control_node`` / ``python -m libredgetpu_ros.ros.control_node``."""
    return run_lifecycle_node_main(ControlNode, args, retain_allocations=True)


if __name__ == "__main__":
    sys.exit(main())
