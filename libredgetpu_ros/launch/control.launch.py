"""Launch the adaptive control node as a lifecycle node that configures and activates itself.

Usage (a ROS 2 install, e.g. Kilted from apt, or the venv after `source tools/env.sh`):

    ros2 launch libredgetpu_ros control.launch.py
    ros2 launch libredgetpu_ros control.launch.py params_file:=/path/to/control.yaml \
        state_topic:=/joint_states namespace:=arm

``autostart:=false`` leaves the node unconfigured so a lifecycle manager (or a planner that preloads weights
first) drives the transitions.
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
    default_params = os.path.join(get_package_share_directory("libredgetpu_ros"), "config", "control.yaml")
    params_file = LaunchConfiguration("params_file")
    autostart = LaunchConfiguration("autostart")

    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="control_node",
        name="control_node",
        namespace=LaunchConfiguration("namespace"),
        parameters=[params_file],
        remappings=[("state", LaunchConfiguration("state_topic"))],
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
                              description="YAML parameters of control_node"),
        DeclareLaunchArgument("namespace", default_value="", description="node namespace"),
        DeclareLaunchArgument("state_topic", default_value="state",
                              description="topic the state vector arrives on (remaps 'state')"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="configure and activate on start"),
        node,
        activate_when_configured,
        configure,
    ])
