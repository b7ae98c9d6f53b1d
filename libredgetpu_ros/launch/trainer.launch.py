"""Launch the Team Tensor trainer node as a lifecycle node that configures and activates itself.

Usage (on a ROS 2 install with launch_ros, e.g. Kilted from apt), with a worker running
(`libredgetpu-ros tt-worker` or a board) and the control node up (control.launch.py):

    ros2 launch libredgetpu_ros trainer.launch.py
    ros2 launch libredgetpu_ros trainer.launch.py params_file:=/path/to/trainer.yaml \
        samples_topic:=/experience namespace:=arm

Configure connects to the worker and uploads the model; it fails if the worker does not answer within
``connect_timeout``. ``autostart:=false`` leaves the node unconfigured for a lifecycle manager.
Tested by test/launch/test_trainer_launch.py.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from libredgetpu_ros.ros.launching import autostarted, installed_config, launch_arguments


def generate_launch_description() -> LaunchDescription:
    arguments = launch_arguments({
        "params_file": (installed_config("trainer.yaml"), "YAML parameters of trainer_node"),
        "namespace": ("", "node namespace"),
        "samples_topic": ("samples", "topic the training samples arrive on (remaps 'samples')"),
        "autostart": ("true", "configure, then activate once configured"),
    })
    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="trainer_node",
        name="trainer_node",
        namespace=LaunchConfiguration("namespace"),
        parameters=[LaunchConfiguration("params_file")],
        remappings=[("samples", LaunchConfiguration("samples_topic"))],
        output="screen",
    )
    return LaunchDescription([*arguments, *autostarted(node)])
