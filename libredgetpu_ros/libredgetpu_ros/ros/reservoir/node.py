"""Reservoir node: a state topic in, the one-step-ahead prediction out, the readout fitted on the robot.

Every state (``sensor_msgs/JointState`` or ``std_msgs/Float64MultiArray``, parameter ``state_type``) advances
a :class:`~libredgetpu_ros.robotics.reservoir.ReservoirComputer` (``W_res x`` on the MatMul engine: Edge TPU
or CPU twin); once a readout exists, the prediction of the next state is published on ``~/prediction`` with
the same message type (a JointState prediction carries the input's header: its stamp and frame). Every
activate (the first after configure as much as one after a pause) starts the state from zero and holds
predictions back for ``washout`` states (diagnostics ``warming_up``): a state that has seen fewer inputs is in
the transient a fit drops, and the state from before a pause no longer leads to the next input.

Services: ``~/fit`` (FitReadout: the last N buffered states, or a bag's state topic; the readout maps each
state to the next; read and fitted on a thread of its own, ``services.OffExecutor``, so the executor keeps
answering ``get_state`` and the other services meanwhile; one fit at a time; a teardown cancels it,
``fit_run``), ``~/load_readout`` / ``~/save_readout`` (FilePath, main executor). A refused fit or load (too
few samples, NaN, another reservoir's file) answers ``success: false`` with the reason and keeps the previous
readout.

Bad states are dropped and counted as the control node does (its ``JointOrder`` and ``describe_non_finite``):
NaN/inf values, a wrong number of values, missing joints; diagnostics WARN with the last cause. The lifecycle
is the shared skeleton (``ros/lifecycle.py`` ``ManagedNode``): the state subscription is in the node's
data-path callback group, spun on an executor thread of its own (``ros/spinning.py``); a state in flight
when the node deactivates or cleans up finishes before the engine is closed (``ManagedNode``'s data-path
lock); an unexpected exception there takes the node through ``on_error`` (``spinning.CompanionFault``). The
reservoir is deterministic (seeded), so a bag replayed into the node gives exactly what running the reservoir
over the bag offline gives.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import threading
import time
from typing import Any

import numpy as np
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from libredgetpu_ros import jit
from libredgetpu_ros.errors import InputError, LibrEdgeTpuError
from libredgetpu_ros.robotics.reservoir import MAX_MAGNITUDE
from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.control.codec import JointOrder, describe_non_finite
from libredgetpu_ros.ros.data_guard import STOP_HURRIED
from libredgetpu_ros.ros.lifecycle import ManagedNode
from libredgetpu_ros.ros.params import dense_stream
from libredgetpu_ros.ros.reservoir.fit_run import FitCancelled, FitRun
from libredgetpu_ros.ros.reservoir.params import PARAM_TABLE, ReservoirNodeConfig
from libredgetpu_ros.ros.reservoir.states import read_bag_states, state_vector
from libredgetpu_ros.ros.services import MESSAGE_CHARS, OffExecutor, create_guarded_service
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main
from libredgetpu_ros.textdata import clip
from libredgetpu_ros_interfaces.srv import FilePath, FitReadout

NODE_NAME = "reservoir"
# A fit holds the reservoir's states and the readout's features, float64, for every step: (2N + M + 1) * 8
# bytes a step (N = 1024: 16 KiB; an hour of 100 Hz states: 5.9 GB, which the OOM killer answered by ending
# the node). Fits above are refused, naming the numbers.
MAX_FIT_BYTES = 1 << 30


def fit_bytes(steps: int, inputs: int, units: int) -> int:
    """What a fit of ``steps`` states holds (see ``MAX_FIT_BYTES``)."""
    return steps * (2 * units + inputs + 1) * 8


@dataclasses.dataclass
class _Stats:
    states: int = 0
    predictions: int = 0
    invalid: int = 0  # NaN/inf states dropped
    out_of_range: int = 0  # finite states beyond MAX_MAGNITUDE (a sensor fault): the reservoir refuses them
    size_mismatch: int = 0
    missing_joints: int = 0
    last_drop: str = ""
    drops_reported: int = 0
    step_ms_total: float = 0.0
    fits: int = 0
    refused: int = 0
    last_refusal: str = ""
    rate: diagnostics.RateMeter = dataclasses.field(default_factory=diagnostics.RateMeter)


def open_reservoir(cfg: ReservoirNodeConfig, node: str = "") -> Any:
    """The node's reservoir from its parameters (also what offline processing of a bag uses); ``node``
    names its engine's stream on a shared Edge TPU (``params.share_stream``)."""
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig

    engine = MatMulEngine.from_template(cfg.template, backend=cfg.backend, device=cfg.device or None,
                                        rate_hz=cfg.device_share_hz, stream=dense_stream(node, cfg.template))
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


