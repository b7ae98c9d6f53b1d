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

import os
from typing import Any

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration as Arg
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition


def generate_launch_description() -> LaunchDescription:
    config = os.path.join(get_package_share_directory("libredgetpu_ros"), "config")
    arguments = {  # name: (default, description)
        "params_file": (os.path.join(config, "trainer.yaml"), "YAML parameters of trainer_node"),
        "namespace": ("", "node namespace"),
        "samples_topic": ("samples", "topic the training samples arrive on (remaps 'samples')"),
        "autostart": ("true", "configure, then activate once configured"),
    }
    node = LifecycleNode(package="libredgetpu_ros", executable="trainer_node", name="trainer_node",
                         namespace=Arg("namespace"), parameters=[Arg("params_file")],
                         remappings=[("samples", Arg("samples_topic"))], output="screen")

    def change(transition: int, **action: Any) -> EmitEvent:  # a lifecycle transition of this node
        event = ChangeState(lifecycle_node_matcher=matches_action(node), transition_id=transition)
        return EmitEvent(event=event, **action)

    autostart = IfCondition(Arg("autostart"))
    activate_when_configured = OnStateTransition(target_lifecycle_node=node, start_state="configuring",
                                                 goal_state="inactive",
                                                 entities=[change(Transition.TRANSITION_ACTIVATE)])
    return LaunchDescription([
        *(DeclareLaunchArgument(name, default_value=default, description=text)
          for name, (default, text) in arguments.items()),
        node,
        RegisterEventHandler(activate_when_configured, condition=autostart),
        change(Transition.TRANSITION_CONFIGURE, condition=autostart),
    ])
