"""Trainer node: a ROS Data Source for a Team Tensor worker, feeding the control node's ``set_weights``.

Samples arrive on a topic (``std_msgs/Float32MultiArray``: ``input_size`` inputs then ``output_size``
targets), are grouped into batches of ``batch_size`` and sent to the worker over UDP
(``teamtensor.DataSource`` on its own asyncio thread, see ``session.py``). The worker trains; this node
publishes the worker's metrics on ``~/metrics`` and serves the trained weights on ``~/get_weights``. When the
model is a single Linear layer whose shape matches the control node's controller, the trained weights are
pushed into ``set_weights`` every ``push_period`` seconds (``push.py``): the online-learning loop.

Lifecycle (the shared skeleton, ``ros/lifecycle.py`` ``ManagedNode``; the samples subscription is its data
path, on an executor thread of its own): ``configure`` connects to the worker (HELLO, pipeline, model upload;
failure if it does not answer within ``connect_timeout``: the one wait on the network, since its outcome is
the transition's) and creates publishers, the service and the set_weights client; ``activate`` subscribes
and starts the timers; ``deactivate`` stops them; ``cleanup`` disconnects.

No callback waits for the worker. The metrics timer *starts* a read (metrics, and the trained model when a
push or a ``get_weights`` call wants it) on the session thread and returns; the result comes back to the
executor through a guard condition, which publishes the metrics and keeps the weights. ``~/get_weights``
answers at once from the last weights read (with their age), or "not read yet"; a tick while a read is still
out (a busy or silent worker) is skipped and counted. A fatal fault of the session thread is logged with its
traceback, published as a diagnostics ERROR and takes an active node through ``ErrorProcessing`` (the shared
``spinning.CompanionFault``; ``on_error`` disconnects, the node ends ``unconfigured`` and can be configured
again); a fault while inactive is reported at once and the next activate goes the same way.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import secrets
import sys
import time
from typing import Any, NamedTuple

import numpy as np
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from std_msgs.msg import Float32MultiArray, MultiArrayDimension

from libredgetpu_ros.errors import DeviceTimeoutError, LibrEdgeTpuError, traceback_text
from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.lifecycle import ManagedNode
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main
from libredgetpu_ros.ros.trainer.params import PARAM_TABLE, build_model, pushable
from libredgetpu_ros.ros.trainer.push import WeightPusher
from libredgetpu_ros.ros.trainer.session import Snapshot, TrainingSession
from libredgetpu_ros.teamtensor.datagrams import read_key
from libredgetpu_ros.teamtensor.wire import LayerCode, WireFormat
from libredgetpu_ros_interfaces.srv import GetWeights

__all__ = ["NODE_NAME", "PARAM_TABLE", "TrainerNode", "main"]

NODE_NAME = "trainer_node"


class TrainedWeights(NamedTuple):
    """The (last) Linear layer of the model as last read from the worker."""

    weights: np.ndarray
    bias: np.ndarray
    note: str
    version: int  # batches sent when it was read
    taken: float  # time.monotonic() of the read


def _linear_of(snapshot: Snapshot) -> TrainedWeights:
    layers = snapshot.model.layers
    last = [ly for ly in layers if ly.code == LayerCode.LINEAR][-1]
    note = "" if len(layers) == 1 else f"last Linear of {len(layers)} layers"
    return TrainedWeights(last.weights.astype(np.float32), last.bias.astype(np.float32), note,
                          snapshot.stats.batches_sent, snapshot.taken)


class TrainerNode(ManagedNode):
    PARAMS = PARAM_TABLE
    DIAGNOSTICS_NAME = "trainer"
    FAULT_WHAT = "samples path"  # the session thread's own faults are latched as "session thread failed"
    RELEASE_NOTE = "disconnected from the worker"
    # concurrent.futures.TimeoutError is TimeoutError from Python 3.11 on, a class of its own in 3.10
    CONFIGURE_ERRORS = (LibrEdgeTpuError, TimeoutError, concurrent.futures.TimeoutError, OSError)

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._session: TrainingSession | None = None
        self._metrics_pub: Any = None
        self._pusher: WeightPusher | None = None
        self._x = np.zeros((0, 0), np.float32)
        self._t = np.zeros((0, 0), np.float32)
        self._filled = 0
        self._model_layers = 0
        self._models = 0  # models on the worker, as its HELLO answer said
        self.counters = {"samples": 0, "wrong_size": 0, "non_finite": 0, "pushes_accepted": 0,
                         "pushes_replayed": 0, "pushes_refused": 0, "pushes_skipped": 0, "pushes_lost": 0,
                         "reads_skipped": 0, "reads_failed": 0}
        self._read: concurrent.futures.Future | None = None  # the read in flight on the session thread
        self._read_started = 0.0
        self._read_error = ""  # why the last read failed ('' = it did not)
        self._weights_wanted = False  # a get_weights call asked: the next read includes the model
        self._trained: TrainedWeights | None = None
        self._pushed_version: int | None = None  # batches sent at the read whose weights were pushed last
        # set_weights request ids are "<this prefix>:<version>": the random part differs per configure (and
        # per process), so a new session's pushes never repeat an id the control node answers from its
        # replay record (the batch count restarts with every session, so it alone would repeat ids).
        self._push_prefix = ""
        # Results of the session thread reach the executor through a guard condition: publishing and caching
        # happen there, never on the session thread (its faults: ManagedNode.latch).
        self._read_done = self.create_guard_condition(self._on_read_done)

    # ----- lifecycle hooks (ros/lifecycle.py) -----------------------------------------------------

    def open_processor(self) -> None:
        cfg = self.cfg
        # this configuration's counts (the one dict: WeightPusher counts into it); from 0 the first
        # wrong-size sample is warned about again (its size may be what the previous configuration took)
        self.counters.update(dict.fromkeys(self.counters, 0))
        model = build_model(cfg)
        self._model_layers = len(model.layers)
        self._session = TrainingSession(
            (cfg.worker_host, cfg.worker_port), model, pipeline=cfg.pipeline_id, model_id=cfg.model_id,
            wire=WireFormat(value_dtype=cfg.value_dtype, framing=cfg.framing),
            max_backlog=cfg.max_backlog, logger=self.get_logger(), on_fault=self._session_failed,
            timeout=cfg.retransmit_timeout, retries=cfg.retries,
            key=read_key(None, cfg.auth_key_file or None), broadcast=cfg.hello_broadcast)
        self._models = self._session.start(cfg.connect_timeout)

    def configure_failed_message(self, exc: BaseException) -> str:
        hint = ""
        if isinstance(exc, DeviceTimeoutError):  # the first launch without a worker: say what to do
            host, port = self.cfg.worker_host, self.cfg.worker_port
            hint = (f"; is a Team Tensor worker running at {host}:{port}? start one "
                    f"(`libredgetpu-ros tt-worker --host {host} --port {port}`) or point the "
                    "worker_host / worker_port parameters (launch arguments) at yours")
        return f"{type(exc).__name__}: {exc}{hint}"

    def create_outputs(self) -> None:
        cfg = self.cfg
        self._x = np.zeros((cfg.batch_size, cfg.input_size), np.float32)
        self._t = np.zeros((cfg.batch_size, cfg.output_size), np.float32)
        self._filled = 0
        self._metrics_pub = self.output(Float32MultiArray, "~/metrics", 10)
        self._push_prefix = f"{self.get_fully_qualified_name()}:{secrets.token_hex(8)}"
        if cfg.push_period > 0 and pushable(cfg):
            self._pusher = WeightPusher(self, cfg.set_weights_service, cfg.engine_name,
                                        (cfg.output_size, cfg.input_size), self.counters)
        self.service(GetWeights, "~/get_weights", self._on_get_weights)

    def describe(self) -> str:
        cfg = self.cfg
        return (f"model {cfg.model_id} ({self._model_layers} layers, {cfg.objective}) on worker "
                f"{cfg.worker_host}:{cfg.worker_port}, pipeline {cfg.pipeline_id} ({self._models} model(s)); "
                f"weights {'pushed to ' + cfg.set_weights_service if self._pusher else 'not pushed'}")

    def diagnostics_period(self) -> float | None:
        return None  # published by the metrics timer (_tick) while active

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._session.fault is not None:  # failed while inactive (reported then): start again from scratch
            self.get_logger().error("not activated: the Team Tensor session failed while inactive")
            return TransitionCallbackReturn.ERROR  # -> ErrorProcessing -> on_error -> unconfigured
        return super().on_activate(state)

    def create_inputs(self) -> None:
        cfg = self.cfg
        self.data_subscription(Float32MultiArray, cfg.samples_topic, self._on_sample, 100)
        self.timer(cfg.metrics_period, self._tick, while_active=True)
        if self._pusher is not None:
            self.timer(cfg.push_period, self._push_weights, while_active=True)

    def close_processor(self) -> None:
        """Disconnect from the worker (idempotent)."""
        if self._pusher is not None:
            self._pusher.destroy()
            self._pusher = None
        self._metrics_pub = None
        self._read, self._read_error, self._trained, self._pushed_version = None, "", None, None
        if self._session is not None:
            session, self._session = self._session, None
            session.stop()

    # ----- session faults -------------------------------------------------------------------------

    def _session_failed(self, exc: BaseException) -> None:
        """On the session thread: log with the traceback, hand over to the main executor (CompanionFault:
        diagnostics ERROR, then an active node is deactivated into ErrorProcessing)."""
        self.latch(f"session thread failed: {type(exc).__name__}: {exc}",
                   traceback_text(exc))

    @staticmethod
    def _trigger(guard: Any) -> None:
        with contextlib.suppress(Exception):  # the node is being destroyed: nobody is left to tell
            guard.trigger()

    # ----- samples -> batches ---------------------------------------------------------------------

    def _on_sample(self, msg: Float32MultiArray) -> None:
        cfg, session = self.cfg, self._session
        values = np.frombuffer(msg.data, np.float32) if len(msg.data) else np.zeros(0, np.float32)
        if values.size != cfg.input_size + cfg.output_size:
            self.counters["wrong_size"] += 1
            if self.counters["wrong_size"] == 1:
                self.get_logger().warning(f"sample of {values.size} values dropped: expected input_size + "
                                          f"output_size = {cfg.input_size + cfg.output_size} (counted)")
            return
        if not np.isfinite(values).all():  # in a batch it makes the worker refuse the whole step
            self.counters["non_finite"] += 1
            if self.counters["non_finite"] == 1:
                self.get_logger().warning("sample with NaN/inf values dropped (in a batch, the worker "
                                          "refuses the whole training step: the good samples with it); "
                                          "counted")
            return
        self._x[self._filled] = values[:cfg.input_size]
        self._t[self._filled] = values[cfg.input_size:]
        self._filled += 1
        self.counters["samples"] += 1
        if self._filled == cfg.batch_size and session is not None:
            session.submit(self._x.copy(), self._t.copy())
            self._filled = 0

    # ----- reads from the worker (started here, completed on the session thread) -------------------

    def _tick(self) -> None:
        """Metrics timer: report, then start the next read unless the last one is still out."""
        if self._session is None:
            return
        self.publish_diagnostics()
        if self._read is not None:
            self.counters["reads_skipped"] += 1  # the worker is busy (a batch) or silent: no pile-up
            return
        self._start_read()

    def _start_read(self) -> None:
        session = self._session
        want_model = self._weights_wanted or self._pusher is not None or self._trained is None
        self._weights_wanted = False
        self._read_started = time.monotonic()
        self._read = session.fetch(model=want_model, timeout=self.cfg.read_timeout)
        self._read.add_done_callback(lambda _: self._trigger(self._read_done))

    def _on_read_done(self) -> None:
        read = self._read
        if read is None or not read.done():
            return  # a read of an earlier session, or a spurious wake-up
        self._read = None
        try:
            snapshot: Snapshot = read.result()
        except Exception as exc:  # timeout, protocol error, a stopped session: the read failed, not the node
            self.counters["reads_failed"] += 1
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if not self._read_error:  # once per run of failures; diagnostics keep the count
                self.get_logger().warning(f"reading metrics/weights from the worker failed: {why} "
                                          "(retried every metrics_period; counted)")
            self._read_error = why
            return
        if self._read_error:
            self.get_logger().info("reads from the worker answer again")
            self._read_error = ""
        if snapshot.model is not None:
            self._trained = _linear_of(snapshot)
        if snapshot.metrics and self._metrics_pub is not None:
            self._publish_metrics(snapshot)

    def _publish_metrics(self, snapshot: Snapshot) -> None:
        stats, metrics = snapshot.stats, snapshot.metrics
        names = ["batches_sent", "samples_sent", "batches_dropped", "batches_failed",
                 *(m.name.lower() for m in metrics)]
        values = [stats.batches_sent, stats.samples_sent, stats.batches_dropped, stats.batches_failed,
                  *metrics.values()]
        msg = Float32MultiArray()
        msg.layout.dim = [MultiArrayDimension(label=",".join(names), size=len(values), stride=len(values))]
        msg.data = [float(v) for v in values]
        self._metrics_pub.publish(msg)

    # ----- weights: served and pushed from the last read --------------------------------------------

    def _on_get_weights(self, req: GetWeights.Request, resp: GetWeights.Response) -> GetWeights.Response:
        if self._session is None:
            resp.success, resp.message = False, "not configured"
            return resp
        trained = self._trained
        self._weights_wanted = True  # the next read brings fresh weights; start it now if none is out
        if self._read is None:
            self._start_read()
        if trained is None:
            resp.success = False
            resp.message = ("trained weights not read from the worker yet (a read is under way"
                            f"{': the last failed: ' + self._read_error if self._read_error else ''}); "
                            "ask again")
            return resp
        age = time.monotonic() - trained.taken
        resp.success = True
        resp.message = f"read from the worker {age:.2f} s ago" + (f"; {trained.note}" if trained.note else "")
        resp.rows, resp.cols = trained.weights.shape
        resp.data = trained.weights.ravel().tolist()
        resp.bias = trained.bias.tolist()
        resp.version = trained.version
        return resp

    def _push_weights(self) -> None:
        trained, pusher = self._trained, self._pusher
        if pusher is None or trained is None:
            return
        if pusher.unanswered():  # the last push went unanswered: not pushed after all, it goes again
            self._pushed_version = None
        if trained.version in (0, self._pushed_version):
            return  # nothing trained yet, or no batch since these weights went (the same weights)
        if pusher.push(trained.weights, trained.bias, f"{self._push_prefix}:{trained.version}"):
            self._pushed_version = trained.version

    # ----- diagnostics ----------------------------------------------------------------------------

    def hardware_id(self) -> str:
        return f"teamtensor udp {self.cfg.worker_host}:{self.cfg.worker_port}"

    def diagnostic_status(self) -> tuple[int, str, dict[str, object]]:
        cfg, session = self.cfg, self._session
        assert session is not None
        stats = session.stats  # ints written by the session thread: a slightly old value is fine here
        out_for = time.monotonic() - self._read_started if self._read is not None else 0.0
        if self._read_error:
            level, message = diagnostics.WARN, f"worker reads fail: {self._read_error}"
        elif out_for > 2 * cfg.metrics_period:
            level, message = diagnostics.WARN, f"worker busy or silent: a read is out for {out_for:.1f} s"
        elif stats.batches_failed:
            level = diagnostics.WARN
            message = f"{stats.batches_failed} batch(es) failed, the last: {stats.last_error}"
        else:
            level, message = diagnostics.OK, "training" if stats.batches_sent else "waiting for samples"
        values = {"batches_sent": stats.batches_sent, "samples_sent": stats.samples_sent,
                  "batches_dropped": stats.batches_dropped, "batches_failed": stats.batches_failed,
                  **self.counters}
        return level, message, values


def main(args: list[str] | None = None) -> int:
    """``ros2 run libredgetpu_ros trainer_node`` / ``python -m libredgetpu_ros.ros.trainer.node``."""
    return run_lifecycle_node_main(TrainerNode, args)


if __name__ == "__main__":
    sys.exit(main())
