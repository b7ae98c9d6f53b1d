"""The pieces every launch file of this package shares (``launch/*.launch.py``).

Each launch file declares its arguments from one table, builds one ``LifecycleNode`` with its own remappings
and parameters, and, when ``autostart`` is true, takes it to ``active`` the way a lifecycle manager would:
configure, then activate once the node reports ``inactive``. Those last steps are the same for every node,
so they live here once. Under ``ros/`` because launch_ros imports rclpy (test/test_layers.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.some_substitutions_type import SomeSubstitutionsType
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition

PACKAGE = "libredgetpu_ros"

# name -> (default value, description); a None description is launch's own "no description given".
ArgumentTable = Mapping[str, tuple[str, str | None]]
AUTOSTART = LaunchConfiguration("autostart")  # every launch file's "configure and activate on start" switch


def installed_config(*parts: str) -> str:
    """Path of a file under the installed ``share/libredgetpu_ros/config`` (where ``ros2 launch`` looks)."""
    return os.path.join(get_package_share_directory(PACKAGE), "config", *parts)


def launch_arguments(table: ArgumentTable) -> list[DeclareLaunchArgument]:
    """One ``DeclareLaunchArgument`` per row of ``table``, in the table's order."""
    return [DeclareLaunchArgument(name, default_value=default, description=description)
            for name, (default, description) in table.items()]


def _change_state(node: LifecycleNode, transition: int, **action: object) -> EmitEvent:
    # The event names the node through matches_action, so it reaches this node only, whatever its name.
    event = ChangeState(lifecycle_node_matcher=matches_action(node), transition_id=transition)
    return EmitEvent(event=event, **action)


def autostarted(node: LifecycleNode,
                autostart: SomeSubstitutionsType = AUTOSTART) -> list:
    """``node`` and, when ``autostart`` evaluates true, its configure transition and a handler that activates
    it once configuring ends in ``inactive`` (a failed configure leaves it ``unconfigured``, not activated).

    The handler comes before the configure event so it is registered by the time the transition ends.
    """
    condition = IfCondition(autostart)
    activate_when_configured = OnStateTransition(
        target_lifecycle_node=node, start_state="configuring", goal_state="inactive",
        entities=[_change_state(node, Transition.TRANSITION_ACTIVATE)])
    return [node,
            RegisterEventHandler(activate_when_configured, condition=condition),
            _change_state(node, Transition.TRANSITION_CONFIGURE, condition=condition)]
