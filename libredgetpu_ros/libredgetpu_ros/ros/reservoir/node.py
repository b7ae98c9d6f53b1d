"""Reservoir node: a state topic in, the one-step-ahead prediction out, the readout fitted on the robot.

Every state (``sensor_msgs/JointState`` or ``std_msgs/Float64MultiArray``, parameter ``state_type``) advances
a :class:`~libredgetpu_ros.robotics.reservoir.ReservoirComputer` (``W_res x`` on the MatMul engine: Edge TPU
or CPU twin); once a readout exists, the prediction of the next state is published on ``~/prediction`` with
the same message type (a JointState prediction carries the input's header: its stamp and frame).

Services: ``~/fit`` (FitReadout: the last N buffered states, or a bag's state topic; the readout maps each
state to the next; read and fitted on a thread of its own, ``services.OffExecutor``, so the executor keeps
answering ``get_state`` and the other services meanwhile; one fit at a time), ``~/load_readout`` /
``~/save_readout`` (FilePath, main executor). A refused fit or
load (too few samples, NaN, another reservoir's file) answers ``success: false`` with the reason and keeps the
previous readout.

Bad states are dropped and counted as the control node does (its ``JointOrder`` and ``describe_non_finite``):
NaN/inf values, a wrong number of values, missing joints; diagnostics WARN with the last cause. The state path
runs on a companion node with its own executor thread (``ros/spinning.py``); an unexpected exception there
takes the node through ``on_error`` (``spinning.CompanionFault``). The reservoir is deterministic (seeded),
so a bag replayed into the node gives exactly what running the reservoir over the bag offline gives.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import threading
import time
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from rclpy.lifecycle import Node as LifecycleNode
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from libredgetpu_ros.errors import InputError, LibrEdgeTpuError
from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.control.codec import JointOrder, describe_non_finite
from libredgetpu_ros.ros.lifecycle import StateLoopNode, TeardownOnCleanup
from libredgetpu_ros.ros.output_qos import output_publisher
from libredgetpu_ros.ros.reservoir.params import PARAM_TABLE, ReservoirNodeConfig
from libredgetpu_ros.ros.reservoir.states import read_bag_states, state_vector
from libredgetpu_ros.ros.services import MESSAGE_CHARS, OffExecutor, create_guarded_service
from libredgetpu_ros.ros.spinning import CompanionFault, destroy_entities, run_lifecycle_node_main
from libredgetpu_ros.textdata import clip
from libredgetpu_ros_interfaces.srv import FilePath, FitReadout

NODE_NAME = "reservoir"


@dataclasses.dataclass
class _Stats:
    states: int = 0
    predictions: int = 0
    invalid: int = 0  # NaN/inf states dropped
    size_mismatch: int = 0
    missing_joints: int = 0
    last_drop: str = ""
    drops_reported: int = 0
    step_ms_total: float = 0.0
    fits: int = 0
    refused: int = 0
    last_refusal: str = ""
    rate: diagnostics.RateMeter = dataclasses.field(default_factory=diagnostics.RateMeter)


def open_reservoir(cfg: ReservoirNodeConfig) -> Any:
    """The node's reservoir from its parameters (also what offline processing of a bag uses)."""
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig

    engine = MatMulEngine.from_template(cfg.template, backend=cfg.backend, device=cfg.device or None)
    try:
        rc = ReservoirComputer(engine, ReservoirConfig(
            input_dim=cfg.state_size, spectral_radius=cfg.spectral_radius, input_scaling=cfg.input_scaling,
            bias_scaling=cfg.bias_scaling, leak_rate=cfg.leak_rate, activation=cfg.activation,
            density=cfg.density, seed=cfg.seed, ridge=cfg.ridge, washout=cfg.washout, passes=cfg.passes))
        if cfg.readout:
            rc.load_readout(cfg.readout)
    except BaseException:
        engine.close()
        raise
    return rc


