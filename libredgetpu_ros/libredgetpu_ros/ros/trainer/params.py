"""The trainer node's parameters (one table: descriptors, validation, config/trainer.yaml, docs) and the model
they describe."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from libredgetpu_ros.ros.params import ParamSpec, ParamTable
from libredgetpu_ros.teamtensor.model import ModelSpec, linear, plain
from libredgetpu_ros.teamtensor.wire import FRAMINGS, LayerCode, Metric

OBJECTIVES = {"mse": [Metric.MSE, Metric.MAE], "cross_entropy": [Metric.CROSS_ENTROPY, Metric.ACCURACY]}

PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec("worker_host", "127.0.0.1", "Team Tensor worker address"),
    ParamSpec("worker_port", 18500, "Team Tensor worker UDP port", range=(1, 65535)),
    ParamSpec("framing", "reliable", "reliable (integrity tag, sessions, exactly once) or seed (the seed's "
              "bytes, best effort); the worker's --framing", choices=FRAMINGS),
    ParamSpec("value_dtype", ">f4", "tensor value type on the wire, a NumPy dtype; the worker's "
              "--value-dtype"),
    ParamSpec("auth_key_file", "", "file whose first line is the worker's shared key (--key): HMAC tags "
              "instead of CRC-32; '' = none"),
    ParamSpec("hello_broadcast", False, "send HELLO with SO_BROADCAST (worker_host a broadcast address); the "
              "first worker that answers is used"),
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
    ParamSpec("set_weights_service", "control_node/set_weights", "the control node's SetWeights service "
              "(relative: resolved in this node's namespace)"),
    ParamSpec("engine_name", "", "engine name in set_weights requests ('' = the node's only engine)"),
    ParamSpec("connect_timeout", 10.0, "s to wait for the worker's HELLO answer at configure",
              range=(0.05, 3600.0)),
    ParamSpec("read_timeout", 5.0, "s one read of metrics or weights from the worker may take (on the "
              "session thread: no callback waits for it)", range=(0.05, 3600.0)),
    ParamSpec("retransmit_timeout", 0.1, "s before a request to the worker is resent (grows 1.5x per try)",
              range=(0.001, 60.0)),
    ParamSpec("retries", 60, "resends of one request before it fails", range=(0, 100000)),
)


@dataclass(frozen=True)
class TrainerConfig:
    worker_host: str
    worker_port: int
    framing: str
    value_dtype: str
    auth_key_file: str
    hello_broadcast: bool
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
    read_timeout: float
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


def pushable(cfg: TrainerConfig) -> bool:
    """Only a plain Linear map trained on MSE is a controller the control node can run."""
    return cfg.hidden_size == 0 and cfg.objective == "mse"
