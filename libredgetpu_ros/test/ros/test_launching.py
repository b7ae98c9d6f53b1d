"""ros/launching.py's pieces without starting a launch: launch arguments that override single parameters
(typed by the node's table, refused with the argument named) and ``rviz:=true`` without rviz2 installed
(the PyPI wheels have none): a message saying what to do, and the launch goes on."""

from __future__ import annotations

import os
import shutil

import pytest


def _context(**arguments: str):
    from launch import LaunchContext

    context = LaunchContext()
    context.launch_configurations.update(arguments)
    return context


def test_given_arguments_override_typed_and_empty_ones_leave_the_file_alone() -> None:
    from libredgetpu_ros.ros.launching import argument_overrides
    from libredgetpu_ros.ros.perception.params import PARAMS

    context = _context(model="mobilenet_v1_0.25_128", backend="", require_accelerator="True",
                       max_results="3", score_threshold="0.25")
    got = argument_overrides(context, PARAMS, ["model", "backend", "require_accelerator", "max_results",
                                               "score_threshold"])
    assert got == {"model": "mobilenet_v1_0.25_128", "require_accelerator": True, "max_results": 3,
                   "score_threshold": 0.25}


@pytest.mark.parametrize(("name", "text", "message"), [
    ("require_accelerator", "yes", "require_accelerator:='yes': expected true or false"),
    ("max_results", "many", "max_results:='many'"),
    ("backend", "gpu", "backend='gpu' is not one of auto, cpu, edgetpu"),
    ("score_threshold", "2", "score_threshold=2.0 is outside [0, 1]"),
])
def test_a_bad_argument_stops_the_launch_naming_it(name, text, message) -> None:
    from libredgetpu_ros.ros.launching import argument_overrides
    from libredgetpu_ros.ros.perception.params import PARAMS

    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        argument_overrides(_context(**{name: text}), PARAMS, [name])


def test_an_argument_may_set_a_parameter_of_another_name() -> None:
    from libredgetpu_ros.ros.launching import argument_overrides
    from libredgetpu_ros.ros.robotics.params import TRACKER_PARAMS

    got = argument_overrides(_context(model="color_green_64x64", backend="", color="green"), TRACKER_PARAMS,
                             ("model", "backend", "color"), {"model": "template"})
    assert got == {"template": "color_green_64x64", "color": "green"}
    message = r"launch argument servo_gain:= sets parameter gain=5000\.0 is outside"
    with pytest.raises(ValueError, match=message):
        argument_overrides(_context(servo_gain="5000"), TRACKER_PARAMS, ["servo_gain"],
                           {"servo_gain": "gain"})


@pytest.mark.skipif(shutil.which("rviz2") is not None, reason="rviz2 is installed here")
@pytest.mark.skipif(not os.environ.get("AMENT_PREFIX_PATH"), reason="the package's share folder is found "
                    "through AMENT_PREFIX_PATH: run inside `source tools/env.sh` (make test does)")
def test_rviz_true_without_rviz2_says_what_to_do() -> None:
    from launch.actions import LogInfo
    from libredgetpu_ros.ros.launching import rviz

    (action,) = rviz("perception").execute(_context(rviz="true"))
    assert isinstance(action, LogInfo)
    text = "".join(str(getattr(part, "text", part)) for part in action.msg)
    assert "rviz2 is not installed" in text and "rviz/perception.rviz" in text
    assert rviz("perception").execute(_context(rviz="false")) == []


CAMERA_LAUNCH_FILES = ("perception", "tracker", "looming", "flow", "recognition")


def _launch_parameters(launch_name: str, **arguments: str) -> dict:
    """The node parameters a launch file of this checkout passes besides its params file, for ``arguments``
    over the declared defaults (its node-building OpaqueFunction run on a bare context)."""
    import importlib.util
    from pathlib import Path

    from launch.actions import DeclareLaunchArgument, OpaqueFunction

    path = Path(__file__).resolve().parents[2] / "launch" / f"{launch_name}.launch.py"
    spec = importlib.util.spec_from_file_location(f"launch_{launch_name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    context = _context()
    for entity in description.entities:
        if isinstance(entity, DeclareLaunchArgument):
            context.launch_configurations[entity.name] = "".join(s.perform(context)
                                                                 for s in entity.default_value)
    context.launch_configurations.update(arguments)
    build = next(e for e in description.entities if isinstance(e, OpaqueFunction))
    node = build._OpaqueFunction__function(context)[0]
    import yaml

    params = {}
    for entry in node._Node__parameters:
        if isinstance(entry, dict):  # launch_ros keeps each value as YAML text
            params.update({"".join(s.perform(context) for s in k):
                           yaml.safe_load("".join(s.perform(context) for s in v)) for k, v in entry.items()})
    return params


@pytest.mark.parametrize("launch_name", CAMERA_LAUNCH_FILES)
def test_every_camera_launch_file_takes_transport(launch_name: str) -> None:
    """``transport:=compressed`` reaches the node's ``transport`` parameter; unset, the params file's value
    stays; a value that is not raw / compressed stops the launch naming it."""
    assert _launch_parameters(launch_name, transport="compressed")["transport"] == "compressed"
    assert "transport" not in _launch_parameters(launch_name)
    with pytest.raises(ValueError, match="transport='jpeg' is not one of raw, compressed"):
        _launch_parameters(launch_name, transport="jpeg")