class ReservoirNode(StateLoopNode, TeardownOnCleanup, LifecycleNode):
    """Echo state network on a state topic; see the module docstring."""

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        PARAM_TABLE.declare(self)
        self.add_on_set_parameters_callback(PARAM_TABLE.validator(lambda: self._rc is not None))
        self.start_state_loop()
        self._cfg: ReservoirNodeConfig | None = None
        self._rc: Any = None
        self._order: JointOrder | None = None
        self._buffer: collections.deque[np.ndarray] = collections.deque()
        self._buffer_lock = threading.Lock()  # the loop appends while ~/fit copies
        self._stats = _Stats()
        self._entities: list[Any] = []
        self._pred_pub: Any = None
        self._diag_pub: Any = None
        self._crash = CompanionFault(self, "state loop", self._report_crash)
        self._fitting = OffExecutor("reservoir_fit")

    # ----- lifecycle ------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            cfg = PARAM_TABLE.read(self)
            cfg = dataclasses.replace(cfg, joint_names=tuple(n for n in cfg.joint_names if n))
            if cfg.joint_names and len(cfg.joint_names) != cfg.state_size:
                raise InputError(f"joint_names lists {len(cfg.joint_names)} joints but state_size is "
                                 f"{cfg.state_size}")
            rc = open_reservoir(cfg)
        except LibrEdgeTpuError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self._cfg, self._rc = cfg, rc
        self._order = JointOrder(cfg.joint_names) if cfg.joint_names else None
        self._buffer = collections.deque(maxlen=cfg.buffer_size)
        self._stats = _Stats()
        self._crash.clear()
        mtype = JointState if cfg.state_type == "joint_state" else Float64MultiArray
        self._pred_pub = output_publisher(self, mtype, "~/prediction", self._qos(cfg))
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._entities = [
            create_guarded_service(self, FitReadout, "~/fit", self._on_fit),
            create_guarded_service(self, FilePath, "~/load_readout", self._on_load),
            create_guarded_service(self, FilePath, "~/save_readout", self._on_save),
            self.create_timer(cfg.diagnostics_period, self._publish_diagnostics),
        ]
        readout = "none yet" if rc.readout is None else f"loaded from {cfg.readout}"
        self.get_logger().info(f"configured: reservoir N={rc.size} on {rc.engine.backend}, {cfg.state_size} "
                               f"inputs ({cfg.state_type} on '{cfg.state_topic}'), readout {readout}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        assert self._cfg is not None
        cfg = self._cfg
        mtype = JointState if cfg.state_type == "joint_state" else Float64MultiArray
        qos = QoSProfile(depth=cfg.state_queue, reliability=self._qos(cfg).reliability)
        self.subscribe_state(mtype, cfg.state_topic, self._on_state, qos)
        return super().on_activate(state)

    @staticmethod
    def _qos(cfg: ReservoirNodeConfig) -> QoSProfile:
        reliability = ReliabilityPolicy.BEST_EFFORT if cfg.best_effort else ReliabilityPolicy.RELIABLE
        return QoSProfile(depth=10, reliability=reliability)

    def teardown(self) -> None:
        self._fitting.join()  # a running fit uses the engine closed below
        self._drop_subscription()
        destroy_entities(self, self._entities)
        self._entities = []
        if self._pred_pub is not None:
            self.destroy_lifecycle_publisher(self._pred_pub)
        if self._diag_pub is not None:
            self.destroy_publisher(self._diag_pub)
        self._pred_pub = self._diag_pub = None
        if self._rc is not None:
            rc, self._rc = self._rc, None
            rc.engine.close()

    # ----- the state loop (companion thread) ------------------------------------------------------
    def _drop(self, counter: str, reason: str) -> None:
        setattr(self._stats, counter, getattr(self._stats, counter) + 1)
        self._stats.last_drop = reason

    def _on_state(self, msg: Any) -> None:
        cfg, rc, st = self._cfg, self._rc, self._stats
        if self._crash.cause is not None or cfg is None or rc is None:
            return
        st.states += 1
        st.rate.tick()
        try:
            x = state_vector(msg, cfg.state_type, cfg.joint_field, self._order)
        except InputError as exc:
            self._drop("missing_joints", str(exc))
            return
        if x.shape != (cfg.state_size,):
            self._drop("size_mismatch", f"state has {x.size} values, state_size is {cfg.state_size}")
            return
        if not np.isfinite(x).all():
            self._drop("invalid", describe_non_finite(x))
            return
        t0 = time.perf_counter()
        predicting = rc.readout is not None
        y = rc.step_predict(x) if predicting else rc.step(x)
        st.step_ms_total += (time.perf_counter() - t0) * 1e3
        with self._buffer_lock:
            self._buffer.append(x)
        if predicting:
            self._pred_pub.publish(self._prediction(msg, y))
            st.predictions += 1

    def _prediction(self, msg: Any, y: np.ndarray) -> Any:
        cfg = self._cfg
        values = np.asarray(y, np.float64).tolist()  # Python floats, without a per-element loop
        if cfg.state_type == "float64_multi_array":
            return Float64MultiArray(data=values)
        out = JointState(header=msg.header, name=list(cfg.joint_names) or list(msg.name)[: len(values)])
        setattr(out, cfg.joint_field, values)
        return out

    def companion_failed(self, companion: Node, exc: BaseException) -> None:
        self._crash.companion_failed(companion, exc)

    def _report_crash(self, cause: str) -> Any:
        self._publish_diagnostics(diagnostics.ERROR, cause)
        return self._diag_pub

    # ----- services (main executor) ---------------------------------------------------------------
    async def _on_fit(self, req: FitReadout.Request, resp: FitReadout.Response) -> FitReadout.Response:
        cfg, rc = self._cfg, self._rc
        if cfg is None or rc is None:
            resp.success, resp.message = False, "node is not configured"
            return resp
        if self._fitting.busy():
            resp.success, resp.message = False, "a fit is running: call again when it has answered"
            return resp
        topic = (req.topic or self.resolve_topic_name(cfg.state_topic)) if req.bag else ""
        try:
            # Reading a bag and driving the reservoir over thousands of states takes seconds: off the
            # executor, which keeps answering get_state, the other services and the diagnostics timer.
            report, source = await self._fitting.run(self, lambda: self._fit(req, topic, cfg, rc))
        except LibrEdgeTpuError as exc:
            self._stats.refused += 1
            self._stats.last_refusal = clip(exc, MESSAGE_CHARS)  # requests carry paths of any length
            resp.success, resp.message = False, f"refused, readout unchanged: {self._stats.last_refusal}"
            return resp
        self._stats.fits += 1
        resp.success = True
        resp.samples_used, resp.train_nrmse = report.samples, float(report.train_nrmse)
        resp.message = (f"fitted on {source}: {report.samples} samples after a washout of {report.washout}, "
                        f"train NRMSE {report.train_nrmse:.4f}")
        self.get_logger().info(resp.message)
        return resp

    def _fit(self, req: FitReadout.Request, topic: str, cfg: ReservoirNodeConfig, rc: Any) -> tuple[Any, str]:
        """(FitReport, where the states came from) of a ``~/fit`` request (on the fit's thread)."""
        if req.bag:
            states, skipped = read_bag_states(req.bag, topic, cfg.state_type, cfg.joint_field, self._order,
                                              cfg.state_size)
            source = f"bag {clip(req.bag)} ({skipped} messages skipped)"
        else:
            with self._buffer_lock:
                buffered = list(self._buffer)  # a copy: the loop keeps appending
            if req.samples:
                buffered = buffered[-int(req.samples):]
            states = np.array(buffered) if buffered else np.zeros((0, cfg.state_size))
            source = f"the last {len(states)} states"
        if len(states) < 2:
            raise InputError(f"fit needs at least 2 states, {source} gave {len(states)}")
        return rc.fit(states[:-1], states[1:]), source

    def _on_load(self, req: FilePath.Request, resp: FilePath.Response) -> FilePath.Response:
        return self._file_op(resp, lambda rc: rc.load_readout(req.path, outputs=rc.config.input_dim),
                             f"loaded readout {clip(req.path)}")

    def _on_save(self, req: FilePath.Request, resp: FilePath.Response) -> FilePath.Response:
        return self._file_op(resp, lambda rc: rc.save_readout(req.path), f"saved readout to {clip(req.path)}")

    def _file_op(self, resp: Any, operation: Any, done: str) -> Any:
        rc = self._rc
        if rc is None:
            resp.success, resp.message = False, "node is not configured"
            return resp
        try:
            operation(rc)
        except (LibrEdgeTpuError, OSError) as exc:
            self._stats.refused += 1
            self._stats.last_refusal = clip(exc, MESSAGE_CHARS)
            resp.success, resp.message = False, f"refused, readout unchanged: {self._stats.last_refusal}"
            return resp
        resp.success, resp.message = True, done
        return resp

    # ----- diagnostics ----------------------------------------------------------------------------
    def _publish_diagnostics(self, level: int | None = None, message: str = "") -> None:
        cfg, rc, pub, st = self._cfg, self._rc, self._diag_pub, self._stats
        if pub is None or cfg is None or rc is None:
            return
        drops = st.invalid + st.size_mismatch + st.missing_joints
        if level is None:
            if drops > st.drops_reported:
                level, message = diagnostics.WARN, (f"{drops - st.drops_reported} state(s) dropped since the "
                                                    f"last report: {st.last_drop}")
            elif rc.readout is None:
                level, message = diagnostics.OK, "no readout yet: call ~/fit or ~/load_readout"
            else:
                level, message = diagnostics.OK, "predicting"
            st.drops_reported = drops
        stepped = st.states - drops
        readout = rc.readout
        values = {
            "reservoir": f"N={rc.size}, {cfg.state_size} inputs, seed {cfg.seed}",
            "backend": rc.engine.backend,
            "states": st.states, "predictions": st.predictions, "state_rate_hz": st.rate.rate(),
            "dropped_nan_inf": st.invalid, "dropped_size": st.size_mismatch,
            "dropped_missing_joints": st.missing_joints,
            "step_ms": st.step_ms_total / stepped if stepped else float("nan"),
            "buffered": len(self._buffer),
            "readout_samples": readout.samples if readout else 0,
            "readout_train_nrmse": readout.train_nrmse if readout else float("nan"),
            "fits": st.fits, "refused": st.refused, "last_refusal": st.last_refusal,
        }
        status = diagnostics.status(f"{self.get_fully_qualified_name()}: reservoir",
                                    cfg.device or cfg.backend, level, message, values)
        pub.publish(diagnostics.array(self.get_clock().now().to_msg(), [status]))


def main(args: list[str] | None = None) -> int:
    """``ros2 run libredgetpu_ros reservoir_node`` / ``python -m libredgetpu_ros.ros.reservoir.node``."""
    return run_lifecycle_node_main(ReservoirNode, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
