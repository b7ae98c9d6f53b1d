"""The pieces every launch file of this package shares (``launch/*.launch.py``).

Each launch file declares its arguments from one table, builds one ``LifecycleNode`` with its own remappings
and parameters, and, when ``autostart`` is true, takes it to ``active`` the way a lifecycle manager would:
configure, then activate if that configure ends in ``inactive`` -- once, at start: a later configure (after
a supervisor's deactivate -> cleanup, or a manual one after a failed start) is left alone. Those last steps
are the same for every node, so they live here once. Also here: launch arguments that override single
parameters of the params file only when given (:func:`argument_overrides`), ``rviz:=true`` (:func:`rviz`),
the camera remappings (:data:`CAMERA_REMAPPINGS`), and :func:`lifecycle_launch`, which puts these together
into a launch file's whole description. Under ``ros/`` because launch_ros imports rclpy
(test/test_layers.py).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ament_index_python.packages import get_package_share_directory
from launch import LaunchContext, LaunchDescription
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    ExecuteProcess,
    LogInfo,
    OpaqueFunction,
    RegisterEventHandler,
)
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.some_substitutions_type import SomeSubstitutionsType
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition

from libredgetpu_ros.ros.lifetime import LAUNCH_PID_VAR

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
    """``node`` and, when ``autostart`` evaluates true, its configure transition and a one-shot handler of
    that configure's end: ``inactive`` -> activate; a failure (``unconfigured``) -> nothing. The handler is
    gone after the first configure ends, so a later configure (a supervisor's deactivate -> cleanup ->
    configure, or a manual one after a failed start) leaves the node ``inactive``.

    The handler comes before the configure event so it is registered by the time the transition ends.
    """
    condition = IfCondition(autostart)

    def activate_if_configured(context: LaunchContext) -> list:
        if context.locals.event.goal_state != "inactive":
            return []
        return [_change_state(node, Transition.TRANSITION_ACTIVATE)]

    first_configure_ended = OnStateTransition(
        target_lifecycle_node=node, start_state="configuring", handle_once=True,
        entities=[OpaqueFunction(function=activate_if_configured)])
    return [node,
            RegisterEventHandler(first_configure_ended, condition=condition),
            _change_state(node, Transition.TRANSITION_CONFIGURE, condition=condition)]


def argument_overrides(context: LaunchContext, params: Any, names: Iterable[str],
                       renamed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The launch arguments ``names`` (each named like the node parameter it sets, or as ``renamed`` maps
    it: ``{"model": "template"}`` keeps the argument name users know from the other launch files) that were
    given a non-empty value, typed by the node's ``ParamTable`` ``params`` (``true``/``false``, integers and
    floats parsed), for ``LifecycleNode(parameters=[params_file, <this>])``: a given argument wins over the
    params file, an empty one leaves the file's value. A value of the wrong type raises ``ValueError``
    naming it (launch prints it and stops)."""
    renamed = renamed or {}
    out: dict[str, Any] = {}
    for argument in names:
        name = renamed.get(argument, argument)
        text = LaunchConfiguration(argument).perform(context).strip()
        if not text:
            continue
        default = params.specs[name].default
        try:
            if isinstance(default, bool):
                if text.lower() not in ("true", "false"):
                    raise ValueError("expected true or false")
                value: Any = text.lower() == "true"
            elif isinstance(default, int):
                value = int(text)
            elif isinstance(default, float):
                value = float(text)
            else:
                value = text
        except ValueError as exc:
            raise ValueError(f"launch argument {argument}:={text!r}: {exc}") from None
        reason = params.specs[name].check(value)
        if reason:
            raise ValueError(f"launch argument {reason}" if argument == name
                             else f"launch argument {argument}:= sets parameter {reason}")
        out[name] = value
    return out


RVIZ = LaunchConfiguration("rviz")
# rviz2 (and the bringup of cameras.launch.py) ends with the launch too (ros/lifetime.py: launch leaves its
# processes running on SIGTERM).
STOP_WITH_LAUNCH = f"{shlex.quote(sys.executable)} -m libredgetpu_ros.ros.lifetime"
RVIZ_ARGUMENT: ArgumentTable = {
    "rviz": ("false", "true: also start rviz2 with this launch file's config (share/libredgetpu_ros/rviz/)"),
    "rviz_fixed_frame": ("", "rviz2's fixed frame: the camera's frame_id, which the results carry (empty: "
                             "the config's camera_optical_frame)")}


