"""Launch the adaptive control node as a lifecycle node that configures and activates itself.

Usage (a ROS 2 install, e.g. Kilted from apt, or the venv after `source tools/env.sh`):

    ros2 launch libredgetpu_ros control.launch.py
    ros2 launch libredgetpu_ros control.launch.py params_file:=/path/to/control.yaml \
        state_topic:=/joint_states namespace:=arm
    ros2 launch libredgetpu_ros control.launch.py model:=/path/dense_512_edgetpu.tflite state_size:=12 \
        command_size:=6 require_accelerator:=true

``model`` (a ``dense_N_edgetpu.tflite``: the ``template_path`` parameter), ``template``, ``backend``,
``require_accelerator``, ``state_size``, ``command_size`` and ``initial_weights``, when given, override the
params file. ``autostart:=false`` leaves the node unconfigured so a lifecycle manager (or a planner that
preloads weights first) drives the transitions; with autostart, configure -> activate happens once, at start.
"""

from __future__ import annotations

from launch import LaunchContext, LaunchDescription
from launch.substitutions import LaunchConfiguration
from libredgetpu_ros.ros.control.params import PARAM_TABLE
from libredgetpu_ros.ros.launching import (
    PARAMS_FILE,
    argument_overrides,
    installed_config,
    lifecycle_launch,
)

OVERRIDES = ("template", "backend", "require_accelerator", "state_size", "command_size", "initial_weights")


def _parameters(context: LaunchContext) -> list:
    overrides = argument_overrides(context, PARAM_TABLE, OVERRIDES)
    model = LaunchConfiguration("model").perform(context).strip()
    if model:
        overrides["template_path"] = model
    return [PARAMS_FILE, overrides]


def generate_launch_description() -> LaunchDescription:
    return lifecycle_launch("control_node", {
        "params_file": (installed_config("control.yaml"), "YAML parameters of control_node"),
        "namespace": ("", "node namespace"),
        "state_topic": ("state", "topic the state vector arrives on (remaps 'state')"),
        "model": ("", "dense_N_edgetpu.tflite template (parameter template_path); '' = the params file's"),
        "template": ("", "Dense(N) template size N (256, 512, 1024 ship); '' = the params file's"),
        "backend": ("", "auto | cpu | edgetpu | tpulang; '' = the params file's"),
        "require_accelerator": ("", "true: configure fails without an accelerator; '' = the params file's"),
        "state_size": ("", "controller inputs; '' = the params file's"),
        "command_size": ("", "controller outputs; '' = the params file's"),
        "initial_weights": ("", ".npy weights loaded at configure; '' = the params file's"),
        "autostart": ("true", "configure and activate on start (once)"),
    }, _parameters, name="control_node", remappings=[("state", LaunchConfiguration("state_topic"))])
