"""Reservoir (echo state network) lifecycle node on a state topic: `ros2 launch` on a robot, or from the venv
after `source tools/env.sh`.

    ros2 launch libredgetpu_ros reservoir.launch.py params_file:=/path/reservoir.yaml \
        state_topic:=/joint_states namespace:=arm

With autostart the launch configures the node, then activates it once it reports ``inactive``; fit its
readout with ``ros2 service call /reservoir/fit libredgetpu_ros_interfaces/srv/FitReadout``.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from libredgetpu_ros.ros.launching import autostarted, installed_config, launch_arguments


def generate_launch_description() -> LaunchDescription:
    arguments = launch_arguments({
        "params_file": (installed_config("reservoir.yaml"), "node parameters (config/*.yaml)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("reservoir", None),
        "state_topic": ("state", "state topic remapped onto the node's input ('state')"),
        "autostart": ("true", "configure and activate at start-up"),
    })
    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="reservoir_node",
        name=LaunchConfiguration("node_name"),
        namespace=LaunchConfiguration("namespace"),
        parameters=[LaunchConfiguration("params_file")],
        remappings=[("state", LaunchConfiguration("state_topic"))],
        output="screen",
    )
    return LaunchDescription([*arguments, *autostarted(node)])
