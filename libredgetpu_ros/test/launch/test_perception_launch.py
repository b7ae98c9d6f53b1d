"""launch_testing: launch/perception.launch.py as a robot starts it (run by `make test` through launch_test).

PoseNet on the CPU backend with a params file of non-default values; a fixture photo published on the
remapped camera topic must produce a PersonPoseArray. Broken case: a model path that does not exist.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, launch_tests


def _camera(node: Any) -> Callable[[], None]:
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.perception.images import load_image
    from sensor_msgs.msg import Image

    rgb = load_image(fixture("images/test_couple.jpg"))
    msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", step=rgb.shape[1] * 3,
                data=rgb.tobytes())
    msg.header.frame_id = "camera"
    pub = node.create_publisher(Image, "/lt/camera", 10)
    return lambda: pub.publish(msg)


def _case() -> LaunchCase:
    from libredgetpu_ros.fixtures import fixture

    from libredgetpu_ros_interfaces.msg import PersonPoseArray

    params = {"model": str(fixture("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite")),
              "backend": "cpu", "task": "pose", "score_threshold": 0.35, "max_results": 4,
              "diagnostics_period": 0.5}
    return LaunchCase(
        launch_file="perception.launch.py",
        node="/lt/perception",
        arguments={"namespace": "lt", "image": "/lt/camera"},
        params_key="/**",
        params=params,
        expect_params={"score_threshold": 0.35, "max_results": 4, "task": "pose", "backend": "cpu"},
        broken={"model": "/nonexistent/model_edgetpu.tflite"},
        failure_log="configure failed: model /nonexistent/model_edgetpu.tflite",
        result=(PersonPoseArray, "/lt/poses"),
        stimulus=_camera,
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
