"""Reservoir (echo state network) lifecycle node on a state topic: `ros2 launch` on a robot, or from the venv
after `source tools/env.sh`.

    ros2 launch libredgetpu_ros reservoir.launch.py params_file:=/path/reservoir.yaml \
        state_topic:=/joint_states namespace:=arm
    ros2 launch libredgetpu_ros reservoir.launch.py state_topic:=/arm/state \
        state_type:=float64_multi_array state_size:=6 model:=/path/readout.npz

Without ``params_file`` the installed ``config/reservoir.yaml`` is used; ``model`` (the fitted readout:
the node's ``readout`` parameter), ``backend``, ``template``, ``state_type``, ``state_size`` and
``joint_field``, when given, override it. With autostart the launch configures the node, then activates it
once it reports ``inactive`` (once, at start); fit its readout with ``ros2 service call /reservoir/fit
libredgetpu_ros_interfaces/srv/FitReadout``.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.substitutions import LaunchConfiguration
from libredgetpu_ros.ros.launching import file_and_overrides, installed_config, lifecycle_launch
from libredgetpu_ros.ros.reservoir.params import PARAM_TABLE

OVERRIDES = ("model", "backend", "template", "state_type", "state_size", "joint_field")
RENAMED = {"model": "readout"}  # launch argument -> the node parameter it sets


def generate_launch_description() -> LaunchDescription:
    return lifecycle_launch("reservoir_node", {
        "params_file": (installed_config("reservoir.yaml"), "node parameters (config/*.yaml)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("reservoir", "the node's name (its services and ~/ topics)"),
        "state_topic": ("state", "state topic remapped onto the node's input ('state')"),
        "model": ("", "fitted readout (.npz from ~/save_readout; parameter readout); '' = the params file's"),
        "backend": ("", "auto | cpu | edgetpu; '' = the params file's"),
        "template": ("", "reservoir size N (Dense(N) template: 256, 512, 1024 ship); '' = the params file's"),
        "state_type": ("", "joint_state | float64_multi_array; '' = the params file's"),
        "state_size": ("", "values per state (reservoir inputs); '' = the params file's"),
        "joint_field": ("", "position | velocity | effort (JointState); '' = the params file's"),
        "autostart": ("true", "configure and activate at start-up"),
    }, file_and_overrides(PARAM_TABLE, OVERRIDES, RENAMED),
        remappings=[("state", LaunchConfiguration("state_topic"))])
