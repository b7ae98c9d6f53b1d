"""SPU lifecycle node (Femtosense) for a real ROS 2 install (launch/launch_ros are not available as wheels).

    ros2 launch libredgetpu_ros spu.launch.py        # the design seed's example on the reference runner
    ros2 launch libredgetpu_ros spu.launch.py params_file:=/path/spu.yaml namespace:=audio
    ros2 launch libredgetpu_ros spu.launch.py params_file:=/path/spu.yaml iospec:=/path/model.iospec.yaml

Without ``params_file`` the installed ``config/spu.yaml`` runs with the installed example IOSpec and program
(A = B + latchedC). ``iospec`` / ``program`` / ``runner``, when given, override what the params file says.
With autostart the launch emits configure, then activate once the node reports ``inactive``; without it:
``ros2 lifecycle set /spu configure``.
"""

from __future__ import annotations

import os

import launch
import lifecycle_msgs.msg
from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState


def _node_and_transitions(context: launch.LaunchContext) -> list:
    config = os.path.join(get_package_share_directory("libredgetpu_ros"), "config")
    params_file = LaunchConfiguration("params_file").perform(context)
    overrides = {k: LaunchConfiguration(k).perform(context) for k in ("iospec", "program", "runner")}
    overrides = {k: v for k, v in overrides.items() if v}
    if not params_file:  # the example: absolute paths of the installed files
        params_file = os.path.join(config, "spu.yaml")
        overrides.setdefault("iospec", os.path.join(config, "spu_add_latched.iospec.yaml"))
        overrides.setdefault("program", os.path.join(config, "spu_add_latched.program.yaml"))
    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="spu_node",
        name=LaunchConfiguration("node_name"),
        namespace=LaunchConfiguration("namespace"),
        parameters=[params_file, overrides],
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
    return [node, activate_when_inactive, configure]


def generate_launch_description() -> launch.LaunchDescription:
    args = [
        DeclareLaunchArgument("params_file", default_value="",
                              description="node parameters (config/spu.yaml); '' = the installed example"),
        DeclareLaunchArgument("iospec", default_value="", description="IOSpec YAML (overrides params_file)"),
        DeclareLaunchArgument("program", default_value="",
                              description="reference runner program (overrides params_file)"),
        DeclareLaunchArgument("runner", default_value="",
                              description="reference | femtodriver | fqir (overrides params_file)"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the node and topics"),
        DeclareLaunchArgument("node_name", default_value="spu"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="configure and activate at start-up"),
    ]
    return launch.LaunchDescription([*args, OpaqueFunction(function=_node_and_transitions)])
