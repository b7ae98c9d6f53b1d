"""launch_testing: launch/perception.launch.py as a robot starts it (run by `make test` through launch_test).

The params file names its model by catalogue name (as the shipped configs do) and the model cache is an
empty folder (``LIBREDGETPU_ROS_MODELS``): the first launch of a fresh install.

- good: ``model:=<the PoseNet fixture>`` on the command line replaces the file's model (read back with
  ``GetParameters``); PoseNet on the CPU backend with non-default values from the file; a fixture photo
  published on the remapped camera topic must produce a PersonPoseArray; after a supervisor's deactivate ->
  cleanup -> configure the node stays inactive (autostart acts once);
- broken: no ``model:=``; configure fails, the node stays unconfigured and its log holds the exact command
  that fetches the model.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, camera, launch_tests

CATALOGUE_NAME = "posenet_mobilenet_v1_075_481_641"


def _camera(node: Any) -> Callable[[], None]:
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.perception.images import load_image

    return camera(node, load_image(fixture("images/test_couple.jpg")))


def _case() -> LaunchCase:
    from libredgetpu_ros.fixtures import fixture

    from libredgetpu_ros_interfaces.msg import PersonPoseArray

    model = str(fixture("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"))
    params = {"model": CATALOGUE_NAME, "backend": "cpu", "task": "pose", "score_threshold": 0.35,
              "max_results": 4, "diagnostics_period": 0.5}
    return LaunchCase(
        launch_file="perception.launch.py",
        node="/lt/perception",
        arguments={"namespace": "lt", "image": "/lt/camera"},
        params_key="/**",
        params=params,
        expect_params={"model": model, "score_threshold": 0.35, "max_results": 4, "task": "pose",
                       "backend": "cpu"},
        broken={},
        failure_log=f"run `libredgetpu-ros models fetch {CATALOGUE_NAME}`",
        result=(PersonPoseArray, "/lt/poses"),
        stimulus=_camera,
        environment={"LIBREDGETPU_ROS_MODELS": tempfile.mkdtemp(prefix="libredgetpu_ros_empty_cache_")},
        good_arguments={"model": model},
        autostart_once=True,
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
