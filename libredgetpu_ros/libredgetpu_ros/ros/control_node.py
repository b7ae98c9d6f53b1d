"""Adaptive control node: state in, ``y = W·x (+ b)`` out, weights swapped at run time by a service.

The node wraps one :class:`~libredgetpu_ros.matmul.MatMulEngine` (a compiled Dense(N) Edge TPU template or its
CPU twin). A controller with ``state_size`` inputs and ``command_size`` outputs occupies the top-left block of
the N×N template; the rest of the template stays zero, so unused outputs are zero and are not published.

Lifecycle:

- ``configure`` opens the engine, loads zero weights (or ``initial_weights``) and creates the publishers
  and the ``~/set_weights`` / ``~/get_weights`` services. Weights can be loaded while inactive: a planner
  preloads them before activation.
- ``activate`` subscribes to the state topic; every state produces one command.
- ``deactivate`` drops the subscription; ``cleanup`` closes the engine.

Threading: the state path runs on its own executor thread. The state subscription lives on a small helper
node (``<name>_loop``: no parameters, no rosout) spun by a dedicated executor, so a state never queues behind
a service call, a parameter request or the diagnostics timer; services, lifecycle and diagnostics run on the
main executor (both ``SingleThreadedExecutor``: cheaper per callback than the multi-threaded one).
The loop reads weights through ``MatMulEngine.matmul_versioned``: each output comes from one complete weight
set (the old one or the new one, never a mix) and carries that set's version. The state subscription keeps
only the latest ``state_queue`` states: a controller wants the newest state, not a backlog.

Memory: :func:`main` calls ``ros.memory.retain_large_allocations`` before rclpy starts, so the multi-MB
buffers a full-size ``set_weights`` request passes through are reused from the heap instead of being mapped
fresh (and page-faulted in) on every call; ``LIBREDGETPU_ROS_MALLOC_TUNING=0`` turns that off.
"""

from __future__ import annotations

import array
import dataclasses
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.executors import ExternalShutdownException
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from rclpy.lifecycle import Node as LifecycleNode
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32MultiArray, Header

from libredgetpu_ros.errors import ConfigError, LibrEdgeTpuError, WeightsError
from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.environment import apply_localhost_only
from libredgetpu_ros.ros.memory import retain_large_allocations
from libredgetpu_ros.ros.params import ParamSpec, ParamTable
from libredgetpu_ros.ros.spinning import spin_with_companions
from libredgetpu_ros_interfaces.msg import CommandStamped
from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

NODE_NAME = "control_node"
STATE_TYPES = ("float32_multi_array", "joint_state")
JOINT_FIELDS = ("position", "velocity", "effort")
CLIP_POLICIES = ("refuse", "clip")
BACKENDS = ("auto", "cpu", "edgetpu")
DIAG_OK, DIAG_WARN = 0, 1


# --------------------------------------------------------------------------------------------------
# Parameters: one table -> ROS descriptors, validation, the typed config the node works with, the docs table.

PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec("backend", "auto", "where W·x runs; auto = the Edge TPU if one is attached, else the CPU twin",
              choices=BACKENDS),
    ParamSpec("template", 256, "Dense(N) template size N (256, 512, 1024 ship as fixtures)",
              range=(64, 16384)),
    ParamSpec("template_path", "", "a dense_N_edgetpu.tflite (beside dense_N.tflite and its .json); "
              "overrides template"),
    ParamSpec("device", "", "Edge TPU to use (index or USB bus path); empty = the first one"),
    ParamSpec("engine_name", "controller", "engine name set_weights/get_weights requests must use (or '')"),
    ParamSpec("state_topic", "state", "state input topic (a relative name resolves in the node namespace)"),
    ParamSpec("state_type", "float32_multi_array", "message type of the state topic", choices=STATE_TYPES),
    ParamSpec("joint_field", "position", "JointState field used as the state vector", choices=JOINT_FIELDS),
    # [""] rather than []: rclpy types an empty list default as a byte array and then refuses strings.
    ParamSpec("joint_names", ("",), "JointState: joint order of the state vector; [''] = message order"),
    ParamSpec("state_size", 0, "controller inputs (columns of W); 0 = the template width N", range=(0, 4096)),
    ParamSpec("command_size", 0, "controller outputs (rows of W); 0 = the template height N",
              range=(0, 4096)),
    ParamSpec("pad_short_states", False, "accept states shorter than state_size, zero-filling the rest"),
    ParamSpec("stale_timeout", 0.5, "s: a state stamped longer ago than this produces no command; no state "
              "for this long flags diagnostics WARN", range=(0.001, 3600.0), mutability="runtime"),
    ParamSpec("clip_policy", "refuse", "weights outside the representable range: refuse the request, or clip "
              "them and report the count", choices=CLIP_POLICIES, mutability="runtime"),
    ParamSpec("initial_weights", "", ".npy (command_size × state_size) loaded at configure; empty = zeros"),
    ParamSpec("state_queue", 1, "depth of the state subscription: 1 = the latest state wins (states the loop "
              "has not taken yet are replaced, not queued); larger values queue a backlog", range=(1, 1000)),
    ParamSpec("qos_depth", 10, "queue depth of the command publishers", range=(1, 1000)),
    ParamSpec("best_effort", False, "best-effort QoS for state and commands (reliable otherwise)"),
    ParamSpec("diagnostics_period", 1.0, "s between /diagnostics messages", range=(0.05, 60.0)),
)


@dataclass(frozen=True)
class ControlConfig:
    backend: str
    template: int
    template_path: str
    device: str
    engine_name: str
    state_topic: str
    state_type: str
    joint_field: str
    joint_names: tuple[str, ...]
    state_size: int
    command_size: int
    pad_short_states: bool
    stale_timeout: float
    clip_policy: str
    initial_weights: str
    state_queue: int
    qos_depth: int
    best_effort: bool
    diagnostics_period: float


PARAM_TABLE = ParamTable(PARAMETERS, ControlConfig)


# --------------------------------------------------------------------------------------------------
# State decoding and weight-request validation: vectorised, no per-element Python work.


class JointOrder:
    """Maps a JointState's name list to the configured joint order; cached per distinct name list."""

    def __init__(self, joint_names: tuple[str, ...]) -> None:
        self._names = joint_names
        self._cache: dict[tuple[str, ...], np.ndarray | None] = {}

    def indices(self, msg_names: Sequence[str]) -> np.ndarray | None:
        """Indices into the message arrays, or None when a configured joint is missing."""
        key = tuple(msg_names)
        if key not in self._cache:
            where = {name: i for i, name in enumerate(key)}
            found = all(n in where for n in self._names)
            self._cache[key] = np.array([where[n] for n in self._names], np.intp) if found else None
        return self._cache[key]


