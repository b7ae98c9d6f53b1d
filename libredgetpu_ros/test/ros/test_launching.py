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
