"""Perception lifecycle node: `ros2 launch` on a robot, or from the venv after `source tools/env.sh`.

    ros2 launch libredgetpu_ros perception.launch.py params_file:=/path/perception_pose.yaml \
        namespace:=front_camera image:=/front_camera/image_raw autostart:=true

With autostart the launch emits the lifecycle transitions configure, then activate once the node reports
``inactive``. Without it, drive it yourself: ``ros2 lifecycle set /front_camera/perception configure``.
"""

from __future__ import annotations

import os

import launch
import lifecycle_msgs.msg
from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState


def generate_launch_description() -> launch.LaunchDescription:
    default_params = os.path.join(get_package_share_directory("libredgetpu_ros"), "config",
                                  "perception_pose.yaml")
    args = [
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="node parameters (config/perception_*.yaml)"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the node and topics"),
        DeclareLaunchArgument("node_name", default_value="perception"),
        DeclareLaunchArgument("image", default_value="image_raw",
                              description="camera topic remapped onto the node's input topic"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="configure and activate at start-up"),
    ]
    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="perception_node",
        name=LaunchConfiguration("node_name"),
        namespace=LaunchConfiguration("namespace"),
        parameters=[LaunchConfiguration("params_file")],
        remappings=[("image_raw", LaunchConfiguration("image")),
                    ("image_raw/compressed", [LaunchConfiguration("image"), "/compressed"])],
        output="screen",
    )
    autostart = IfCondition(LaunchConfiguration("autostart"))
    configure = EmitEvent(
        event=ChangeState(lifecycle_node_matcher=matches_action(node),
                          transition_id=lifecycle_msgs.msg.Transition.TRANSITION_CONFIGURE),
        condition=autostart,
    )
    activate_when_inactive = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=node, start_state="configuring", goal_state="inactive",
            entities=[EmitEvent(event=ChangeState(
                lifecycle_node_matcher=matches_action(node),
                transition_id=lifecycle_msgs.msg.Transition.TRANSITION_ACTIVATE))],
        ),
        condition=autostart,
    )
    return launch.LaunchDescription([*args, node, activate_when_inactive, configure])
