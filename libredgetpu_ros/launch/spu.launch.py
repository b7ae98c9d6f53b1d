"""SPU lifecycle node (Femtosense) for a real ROS 2 install (launch/launch_ros are not available as wheels).

    ros2 launch libredgetpu_ros spu.launch.py params_file:=/path/spu.yaml namespace:=audio autostart:=true

The default parameters run the design seed's example (A = B + latchedC) on the NumPy reference runner from
the installed config folder. With autostart the launch emits configure, then activate once the node reports
``inactive``; without it: ``ros2 lifecycle set /spu configure``.
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
    config = os.path.join(get_package_share_directory("libredgetpu_ros"), "config")
    args = [
        DeclareLaunchArgument("params_file", default_value=os.path.join(config, "spu.yaml"),
                              description="node parameters (config/spu.yaml)"),
        DeclareLaunchArgument("iospec", default_value=os.path.join(config, "spu_add_latched.iospec.yaml"),
                              description="IOSpec YAML of the SPU program"),
        DeclareLaunchArgument("program", default_value=os.path.join(config, "spu_add_latched.program.yaml"),
                              description="reference runner program (runner:=reference)"),
        DeclareLaunchArgument("runner", default_value="reference",
                              description="reference | femtodriver | fqir"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the node and topics"),
        DeclareLaunchArgument("node_name", default_value="spu"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="configure and activate at start-up"),
    ]
    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="spu_node",
        name=LaunchConfiguration("node_name"),
        namespace=LaunchConfiguration("namespace"),
        # The file first, then the paths given here (absolute ones from the installed config by default).
        parameters=[LaunchConfiguration("params_file"),
                    {"iospec": LaunchConfiguration("iospec"), "program": LaunchConfiguration("program"),
                     "runner": LaunchConfiguration("runner")}],
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