class ReservoirNode(ManagedNode):
    """Echo state network on a state topic; see the module docstring."""

    PARAMS = PARAM_TABLE
    DIAGNOSTICS_NAME = "reservoir"
    FAULT_WHAT = "state loop"
    RELEASE_NOTE = "closing the engine"

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._rc: Any = None
        self._order: JointOrder | None = None
        self._buffer: collections.deque[np.ndarray] = collections.deque()
        self._buffer_lock = threading.Lock()  # the loop appends while ~/fit copies
        self._stats = _Stats()
        self._pred_pub: Any = None
        self._fitting = OffExecutor("reservoir_fit")
        self._warm_up = 0  # states still stepped without a prediction since the activate (washout)
        self._fit_run: FitRun | None = None  # the fit running (its cancel switch), else the last one
        # ~/fit lives as long as the node (not made at configure): the answer to a fit a teardown cancelled is
        # sent after that transition returned, which would find a service destroyed by it.
        create_guarded_service(self, FitReadout, "~/fit", self._on_fit)

    # ----- lifecycle hooks (ros/lifecycle.py) -----------------------------------------------------
    def read_config(self) -> ReservoirNodeConfig:
        cfg = super().read_config()  # state_topic checked
        cfg = dataclasses.replace(cfg, joint_names=tuple(n for n in cfg.joint_names if n))
        if cfg.joint_names and len(cfg.joint_names) != cfg.state_size:
            raise InputError(f"joint_names lists {len(cfg.joint_names)} joints but state_size is "
                             f"{cfg.state_size}")
        return cfg

    def open_processor(self) -> None:
        cfg = self.cfg
        with jit.compile_notice(self.get_logger().info):  # one INFO line when the kernel cache was cold
            self._rc = open_reservoir(cfg, self.get_fully_qualified_name())
        self._order = JointOrder(cfg.joint_names) if cfg.joint_names else None
        self._buffer = collections.deque(maxlen=cfg.buffer_size)
        self._stats = _Stats()
        self._warm_up = 0

    def create_outputs(self) -> None:
        cfg = self.cfg
        mtype = JointState if cfg.state_type == "joint_state" else Float64MultiArray
        self._pred_pub = self.output(mtype, "~/prediction", self._qos(cfg))
        self.service(FilePath, "~/load_readout", self._on_load)
        self.service(FilePath, "~/save_readout", self._on_save)

    def describe(self) -> str:
        cfg, rc = self.cfg, self._rc
        readout = "none yet" if rc.readout is None else f"loaded from {cfg.readout}"
        return (f"reservoir N={rc.size} on {rc.engine.backend}, {cfg.state_size} inputs ({cfg.state_type} on "
                f"'{cfg.state_topic}'), readout {readout}")

    def create_inputs(self) -> None:
        cfg = self.cfg
        # Every activate: the state starts from zero (after a pause it holds a history that no longer leads
        # to the next input) and gives no prediction for `washout` states, the transient a fit drops: the
        # readout was never fitted on a state that had seen fewer inputs. The fit buffer keeps its states:
        # valid training data (one false pair at a pause, among buffer_size). Before the subscription: no
        # state runs meanwhile.
        self._rc.set_state(np.zeros(self._rc.size))
        self._warm_up = cfg.washout
        mtype = JointState if cfg.state_type == "joint_state" else Float64MultiArray
        qos = QoSProfile(depth=cfg.state_queue, reliability=self._qos(cfg).reliability)
        self.data_subscription(mtype, cfg.state_topic, self._on_state, qos)

    @staticmethod
    def _qos(cfg: ReservoirNodeConfig) -> QoSProfile:
        reliability = ReliabilityPolicy.BEST_EFFORT if cfg.best_effort else ReliabilityPolicy.RELIABLE
        return QoSProfile(depth=10, reliability=reliability)

    def close_processor(self) -> None:
        self._pred_pub = None
        rc, self._rc = self._rc, None
        if rc is None:
            return
        run = self._fit_run
        if run is not None and self._fitting.busy():
            # A fit uses the engine closed below: asked to stop (it checks between the bag's messages and
            # all through the fit, fit_run), then waited for as long as the data path is (deactivate_timeout,
            # less once a second stop signal hurried the process's stop, data_guard.STOP_HURRIED: launch's
            # SIGKILL follows); a fit stuck in a read (a hung mount) is left the engine, closed by it as it
            # returns.
            why = self.transition_name()
            run.cancel(why)
            timeout = self.deactivate_timeout()
            stopped, bound = STOP_HURRIED.wait(self._fitting.join, timeout)
            if not stopped and run.leave_open(rc):
                self.report_stuck(f"{why}: the running ~/fit did not stop within {bound} of its cancel; "
                                  "going on without it: its engine left open, closed by the fit as it "
                                  "returns")
                return
        rc.engine.close()

    # ----- the state loop (the data path's thread) ------------------------------------------------------
    def _drop(self, counter: str, reason: str) -> None:
        setattr(self._stats, counter, getattr(self._stats, counter) + 1)
        self._stats.last_drop = reason

    def _on_state(self, msg: Any) -> None:
        cfg, rc, st = self.cfg, self._rc, self._stats
        if cfg is None or rc is None:
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
        if np.abs(x).max(initial=0.0) > MAX_MAGNITUDE:  # step() raises on it: the node went to on_error
            self._drop("out_of_range", f"state has |value| {np.abs(x).max():.3g} > {MAX_MAGNITUDE:g} "
                                       "(a sensor fault or wrong units)")
            return
        t0 = time.perf_counter()
        warming = self._warm_up > 0
        if warming:
            self._warm_up -= 1
        predicting = rc.readout is not None and not warming
        y = rc.step_predict(x) if predicting else rc.step(x)
        st.step_ms_total += (time.perf_counter() - t0) * 1e3
        with self._buffer_lock:
            self._buffer.append(x)
        if predicting:
            self._pred_pub.publish(self._prediction(msg, y))
            st.predictions += 1

    def _prediction(self, msg: Any, y: np.ndarray) -> Any:
        cfg = self.cfg
        values = np.asarray(y, np.float64).tolist()  # Python floats, without a per-element loop
        if cfg.state_type == "float64_multi_array":
            return Float64MultiArray(data=values)
        out = JointState(header=msg.header, name=list(cfg.joint_names) or list(msg.name)[: len(values)])
        setattr(out, cfg.joint_field, values)
        return out

    # ----- services (main executor) ---------------------------------------------------------------
    async def _on_fit(self, req: FitReadout.Request, resp: FitReadout.Response) -> FitReadout.Response:
        cfg, rc = self.cfg, self._rc
        if cfg is None or rc is None:
            resp.success, resp.message = False, "node is not configured"
            return resp
        if self._fitting.busy():
            resp.success, resp.message = False, "a fit is running: call again when it has answered"
            return resp
        topic = (req.topic or self.resolve_topic_name(cfg.state_topic)) if req.bag else ""
        run = self._fit_run = FitRun()
        try:
            # Reading a bag and driving the reservoir over thousands of states takes seconds: off the
            # executor, which keeps answering get_state, the other services and the diagnostics timer.
            report, source = await self._fitting.run(self, lambda: self._fit_off(req, topic, cfg, rc, run))
        except FitCancelled as exc:
            resp.success, resp.message = False, f"{exc}, readout unchanged"
            self.get_logger().warning(f"~/fit: {resp.message}")
            return resp
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

    def _fit_off(self, req: FitReadout.Request, topic: str, cfg: ReservoirNodeConfig, rc: Any,
                 run: FitRun) -> tuple[Any, str]:
        """:meth:`_fit` on the fit's thread; then closes the engine a teardown left it (close_processor)."""
        try:
            return self._fit(req, topic, cfg, rc, run)
        finally:
            left = run.finished()
            if left is not None:
                left.engine.close()
                self.get_logger().warning(f"the ~/fit cancelled by {run.cancelled_by} returned after it went "
                                          "on without it: its engine closed now")

    def _fit(self, req: FitReadout.Request, topic: str, cfg: ReservoirNodeConfig, rc: Any,
             run: FitRun | None = None) -> tuple[Any, str]:
        """(FitReport, where the states came from) of a ``~/fit`` request (on the fit's thread); ``run``'s
        cancel is checked between the bag's messages and all through the fit (``fit_run``)."""
        check = run.check if run is not None else None
        if req.bag:
            states, skipped = read_bag_states(req.bag, topic, cfg.state_type, cfg.joint_field, self._order,
                                              cfg.state_size, check)
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
        need = fit_bytes(len(states), cfg.state_size, rc.size)
        if need > MAX_FIT_BYTES:
            most = MAX_FIT_BYTES // fit_bytes(1, cfg.state_size, rc.size)
            raise InputError(f"a fit on {len(states)} states ({source}) of a {rc.size}-unit reservoir holds "
                             f"{need / 2**20:.0f} MiB, over the node's {MAX_FIT_BYTES >> 20} MiB: at most "
                             f"{most} states (ask fewer samples, or a shorter bag)")
        return rc.fit(states[:-1], states[1:], check=check), source

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
    def hardware_id(self) -> str:
        return self.cfg.device or self.cfg.backend

    def diagnostic_status(self) -> tuple[int, str, dict[str, object]]:
        cfg, rc, st = self.cfg, self._rc, self._stats
        drops = st.invalid + st.out_of_range + st.size_mismatch + st.missing_joints
        if drops > st.drops_reported:
            level, message = diagnostics.WARN, (f"{drops - st.drops_reported} state(s) dropped since the "
                                                f"last report: {st.last_drop}")
        elif rc.readout is None:
            level, message = diagnostics.OK, "no readout yet: call ~/fit or ~/load_readout"
        elif self._warm_up:
            level, message = diagnostics.OK, (f"warming up after activate: no prediction for {self._warm_up} "
                                              "more state(s) (washout)")
        else:
            level, message = diagnostics.OK, "predicting"
        st.drops_reported = drops
        stepped = st.states - drops
        readout = rc.readout
        values = {
            "reservoir": f"N={rc.size}, {cfg.state_size} inputs, seed {cfg.seed}",
            "backend": rc.engine.backend,
            "backend_choice": rc.engine.choice,  # backends.choose's reason, as the other nodes report it
            "states": st.states, "predictions": st.predictions, "state_rate_hz": st.rate.rate(),
            "dropped_nan_inf": st.invalid, "dropped_out_of_range": st.out_of_range,
            "dropped_size": st.size_mismatch,
            "dropped_missing_joints": st.missing_joints,
            "step_ms": st.step_ms_total / stepped if stepped else float("nan"),
            "buffered": len(self._buffer),
            "warming_up": self._warm_up > 0, "states_until_valid": self._warm_up,
            "readout_samples": readout.samples if readout else 0,
            "readout_train_nrmse": readout.train_nrmse if readout else float("nan"),
            "fits": st.fits, "refused": st.refused, "last_refusal": st.last_refusal,
        }
        shared = rc.engine.shared_status()  # the engine's stream on an Edge TPU shared in this process
        values.update(diagnostics.shared_values(shared))
        level, message = diagnostics.warned(level, message, self.fallback_warnings([rc.engine.fallback])
                                            + diagnostics.shared_warnings(shared))
        return level, message, values


def main(args: list[str] | None = None) -> int:
    """``ros2 run libredgetpu_ros reservoir_node`` / ``python -m libredgetpu_ros.ros.reservoir.node``."""
    return run_lifecycle_node_main(ReservoirNode, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
