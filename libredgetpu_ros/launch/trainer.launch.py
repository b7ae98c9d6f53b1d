"""Launch the Team Tensor trainer node as a lifecycle node that configures and activates itself.

Usage (on a ROS 2 install with launch_ros, e.g. Kilted from apt), with a worker running
(`libredgetpu-ros tt-worker` or a board) and the control node up (control.launch.py):

    ros2 launch libredgetpu_ros trainer.launch.py
    ros2 launch libredgetpu_ros trainer.launch.py params_file:=/path/to/trainer.yaml \
        samples_topic:=/experience namespace:=arm

Configure connects to the worker and uploads the model; it fails if the worker does not answer within
``connect_timeout``. ``autostart:=false`` leaves the node unconfigured for a lifecycle manager.
"""

from __future__ import annotations

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition


def generate_launch_description() -> LaunchDescription:
    default_params = os.path.join(get_package_share_directory("libredgetpu_ros"), "config", "trainer.yaml")
    params_file = LaunchConfiguration("params_file")
    autostart = LaunchConfiguration("autostart")

    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="trainer_node",
        name="trainer_node",
        namespace=LaunchConfiguration("namespace"),
        parameters=[params_file],
        remappings=[("samples", LaunchConfiguration("samples_topic"))],
        output="screen",
    )
    configure = EmitEvent(
        event=ChangeState(lifecycle_node_matcher=matches_action(node),
                          transition_id=Transition.TRANSITION_CONFIGURE),
        condition=IfCondition(autostart),
    )
    activate_when_configured = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=node,
            start_state="configuring",
            goal_state="inactive",
            entities=[EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(node),
                                                  transition_id=Transition.TRANSITION_ACTIVATE))],
        ),
        condition=IfCondition(autostart),
    )
    return LaunchDescription([
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="YAML parameters of trainer_node"),
        DeclareLaunchArgument("namespace", default_value="", description="node namespace"),
        DeclareLaunchArgument("samples_topic", default_value="samples",
                              description="topic the training samples arrive on (remaps 'samples')"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="configure and activate on start"),
        node,
        activate_when_configured,
        configure,
    ])
