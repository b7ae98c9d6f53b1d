"""Launch the Team Tensor trainer node as a lifecycle node that configures and activates itself.

Usage (on a ROS 2 install with launch_ros, e.g. Kilted from apt), with a worker running
(`libredgetpu-ros tt-worker` or a board) and the control node up (control.launch.py):

    ros2 launch libredgetpu_ros trainer.launch.py
    ros2 launch libredgetpu_ros trainer.launch.py params_file:=/path/to/trainer.yaml \
        samples_topic:=/experience namespace:=arm worker_host:=10.0.0.7 worker_port:=18500

``worker_host`` / ``worker_port`` / ``set_weights_service`` / ``framing``, when given, override what the
params file says. The default ``set_weights_service`` (``control_node/set_weights``) is relative, so with
``namespace:=arm`` it reaches the control node launched with the same namespace (``/arm/control_node``).
Configure connects to the worker and uploads the model; it fails if the worker does not answer within
``connect_timeout``. ``autostart:=false`` leaves the node unconfigured for a lifecycle manager.
Tested by test/launch/test_trainer_launch.py.
"""

from __future__ import annotations

from launch import LaunchContext, LaunchDescription
from launch.substitutions import LaunchConfiguration
from libredgetpu_ros.ros.launching import PARAMS_FILE, installed_config, lifecycle_launch

OVERRIDES = ("worker_host", "worker_port", "set_weights_service", "framing")


def _parameters(context: LaunchContext) -> list:
    overrides: dict[str, str | int] = {}
    for name in OVERRIDES:
        value = LaunchConfiguration(name).perform(context)
        if value:
            overrides[name] = int(value) if name == "worker_port" else value
    return [PARAMS_FILE, overrides]


def generate_launch_description() -> LaunchDescription:
    return lifecycle_launch("trainer_node", {
        "params_file": (installed_config("trainer.yaml"), "YAML parameters of trainer_node"),
        "namespace": ("", "node namespace"),
        "samples_topic": ("samples", "topic the training samples arrive on (remaps 'samples')"),
        "worker_host": ("", "Team Tensor worker address (overrides params_file)"),
        "worker_port": ("", "Team Tensor worker UDP port (overrides params_file)"),
        "set_weights_service": ("", "the control node's SetWeights service (overrides params_file)"),
        "framing": ("", "reliable | seed (overrides params_file; the worker's --framing)"),
        "autostart": ("true", "configure, then activate once configured"),
    }, _parameters, name="trainer_node", remappings=[("samples", LaunchConfiguration("samples_topic"))])
