"""Launch the adaptive control node as a lifecycle node that configures and activates itself.

Usage (a ROS 2 install, e.g. Kilted from apt, or the venv after `source tools/env.sh`):

    ros2 launch libredgetpu_ros control.launch.py
    ros2 launch libredgetpu_ros control.launch.py params_file:=/path/to/control.yaml \
        state_topic:=/joint_states namespace:=arm

``autostart:=false`` leaves the node unconfigured so a lifecycle manager (or a planner that preloads weights
first) drives the transitions.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from libredgetpu_ros.ros.launching import autostarted, installed_config, launch_arguments


def generate_launch_description() -> LaunchDescription:
    arguments = launch_arguments({
        "params_file": (installed_config("control.yaml"), "YAML parameters of control_node"),
        "namespace": ("", "node namespace"),
        "state_topic": ("state", "topic the state vector arrives on (remaps 'state')"),
        "autostart": ("true", "configure and activate on start"),
    })
    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="control_node",
        name="control_node",
        namespace=LaunchConfiguration("namespace"),
        parameters=[LaunchConfiguration("params_file")],
        remappings=[("state", LaunchConfiguration("state_topic"))],
        output="screen",
    )
    return LaunchDescription([*arguments, *autostarted(node)])
