"""The reservoir node's parameters: one table -> ROS descriptors, validation, the typed config."""

from __future__ import annotations

from dataclasses import dataclass

from libredgetpu_ros.backend_kinds import BACKEND_KINDS
from libredgetpu_ros.robotics.reservoir import ACTIVATIONS
from libredgetpu_ros.ros.params import (
    DEVICE_PARAM,
    DEVICE_SHARE_PARAM,
    DIAGNOSTICS_PERIOD,
    ParamSpec,
    ParamTable,
    best_effort_param,
)

STATE_TYPES = ("joint_state", "float64_multi_array")
JOINT_FIELDS = ("position", "velocity", "effort")

PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec("backend", "auto", "where W_res x runs; auto = the Edge TPU if one is attached, else the CPU "
              "twin", choices=BACKEND_KINDS),
    DEVICE_PARAM,
    DEVICE_SHARE_PARAM,
    ParamSpec("template", 256, "reservoir size N: Dense(N) template (256, 512, 1024: models fetch dense_N)",
              range=(64, 16384)),
    ParamSpec("state_topic", "state", "state input topic (a relative name resolves in the node namespace)"),
    ParamSpec("state_type", "joint_state", "message type of the state topic (the prediction has the same "
              "type; a JointState prediction carries the input's header)", choices=STATE_TYPES),
    ParamSpec("joint_field", "position", "JointState field used as the state vector", choices=JOINT_FIELDS),
    ParamSpec("joint_names", ("",), "JointState: joint order of the state vector; [''] = message order"),
    ParamSpec("state_size", 1, "inputs M of the reservoir (values per state)", range=(1, 4096)),
    ParamSpec("seed", 0, "seed of W_res, W_in and the bias (a readout only fits the reservoir it was fitted "
              "on)", range=(0, 2**31 - 1)),
    ParamSpec("spectral_radius", 0.9, "spectral radius of W_res", range=(0.01, 10.0)),
    ParamSpec("input_scaling", 0.5, "W_in entries are uniform in [-input_scaling, input_scaling]",
              range=(0.0, 100.0)),
    ParamSpec("bias_scaling", 0.1, "bias entries are uniform in [-bias_scaling, bias_scaling]",
              range=(0.0, 100.0)),
    ParamSpec("leak_rate", 1.0, "leaky integration a: x' = (1 - a) x + a act(...)", range=(0.001, 1.0)),
    ParamSpec("activation", "tanh", "reservoir activation", choices=ACTIVATIONS),
    ParamSpec("density", 1.0, "fraction of W_res entries kept", range=(0.001, 1.0)),
    ParamSpec("washout", 100, "steps dropped at the start of a fit", range=(0, 1_000_000)),
    ParamSpec("ridge", 1e-6, "ridge regularisation of the readout fit", range=(0.0, 1e6)),
    ParamSpec("passes", 1, "engine rows per step: 1 = one int8 pass; 3-64 = dithered passes + a low pass, "
              "near the float64 network (17 at N=256, 33 at N=1024: within 2x its NRMSE)", range=(1, 64)),
    ParamSpec("buffer_size", 5000, "states kept for ~/fit", range=(10, 10_000_000)),
    ParamSpec("readout", "", "readout file (.npz from ~/save_readout or `robotics reservoir fit`) loaded at "
              "configure; empty = none until ~/fit or ~/load_readout"),
    ParamSpec("state_queue", 10, "depth of the state subscription (every state advances the reservoir, so "
              "states are queued, not replaced)", range=(1, 10000)),
    best_effort_param("state and prediction"),
    DIAGNOSTICS_PERIOD,
)


@dataclass(frozen=True)
class ReservoirNodeConfig:
    backend: str
    device: str
    device_share_hz: float
    template: int
    state_topic: str
    state_type: str
    joint_field: str
    joint_names: tuple[str, ...]
    state_size: int
    seed: int
    spectral_radius: float
    input_scaling: float
    bias_scaling: float
    leak_rate: float
    activation: str
    density: float
    washout: int
    ridge: float
    passes: int
    buffer_size: int
    readout: str
    state_queue: int
    best_effort: bool
    diagnostics_period: float


PARAM_TABLE = ParamTable(PARAMETERS, ReservoirNodeConfig)
