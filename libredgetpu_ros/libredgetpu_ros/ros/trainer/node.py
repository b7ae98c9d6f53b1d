"""Trainer node: a ROS Data Source for a Team Tensor worker, feeding the control node's ``set_weights``.

Samples arrive on a topic (``std_msgs/Float32MultiArray``: ``input_size`` inputs then ``output_size``
targets), are grouped into batches of ``batch_size`` and sent to the worker over UDP
(``teamtensor.DataSource`` on its own asyncio thread, see ``session.py``). The worker trains; this node
publishes the worker's metrics on ``~/metrics`` and serves the trained weights on ``~/get_weights``. When the
model is a single Linear layer whose shape matches the control node's controller, the trained weights are
pushed into ``set_weights`` every ``push_period`` seconds: the online-learning loop.

Lifecycle: ``configure`` connects to the worker (HELLO, pipeline, model upload; failure if it does not
answer) and creates publishers, the service and the set_weights client; ``activate`` subscribes and starts
the timers; ``deactivate`` stops them; ``cleanup`` disconnects.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from rclpy.lifecycle import Node as LifecycleNode
from std_msgs.msg import Float32MultiArray, MultiArrayDimension

from libredgetpu_ros.errors import LibrEdgeTpuError
from libredgetpu_ros.ros.environment import apply_localhost_only
from libredgetpu_ros.ros.params import ParamSpec, ParamTable
from libredgetpu_ros.ros.trainer.session import TrainingSession
from libredgetpu_ros.teamtensor.model import ModelSpec, linear, plain
from libredgetpu_ros.teamtensor.wire import LayerCode, Metric
from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

NODE_NAME = "trainer_node"
OBJECTIVES = {"mse": [Metric.MSE, Metric.MAE], "cross_entropy": [Metric.CROSS_ENTROPY, Metric.ACCURACY]}
CALL_TIMEOUT = 5.0  # s: longest a service callback waits for the worker

PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec("worker_host", "127.0.0.1", "Team Tensor worker address"),
    ParamSpec("worker_port", 18500, "Team Tensor worker UDP port", range=(1, 65535)),
    ParamSpec("pipeline_id", 1, "data pipeline assigned to the worker", range=(0, 65535)),
    ParamSpec("model_id", 1, "model id on the worker", range=(0, 65535)),
    ParamSpec("input_size", 3, "inputs per sample (columns of the Linear weights)", range=(1, 4096)),
    ParamSpec("output_size", 2, "targets per sample (rows of the Linear weights)", range=(1, 4096)),
    ParamSpec("hidden_size", 0, "0 = one Linear layer (pushable to set_weights); > 0 = Linear-ReLU-Linear",
              range=(0, 4096)),
    ParamSpec("objective", "mse", "loss the worker minimises (cross_entropy adds a final Softmax)",
              choices=tuple(OBJECTIVES)),
    ParamSpec("init_scale", 0.0, "standard deviation of the initial weights (0 = zeros; hidden layers need "
              "> 0)", range=(0.0, 10.0)),
    ParamSpec("seed", 0, "seed of the initial weights", range=(0, 2**31 - 1)),
    ParamSpec("samples_topic", "samples", "Float32MultiArray topic: input_size inputs then output_size "
              "targets"),
    ParamSpec("batch_size", 32, "samples per batch sent to the worker", range=(1, 65535)),
    ParamSpec("max_backlog", 8, "batches waiting for the worker before the oldest is dropped",
              range=(1, 1000)),
    ParamSpec("metrics_period", 1.0, "s between ~/metrics messages", range=(0.05, 3600.0)),
    ParamSpec("push_period", 2.0, "s between pushes of the trained weights to set_weights; 0 = never",
              range=(0.0, 3600.0)),
    ParamSpec("set_weights_service", "/control_node/set_weights", "the control node's SetWeights service"),
    ParamSpec("engine_name", "", "engine name in set_weights requests ('' = the node's only engine)"),
    ParamSpec("connect_timeout", 10.0, "s to wait for the worker's HELLO answer at configure",
              range=(0.05, 3600.0)),
    ParamSpec("retransmit_timeout", 0.1, "s before a request to the worker is resent (grows 1.5x per try)",
              range=(0.001, 60.0)),
    ParamSpec("retries", 60, "resends of one request before it fails", range=(0, 100000)),
)


@dataclass(frozen=True)
class TrainerConfig:
    worker_host: str
    worker_port: int
    pipeline_id: int
    model_id: int
    input_size: int
    output_size: int
    hidden_size: int
    objective: str
    init_scale: float
    seed: int
    samples_topic: str
    batch_size: int
    max_backlog: int
    metrics_period: float
    push_period: float
    set_weights_service: str
    engine_name: str
    connect_timeout: float
    retransmit_timeout: float
    retries: int


PARAM_TABLE = ParamTable(PARAMETERS, TrainerConfig)


def build_model(cfg: TrainerConfig) -> ModelSpec:
    """The model the worker trains, with its initial weights (seeded)."""
    rng = np.random.default_rng(cfg.seed)

    def weights(rows: int, cols: int) -> np.ndarray:
        return (rng.normal(size=(rows, cols)) * cfg.init_scale).astype(np.float32)

    if cfg.hidden_size:
        layers = [linear(weights(cfg.hidden_size, cfg.input_size)), plain(LayerCode.RELU),
                  linear(weights(cfg.output_size, cfg.hidden_size))]
    else:
        layers = [linear(weights(cfg.output_size, cfg.input_size))]
    if cfg.objective == "cross_entropy":
        layers.append(plain(LayerCode.SOFTMAX))
    return ModelSpec(layers, list(OBJECTIVES[cfg.objective]))


class TrainerNode(LifecycleNode):
    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        PARAM_TABLE.declare(self)
        self.add_on_set_parameters_callback(PARAM_TABLE.validator(lambda: self._session is not None))
        self._cfg: TrainerConfig | None = None
        self._session: TrainingSession | None = None
        self._entities: list[Any] = []  # created at configure
        self._active: list[Any] = []  # subscription and timers, while active
        self._metrics_pub: Any = None
        self._set_weights: Any = None
        self._control_weights: Any = None  # the control node's get_weights: its controller shape
        self._control_shape: tuple[int, int] | None = None
        self._x = np.zeros((0, 0), np.float32)
        self._t = np.zeros((0, 0), np.float32)
        self._filled = 0
        self.counters = {"samples": 0, "wrong_size": 0, "pushes_accepted": 0, "pushes_refused": 0,
                         "pushes_skipped": 0}
        self._push_pending = False

    # ----- lifecycle ------------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            cfg = self._cfg = PARAM_TABLE.read(self)
            model = build_model(cfg)
            self._session = TrainingSession(
                (cfg.worker_host, cfg.worker_port), model, pipeline=cfg.pipeline_id, model_id=cfg.model_id,
                max_backlog=cfg.max_backlog, timeout=cfg.retransmit_timeout, retries=cfg.retries)
            count = self._session.start(cfg.connect_timeout)
        except (LibrEdgeTpuError, TimeoutError, OSError) as exc:
            self.get_logger().error(f"configure failed: {type(exc).__name__}: {exc}")
            self._close_session()
            return TransitionCallbackReturn.FAILURE
        self._x = np.zeros((cfg.batch_size, cfg.input_size), np.float32)
        self._t = np.zeros((cfg.batch_size, cfg.output_size), np.float32)
        self._filled = 0
        self._metrics_pub = self.create_lifecycle_publisher(Float32MultiArray, "~/metrics", 10)
        self._set_weights = self.create_client(SetWeights, cfg.set_weights_service)
        if cfg.set_weights_service.endswith("set_weights"):
            self._control_weights = self.create_client(
                GetWeights, cfg.set_weights_service.removesuffix("set_weights") + "get_weights")
        self._control_shape = None
        self._entities = [self.create_service(GetWeights, "~/get_weights", self._on_get_weights)]
        self.get_logger().info(f"configured: model {cfg.model_id} ({len(model.layers)} layers, "
                               f"{cfg.objective}) on worker {cfg.worker_host}:{cfg.worker_port}, pipeline "
                               f"{cfg.pipeline_id} ({count} model(s))")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        cfg = self._cfg
        self._active = [
            self.create_subscription(Float32MultiArray, cfg.samples_topic, self._on_sample, 100),
            self.create_timer(cfg.metrics_period, self._publish_metrics),
        ]
        if cfg.push_period > 0:
            self._active.append(self.create_timer(cfg.push_period, self._push_weights))
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._drop(self._active)
        self._active = []
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def teardown(self) -> None:
        """Drop every entity and disconnect from the worker (idempotent)."""
        self._drop(self._active + self._entities)
        self._active, self._entities = [], []
        for client in (self._set_weights, self._control_weights):
            if client is not None:
                self.destroy_client(client)
        self._set_weights = self._control_weights = None
        if self._metrics_pub is not None:
            self.destroy_lifecycle_publisher(self._metrics_pub)
            self._metrics_pub = None
        self._close_session()

    def _drop(self, entities: list[Any]) -> None:
        for entity in entities:
            if hasattr(entity, "cancel"):
                entity.cancel()
                self.destroy_timer(entity)
            elif hasattr(entity, "topic_name"):
                self.destroy_subscription(entity)
            else:
                self.destroy_service(entity)

    def _close_session(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            session.stop()

    # ----- samples -> batches ---------------------------------------------------------------------

    def _on_sample(self, msg: Float32MultiArray) -> None:
        cfg, session = self._cfg, self._session
        values = np.frombuffer(msg.data, np.float32) if len(msg.data) else np.zeros(0, np.float32)
        if values.size != cfg.input_size + cfg.output_size:
            self.counters["wrong_size"] += 1
            if self.counters["wrong_size"] == 1:
                self.get_logger().warning(f"sample of {values.size} values dropped: expected input_size + "
                                          f"output_size = {cfg.input_size + cfg.output_size} (counted)")
            return
        self._x[self._filled] = values[:cfg.input_size]
        self._t[self._filled] = values[cfg.input_size:]
        self._filled += 1
        self.counters["samples"] += 1
        if self._filled == cfg.batch_size and session is not None:
            session.submit(self._x.copy(), self._t.copy())
            self._filled = 0

    # ----- metrics, weights -----------------------------------------------------------------------

    def _publish_metrics(self) -> None:
        session, pub = self._session, self._metrics_pub
        if session is None or pub is None or session.stats.batches_sent == 0:
            return
        try:
            metrics = session.metrics(CALL_TIMEOUT)
        except (LibrEdgeTpuError, TimeoutError) as exc:
            self.get_logger().warning(f"metrics not available: {exc}")
            return
        stats = session.stats
        names = ["batches_sent", "samples_sent", "batches_dropped", "batches_failed",
                 *(m.name.lower() for m in metrics)]
        values = [stats.batches_sent, stats.samples_sent, stats.batches_dropped, stats.batches_failed,
                  *metrics.values()]
        msg = Float32MultiArray()
        msg.layout.dim = [MultiArrayDimension(label=",".join(names), size=len(values), stride=len(values))]
        msg.data = [float(v) for v in values]
        pub.publish(msg)

    def _linear_weights(self) -> tuple[np.ndarray, np.ndarray, str]:
        """(weights, bias, note) of the trained model's last Linear layer, fetched from the worker."""
        model = self._session.trained_model(CALL_TIMEOUT)
        linears = [ly for ly in model.layers if ly.code == LayerCode.LINEAR]
        note = "" if len(model.layers) == 1 else f"last Linear of {len(model.layers)} layers"
        return linears[-1].weights, linears[-1].bias, note

    def _on_get_weights(self, req: GetWeights.Request, resp: GetWeights.Response) -> GetWeights.Response:
        if self._session is None:
            resp.success, resp.message = False, "not configured"
            return resp
        try:
            weights, bias, note = self._linear_weights()
        except (LibrEdgeTpuError, TimeoutError) as exc:
            resp.success, resp.message = False, f"worker did not return the model: {exc}"
            return resp
        resp.success, resp.message = True, note
        resp.rows, resp.cols = weights.shape
        resp.data = weights.astype(np.float32).ravel().tolist()
        resp.bias = bias.astype(np.float32).tolist()
        resp.version = self._session.stats.batches_sent
        return resp

    def _push_weights(self) -> None:
        cfg, session, client = self._cfg, self._session, self._set_weights
        if session is None or client is None or self._push_pending or session.stats.batches_sent == 0:
            return
        if cfg.hidden_size or cfg.objective != "mse":
            self.counters["pushes_skipped"] += 1  # only a plain Linear map is a controller
            return
        if not client.service_is_ready():
            self.counters["pushes_skipped"] += 1
            return
        if not self._shape_matches():
            return
        try:
            weights, bias, _ = self._linear_weights()
        except (LibrEdgeTpuError, TimeoutError) as exc:
            self.get_logger().warning(f"no weights to push: {exc}")
            return
        req = SetWeights.Request()
        req.engine = cfg.engine_name
        req.rows, req.cols = weights.shape
        req.data = weights.ravel().tolist()
        req.bias = bias.tolist()
        if hasattr(req, "request_id"):  # idempotency token where the interface has one
            req.request_id = f"{self.get_fully_qualified_name()}:{session.stats.batches_sent}"
        self._push_pending = True
        client.call_async(req).add_done_callback(self._on_pushed)

    def _shape_matches(self) -> bool:
        """Whether the model's Linear shape is the control node's controller (asked once, asynchronously)."""
        cfg, probe = self._cfg, self._control_weights
        if probe is None:
            return True  # a service name without a get_weights twin: let set_weights judge
        if self._control_shape is None:
            if probe.service_is_ready() and not self._push_pending:
                self._push_pending = True
                req = GetWeights.Request()
                req.engine = cfg.engine_name
                probe.call_async(req).add_done_callback(self._on_control_shape)
            return False
        if self._control_shape == (cfg.output_size, cfg.input_size):
            return True
        self.counters["pushes_skipped"] += 1
        if self.counters["pushes_skipped"] == 1:
            self.get_logger().error(
                f"trained weights are {cfg.output_size}×{cfg.input_size} (output_size×input_size) but the "
                f"controller is {self._control_shape[0]}×{self._control_shape[1]} (command_size×state_size): "
                "they are not pushed (counted)")
        return False

    def _on_control_shape(self, future: Any) -> None:
        self._push_pending = False
        try:
            resp = future.result()
        except Exception as exc:  # rclpy hands back whatever the call raised: log it, ask again later
            self.get_logger().warning(f"control node get_weights failed: {exc}")
            return
        if resp is not None and resp.success:
            self._control_shape = (int(resp.rows), int(resp.cols))

    def _on_pushed(self, future: Any) -> None:
        self._push_pending = False
        try:
            resp = future.result()
        except Exception as exc:  # rclpy hands back whatever the call raised: log and count it
            resp = None
            self.get_logger().error(f"set_weights call failed: {exc}")
        if resp is not None and resp.accepted:
            self.counters["pushes_accepted"] += 1
            return
        self.counters["pushes_refused"] += 1
        self.get_logger().warning(f"set_weights refused the trained weights: "
                                  f"{'no answer' if resp is None else resp.message}")


def main(args: list[str] | None = None) -> int:
    """``ros2 run libredgetpu_ros trainer_node`` / ``python -m libredgetpu_ros.ros.trainer.node``."""
    apply_localhost_only()
    rclpy.init(args=args)
    node = TrainerNode()
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.teardown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