def validate_weights_request(data: Sequence[float], bias: Sequence[float], rows: int, cols: int,
                             expected: tuple[int, int], w_min: np.ndarray, w_max: np.ndarray,
                             clip_policy: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(weights (rows, cols) float32, bias or None) from a request, or WeightsError saying what is wrong.

    ``w_min``/``w_max`` hold the representable range of each of the ``rows`` output rows; with
    ``clip_policy == "refuse"`` a value outside it refuses the request (the engine would clip it).
    """
    if (rows, cols) != expected:
        raise WeightsError(f"rows×cols = {rows}×{cols} does not match the controller "
                           f"(command_size×state_size = {expected[0]}×{expected[1]})")
    weights = np.frombuffer(_as_float32_buffer(data), dtype=np.float32)
    if weights.size != rows * cols:
        raise WeightsError(f"len(data) = {weights.size}, expected rows*cols = {rows * cols}")
    weights = weights.reshape(rows, cols)
    # Per-row extremes: two reductions, no temporaries. NaN propagates through min/max and ±inf is an
    # extreme, so finite extremes mean finite data; the element masks are built only to word a refusal.
    row_min, row_max = weights.min(axis=1), weights.max(axis=1)
    if not (np.isfinite(row_min).all() and np.isfinite(row_max).all()):
        bad = ~np.isfinite(weights)
        r, c = np.argwhere(bad)[0]
        raise WeightsError(f"data has {int(bad.sum())} non-finite value(s), first at row {r}, col {c}: "
                           f"{weights[r, c]}")
    b = None
    if len(bias):
        b = np.frombuffer(_as_float32_buffer(bias), dtype=np.float32)
        if b.size != rows:
            raise WeightsError(f"len(bias) = {b.size}, expected rows = {rows} (or empty for no bias)")
        if not np.isfinite(b).all():
            raise WeightsError(f"bias has a non-finite value at index {int(np.argmin(np.isfinite(b)))}")
    if clip_policy == "refuse" and ((row_min < w_min).any() or (row_max > w_max).any()):
        outside = (weights < w_min[:, None]) | (weights > w_max[:, None])
        if outside.any():
            r, c = np.argwhere(outside)[0]
            raise WeightsError(
                f"{int(outside.sum())} weight(s) outside the representable range, first at row {r}, col {c}: "
                f"{weights[r, c]:.6g} not in [{w_min[r]:.6g}, {w_max[r]:.6g}] (clip_policy=refuse)")
    return weights, b


def _as_float32_buffer(values: Sequence[float]) -> Any:
    """Zero-copy when rclpy hands us array.array('f') (it does for float32[] fields)."""
    if isinstance(values, array.array) and values.typecode == "f":
        return values
    return np.asarray(values, dtype=np.float32)


def _to_float32_array(values: np.ndarray) -> array.array:
    """NumPy -> array.array('f') for a float32[] message field, one memcpy.

    Assigning a NumPy array to the field makes rclpy check every element in Python (~100 ms for 1M values);
    ``frombytes`` of a uint8 view copies once (``tobytes`` would add a second copy).
    """
    out = array.array("f")
    out.frombytes(np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint8))
    return out


# --------------------------------------------------------------------------------------------------
# Counters. Each field is written by one callback group only (state loop or services); diagnostics reads them.


@dataclass
class LoopStats:
    states: int = 0
    commands: int = 0
    stale_dropped: int = 0
    size_mismatch: int = 0
    missing_joints: int = 0
    lost: int = 0  # states DDS reported lost before the loop took them (message-lost events)
    last_state_time: float | None = None  # time.monotonic() of the last state received
    warned: set[str] = field(default_factory=set)
    state_rate: diagnostics.RateMeter = field(default_factory=diagnostics.RateMeter)
    command_rate: diagnostics.RateMeter = field(default_factory=diagnostics.RateMeter)


@dataclass
class SwapStats:
    accepted: int = 0
    refused: int = 0
    dry_runs: int = 0
    last_swap_time: float | None = None  # time.time() of the last accepted swap
    last_swap_total_ms: float = float("nan")
    last_refusal: str = ""


# --------------------------------------------------------------------------------------------------


class ControlNode(LifecycleNode):
    """Lifecycle node computing ``y = W·x (+ b)`` per state message with run-time swappable W."""

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        PARAM_TABLE.declare(self)
        self.add_on_set_parameters_callback(PARAM_TABLE.validator(lambda: self._engine is not None))
        self.add_post_set_parameters_callback(self._apply_runtime_parameters)
        # The state path's own node: spun by its own executor (see the module docstring). No parameters,
        # no global arguments (the state topic is resolved by this node, remaps included), no rosout.
        self.loop_node = Node(f"{self.get_name()}_loop", namespace=self.get_namespace(), context=self.context,
                              use_global_arguments=False, enable_rosout=False,
                              start_parameter_services=False)
        self._cfg: ControlConfig | None = None
        self._engine: Any = None
        self._rows = self._cols = 0
        self._w_min = self._w_max = np.zeros(0, np.float32)
        self._joint_order: JointOrder | None = None
        self._x = np.zeros(0, np.float32)
        self._loop = LoopStats()
        self._swaps = SwapStats()
        self._stale_mark = 0  # stale_dropped at the last diagnostics report
        self._entities: list[Any] = []  # services and timer created at configure
        self._sub: Any = None
        self._diag_pub: Any = None
        self._cmd_pub: Any = None
        self._cmd_stamped_pub: Any = None
        self._plain_out, self._stamped_out = Float32MultiArray(), CommandStamped()  # reused by the loop
        self._swap_lock = threading.Lock()  # one swap at a time even if services move to another group

    # ----- lifecycle ------------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            cfg = PARAM_TABLE.read(self)
            # A params file cannot hold a typed empty list, so [""] means "message order" too.
            self._cfg = dataclasses.replace(cfg, joint_names=tuple(n for n in cfg.joint_names if n))
            self._open_engine(self._cfg)
        except LibrEdgeTpuError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            self._close_engine()
            return TransitionCallbackReturn.FAILURE
        cfg = self._cfg
        qos = self._qos(cfg)
        self._cmd_pub = self.create_lifecycle_publisher(Float32MultiArray, "~/command", qos)
        self._cmd_stamped_pub = self.create_lifecycle_publisher(CommandStamped, "~/command_stamped", qos)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._entities = [
            self.create_service(SetWeights, "~/set_weights", self._on_set_weights),
            self.create_service(GetWeights, "~/get_weights", self._on_get_weights),
            self.create_timer(cfg.diagnostics_period, self._publish_diagnostics),
        ]
        self._loop, self._swaps, self._stale_mark = LoopStats(), SwapStats(), 0
        self.get_logger().info(
            f"configured: {self._engine_description()}, controller {self._rows}×{self._cols} "
            f"({cfg.state_type} on '{cfg.state_topic}'), weights version {self._engine.version}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        assert self._cfg is not None
        cfg = self._cfg
        joint = cfg.state_type == "joint_state"
        qos = QoSProfile(depth=cfg.state_queue, reliability=self._qos(cfg).reliability)
        self._loop.last_state_time = time.monotonic()  # staleness counts from activation
        self._sub = self.loop_node.create_subscription(
            JointState if joint else Float32MultiArray, self.resolve_topic_name(cfg.state_topic),
            self._on_joint_state if joint else self._on_float_state, qos,
            event_callbacks=SubscriptionEventCallbacks(message_lost=self._on_states_lost))
        self.get_logger().info(f"active: subscribed to {self._sub.topic_name}")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._drop_subscription()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def _apply_runtime_parameters(self, params: list[Parameter]) -> None:
        """stale_timeout / clip_policy apply immediately (validated already by the table's validator)."""
        runtime = {p.name: p.value for p in params if p.name in PARAM_TABLE.runtime_names()}
        if runtime and self._cfg is not None:
            # One reference swap: a callback on another thread sees the old config or the new one.
            self._cfg = dataclasses.replace(self._cfg, **runtime)

    # ----- setup helpers --------------------------------------------------------------------------

    @staticmethod
    def _qos(cfg: ControlConfig) -> QoSProfile:
        reliability = ReliabilityPolicy.BEST_EFFORT if cfg.best_effort else ReliabilityPolicy.RELIABLE
        return QoSProfile(depth=cfg.qos_depth, reliability=reliability)

    def _open_engine(self, cfg: ControlConfig) -> None:
        from libredgetpu_ros.matmul import MatMulEngine  # LiteRT / libusb: imported only when configuring

        template: int | str = cfg.template_path or cfg.template
        self._engine = MatMulEngine.from_template(template, backend=cfg.backend, device=cfg.device or None)
        n_rows, n_cols = self._engine.rows, self._engine.cols
        self._rows = cfg.command_size or n_rows
        self._cols = cfg.state_size or n_cols
        if self._rows > n_rows or self._cols > n_cols:
            raise ConfigError(f"parameters command_size×state_size = {self._rows}×{self._cols} do not fit "
                              f"the {n_rows}×{n_cols} template {template!r}")
        if cfg.state_type == "joint_state" and cfg.joint_names and len(cfg.joint_names) != self._cols:
            raise ConfigError(f"parameter joint_names has {len(cfg.joint_names)} names but the controller "
                              f"has state_size = {self._cols}")
        if len(set(cfg.joint_names)) != len(cfg.joint_names):
            raise ConfigError(f"parameter joint_names={list(cfg.joint_names)!r} repeats a name")
        w_min, w_max = self._engine.weight_range()
        self._w_min = np.asarray(w_min, np.float32)[: self._rows]
        self._w_max = np.asarray(w_max, np.float32)[: self._rows]
        self._joint_order = JointOrder(cfg.joint_names) if cfg.joint_names else None
        self._x = np.zeros(n_cols, np.float32)
        weights = np.zeros((self._rows, self._cols), np.float32)
        if cfg.initial_weights:
            weights = self._load_initial_weights(Path(cfg.initial_weights))
        self._engine.set_weights(self._embed(weights))

    def _load_initial_weights(self, path: Path) -> np.ndarray:
        try:
            weights = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"parameter initial_weights: cannot read {path}: {exc}") from exc
        if weights.shape != (self._rows, self._cols):
            raise ConfigError(f"parameter initial_weights: {path} holds shape {weights.shape}, expected "
                              f"({self._rows}, {self._cols}) = (command_size, state_size)")
        if not np.isfinite(weights).all():
            raise ConfigError(f"parameter initial_weights: {path} contains NaN or inf")
        return weights.astype(np.float32)

    def _embed(self, weights: np.ndarray) -> np.ndarray:
        """The controller block in the top-left corner of a zero template-sized matrix (as is if full)."""
        if weights.shape == (self._engine.rows, self._engine.cols):
            return weights  # the engine quantizes into its own arrays and keeps no reference to this one
        full = np.zeros((self._engine.rows, self._engine.cols), np.float32)
        full[: weights.shape[0], : weights.shape[1]] = weights
        return full

    def _engine_description(self) -> str:
        engine = self._engine
        return f"MatMulEngine {engine.template.name} ({engine.rows}×{engine.cols}) on {engine.backend}"

    def _drop_subscription(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            self.loop_node.destroy_subscription(sub)

    def companion_nodes(self) -> list[Node]:
        """Nodes a host process must spin besides this one, each on its own executor (``ros/spinning.py``):
        the state loop."""
        return [self.loop_node]

    def destroy_node(self) -> None:
        self.loop_node.destroy_node()
        super().destroy_node()

    def teardown(self) -> None:
        """Drop every entity created at configure and close the engine (idempotent)."""
        self._drop_subscription()
        for entity in self._entities:
            if hasattr(entity, "cancel"):
                entity.cancel()
                self.destroy_timer(entity)
            else:
                self.destroy_service(entity)
        self._entities = []
        for pub in (self._cmd_pub, self._cmd_stamped_pub):
            if pub is not None:
                self.destroy_lifecycle_publisher(pub)
        if self._diag_pub is not None:
            self.destroy_publisher(self._diag_pub)
        self._cmd_pub = self._cmd_stamped_pub = self._diag_pub = None
        self._close_engine()

    def _close_engine(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            engine.close()

    # ----- control loop ---------------------------------------------------------------------------

    def _on_float_state(self, msg: Float32MultiArray) -> None:
        now = self.get_clock().now()
        self._step(np.frombuffer(_as_float32_buffer(msg.data), dtype=np.float32), None, now, "")

    def _on_joint_state(self, msg: JointState) -> None:
        now = self.get_clock().now()
        cfg = self._cfg
        assert cfg is not None
        values = getattr(msg, cfg.joint_field)
        x = np.frombuffer(values, np.float64) if isinstance(values, array.array) else np.asarray(values)
        if self._joint_order is not None:
            idx = self._joint_order.indices(msg.name)
            if idx is None or (idx.size and idx.max() >= x.size):
                self._loop.states += 1
                self._loop.missing_joints += 1
                self._warn_once("joints", f"JointState lacks configured joints {list(cfg.joint_names)} "
                                f"(got {list(msg.name)} with {x.size} {cfg.joint_field} values); "
                                "dropping such states")
                return
            x = x[idx]
        stamp = msg.header.stamp
        # An unstamped JointState (stamp 0) is timed by its arrival, like Float32MultiArray.
        stamped = stamp.sec != 0 or stamp.nanosec != 0
        self._step(x, msg.header if stamped else None, now, msg.header.frame_id)

    def _step(self, x: np.ndarray, header: Header | None, now: Time, frame_id: str) -> None:
        """One state -> one command, or a counted drop logged once per cause.

        ``header`` is the state's own header (reused as the command's), or None to stamp with ``now``.
        Runs on the loop thread only, so the two outgoing messages are allocated once and reused.
        """
        loop, cfg = self._loop, self._cfg
        assert cfg is not None
        loop.states += 1
        loop.state_rate.tick()
        loop.last_state_time = time.monotonic()
        n = x.size
        if n != self._cols and not (cfg.pad_short_states and n < self._cols):
            loop.size_mismatch += 1
            self._warn_once(f"size{n}", f"state has {n} values, the controller expects state_size = "
                            f"{self._cols}; dropping such states (pad_short_states={cfg.pad_short_states})")
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
        xin = self._x.copy()  # a fresh buffer per call: never mutate one the engine may still hold
        xin[:n] = x
        y, version = self._engine.matmul_versioned(xin)
        data = _to_float32_array(y[: self._rows])
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

    # ----- services -------------------------------------------------------------------------------

    def _on_set_weights(self, req: SetWeights.Request, resp: SetWeights.Response) -> SetWeights.Response:
        t0 = time.perf_counter()
        with self._swap_lock:
            self._set_weights(req, resp, t0)
        resp.total_ms = (time.perf_counter() - t0) * 1e3
        stats = self._swaps
        if not resp.accepted:
            stats.refused += 1
            stats.last_refusal = resp.message
            self.get_logger().warning(f"set_weights refused: {resp.message}")
        elif req.dry_run:
            stats.dry_runs += 1
        else:
            stats.accepted += 1
            stats.last_swap_time = time.time()
            stats.last_swap_total_ms = resp.total_ms
        return resp

    def _set_weights(self, req: SetWeights.Request, resp: SetWeights.Response, t0: float) -> None:
        cfg, engine = self._cfg, self._engine
        resp.accepted = False
        if engine is None or cfg is None:
            resp.message = "node is not configured"
            return
        resp.version = int(engine.version)
        if req.engine not in ("", cfg.engine_name):
            resp.message = f"unknown engine {req.engine!r}: this node serves {cfg.engine_name!r} (or use '')"
            return
        try:
            weights, bias = validate_weights_request(req.data, req.bias, req.rows, req.cols,
                                                     (self._rows, self._cols), self._w_min, self._w_max,
                                                     cfg.clip_policy)
            full_bias = None
            if bias is not None:
                full_bias = np.zeros(engine.rows, np.float32)
                full_bias[: self._rows] = bias
            full = self._embed(weights)
            node_validate_ms = (time.perf_counter() - t0) * 1e3
            report = engine.set_weights(full, bias=full_bias, dry_run=req.dry_run)
        except WeightsError as exc:
            resp.message = str(exc)
            resp.validate_ms = (time.perf_counter() - t0) * 1e3
            return
        except LibrEdgeTpuError as exc:  # device trouble: refuse and keep serving the old weights
            resp.message = f"{type(exc).__name__}: {exc}"
            self.get_logger().error(f"set_weights failed, the old weights stay active: {resp.message}")
            return
        # The engine's `accepted` means "published"; for the service a passing dry run is accepted too.
        resp.accepted = True
        resp.version = int(report.version)
        resp.clipped_count = int(report.clipped_count)
        resp.max_quantization_error = float(report.max_quantization_error)
        timings = report.timings_ms
        resp.validate_ms = node_validate_ms + float(timings["validate"])
        resp.quantize_ms = float(timings["quantize"])
        resp.blob_ms = float(timings["blob"])
        resp.swap_ms = float(timings["swap"])
        verb = "validated (dry run, nothing swapped)" if req.dry_run else "swapped"
        resp.message = (f"{verb}: version {resp.version}, {resp.clipped_count} clipped, max quantization "
                        f"error {resp.max_quantization_error:.3g}")

    def _on_get_weights(self, req: GetWeights.Request, resp: GetWeights.Response) -> GetWeights.Response:
        cfg, engine = self._cfg, self._engine
        if engine is None or cfg is None:
            resp.success, resp.message = False, "node is not configured"
            return resp
        if req.engine not in ("", cfg.engine_name):
            resp.success = False
            resp.message = f"unknown engine {req.engine!r}: this node serves {cfg.engine_name!r} (or use '')"
            return resp
        weights, bias, version = engine.get_weights()
        resp.success, resp.message = True, ""
        resp.version = int(version)
        resp.rows, resp.cols = self._rows, self._cols
        resp.data = _to_float32_array(np.asarray(weights)[: self._rows, : self._cols])
        if bias is not None:
            resp.bias = _to_float32_array(np.asarray(bias)[: self._rows])
        resp.weight_min = _to_float32_array(self._w_min)
        resp.weight_max = _to_float32_array(self._w_max)
        return resp

    # ----- diagnostics ----------------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        engine, cfg, pub = self._engine, self._cfg, self._diag_pub
        if pub is None or engine is None or cfg is None:
            return
        loop, swaps = self._loop, self._swaps
        active = self._sub is not None
        age = None if loop.last_state_time is None else time.monotonic() - loop.last_state_time
        level, message = DIAG_OK, "running" if active else "inactive (weights can be loaded)"
        state_hz, command_hz = loop.state_rate.rate(), loop.command_rate.rate()
        stale_now, self._stale_mark = loop.stale_dropped - self._stale_mark, loop.stale_dropped
        if active and stale_now:
            level = DIAG_WARN
            message = (f"{stale_now} stale state(s) since the last report "
                       f"(stale_timeout {cfg.stale_timeout} s)")
        elif active and age is not None and age > cfg.stale_timeout:
            level = DIAG_WARN
            message = f"state stale: last one {age:.2f} s ago (stale_timeout {cfg.stale_timeout} s)"
        elif active and state_hz > 0 and command_hz == 0:
            level, message = DIAG_WARN, "states arrive but none produces a command (stale or wrong size)"
        values = {
            "state_rate_hz": state_hz,
            "command_rate_hz": command_hz,
            "weights_version": engine.version,
            "controller": f"{self._rows}x{self._cols} in {engine.rows}x{engine.cols}",
            "engine": self._engine_description(),
            "states": loop.states,
            "commands": loop.commands,
            "stale_dropped": loop.stale_dropped,
            "size_mismatch": loop.size_mismatch,
            "missing_joints": loop.missing_joints,
            "states_lost": loop.lost,
            "last_state_age_s": "never" if age is None else age,
            "swaps_accepted": swaps.accepted,
            "swaps_refused": swaps.refused,
            "dry_runs": swaps.dry_runs,
            "last_swap_time": "never" if swaps.last_swap_time is None else swaps.last_swap_time,
            "last_swap_total_ms": swaps.last_swap_total_ms,
            "last_refusal": swaps.last_refusal,
        }
        status = diagnostics.status(f"{self.get_fully_qualified_name()}: control", cfg.device or cfg.backend,
                                    level, message, values)
        pub.publish(diagnostics.array(self.get_clock().now().to_msg(), [status]))


def main(args: list[str] | None = None) -> int:
    """``ros2 run libredgetpu_ros control_node`` / ``python -m libredgetpu_ros.ros.control_node``."""
    apply_localhost_only()  # fills in only what is unset: an integrator's explicit DDS setup wins
    retained = retain_large_allocations()  # before rclpy: its threads then allocate under the same rules
    rclpy.init(args=args)
    node = ControlNode()
    node.get_logger().debug(f"large allocations retained for reuse (mallopt): {retained}")
    try:
        spin_with_companions(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.teardown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