def rviz(launch_name: str, condition: SomeSubstitutionsType = RVIZ) -> OpaqueFunction:
    """Under ``rviz:=true``: rviz2 with ``share/libredgetpu_ros/rviz/<launch_name>.rviz`` when both exist,
    else a message saying what is missing (the launch goes on without it). The config rviz2 gets is a copy
    with its topics under the launch's ``namespace`` argument (ros/rviz_config.py). Declare the argument with
    ``launch_arguments(RVIZ_ARGUMENT)``."""

    def start(context: LaunchContext) -> list:
        if not IfCondition(condition).evaluate(context):
            return []
        config = os.path.join(get_package_share_directory(PACKAGE), "rviz", f"{launch_name}.rviz")
        executable = shutil.which("rviz2")
        if executable is None:
            return [LogInfo(msg="rviz:=true but rviz2 is not installed here (the PyPI ROS wheels have no "
                                "rviz2): install it (apt install ros-$ROS_DISTRO-rviz2) or run rviz2 on "
                                f"another machine of the network with -d {config}")]
        if not os.path.isfile(config):
            return [LogInfo(msg=f"rviz:=true: no rviz config {config}; starting rviz2 without one"),
                    ExecuteProcess(cmd=[executable], output="screen", prefix=STOP_WITH_LAUNCH)]
        from libredgetpu_ros.ros.rviz_config import write_namespaced

        # the camera input as the node's remapping has it (CAMERA_REMAPPINGS: image_raw -> image:=)
        remappings = {"image_raw": context.launch_configurations.get("image", "")}
        config = str(write_namespaced(config, context.launch_configurations.get("namespace", ""),
                                      remappings=remappings))
        frame = context.launch_configurations.get("rviz_fixed_frame", "")
        return [ExecuteProcess(cmd=[executable, "-d", config, *(["-f", frame] if frame else [])],
                               output="screen", prefix=STOP_WITH_LAUNCH)]

    return OpaqueFunction(function=start)


IMAGE = LaunchConfiguration("image")
CAMERA_ARGUMENT: ArgumentTable = {
    "image": ("image_raw", "camera topic remapped onto the node's input topic (the raw one, as "
                           "image_transport names it)"),
    "transport": ("", "raw | compressed: compressed reads sensor_msgs/CompressedImage on <image>/compressed "
                      "(image_transport's naming); '' = the params file's"),
}
# A camera node's raw and compressed inputs follow the one ``image`` argument (image_transport's naming). The
# ``transport`` argument is one of each camera launch file's overrides (the node parameter of that name).
CAMERA_REMAPPINGS = (("image_raw", IMAGE), ("image_raw/compressed", [IMAGE, "/compressed"]))
PARAMS_FILE = LaunchConfiguration("params_file")


def file_and_overrides(params: Any, names: Iterable[str],
                       renamed: Mapping[str, str] | None = None) -> Callable[[LaunchContext], list]:
    """``parameters`` for :func:`lifecycle_launch`: the ``params_file`` argument, then those of the launch
    arguments ``names`` that were given (:func:`argument_overrides`, typed and checked by ``params``; an
    argument in ``renamed`` sets the parameter it maps to)."""
    names, renamed = tuple(names), dict(renamed or {})
    return lambda context: [PARAMS_FILE, argument_overrides(context, params, names, renamed)]


def lifecycle_launch(executable: str, table: ArgumentTable, parameters: Callable[[LaunchContext], list], *,
                     name: SomeSubstitutionsType | None = None,
                     remappings: Sequence[tuple[str, SomeSubstitutionsType]] = (),
                     rviz_config: str | None = None) -> LaunchDescription:
    """A launch file's description for one lifecycle node of this package: the arguments of ``table`` (plus
    :data:`RVIZ_ARGUMENT` with ``rviz_config``), the node ``executable`` named ``name`` (default: the
    ``node_name`` argument) in the ``namespace`` argument, with ``parameters(context)`` (called when the
    launch runs, so it sees the arguments given) and ``remappings``, :func:`autostarted`; then, with
    ``rviz_config``, :func:`rviz` of that config."""

    def node_and_transitions(context: LaunchContext) -> list:
        node = LifecycleNode(
            package=PACKAGE,
            executable=executable,
            name=LaunchConfiguration("node_name") if name is None else name,
            namespace=LaunchConfiguration("namespace"),
            parameters=parameters(context),
            remappings=list(remappings),
            output="screen",
            # The node stops if this launch exits before it watches its parent (ros/lifetime.py).
            additional_env={LAUNCH_PID_VAR: str(os.getpid())},
        )
        return autostarted(node)

    arguments = launch_arguments({**table, **RVIZ_ARGUMENT} if rviz_config else table)
    return LaunchDescription([*arguments, OpaqueFunction(function=node_and_transitions),
                              *([rviz(rviz_config)] if rviz_config else [])])
