"""The control node's parameters: one table -> ROS descriptors, validation, the typed config, the docs table.

``BACKENDS`` (the ``backend`` parameter's choices) are ``auto`` and every runner of the MatMul engine's
registry (``matmul.runners``: ``cpu``, ``edgetpu`` and what the families declare, e.g. ``tpulang``), so a
family that adds a runner adds a choice here without an edit.
"""

from __future__ import annotations

from dataclasses import dataclass

from libredgetpu_ros.matmul.runners import runner_names
from libredgetpu_ros.ros.params import (
    DEVICE_PARAM,
    DEVICE_SHARE_PARAM,
    DIAGNOSTICS_PERIOD,
    ParamSpec,
    ParamTable,
    best_effort_param,
)

BACKENDS = ("auto", *runner_names())
STATE_TYPES = ("float32_multi_array", "joint_state")
JOINT_FIELDS = ("position", "velocity", "effort")
CLIP_POLICIES = ("refuse", "clip")

PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec("backend", "auto", "where W·x runs; auto = the Edge TPU if one is attached, else the CPU twin",
              choices=BACKENDS),
    ParamSpec("require_accelerator", False, "fail configure unless W·x runs on the Edge TPU (no CPU "
              "fallback), for a robot that needs its speed"),
    ParamSpec("template", 256, "Dense(N) template size N (256, 512, 1024: models fetch dense_N)",
              range=(64, 16384)),
    ParamSpec("template_path", "", "a dense_N_edgetpu.tflite (beside dense_N.tflite and its .json); "
              "overrides template"),
    DEVICE_PARAM,
    DEVICE_SHARE_PARAM,
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
    best_effort_param("state and commands"),
    DIAGNOSTICS_PERIOD,
)


@dataclass(frozen=True)
class ControlConfig:
    backend: str
    require_accelerator: bool
    template: int
    template_path: str
    device: str
    device_share_hz: float
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
