"""launch_testing: launch/cameras.launch.py with a bringup file of two cameras (run by `make test` through
launch_test).

One ``image_topics`` entry (two cameras, the second best effort) of a CPU classifier: the launch starts one
bringup process; both nodes (``/lt/front/perception``, ``/lt/rear/perception``) must reach ``active`` in it,
each camera's frames must give classifications on its own namespace's topic, and the process must exit
cleanly when the launch stops. The launch file is this checkout's (the installed share may be another's).
"""

from __future__ import annotations

import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

import launch
import launch_testing
import launch_testing.actions
import launch_testing.asserts
from _harness import Probe, camera
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource

LAUNCH = Path(__file__).resolve().parents[2] / "launch" / "cameras.launch.py"
MODEL = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
NODES = ("/lt/front/perception", "/lt/rear/perception")


def _config() -> str:
    from libredgetpu_ros.fixtures import fixture

    path = Path(tempfile.mkdtemp(prefix="libredgetpu_ros_cameras_lt_")) / "cameras.yaml"
    path.write_text(
        "nodes:\n"
        "  - type: perception\n"
        "    name: perception\n"
        "    namespace: lt\n"
        "    image_topics:\n"
        "      - /lt/front/image_raw\n"
        "      - {topic: /lt/rear/image_raw, image_reliability: best_effort}\n"
        "    parameters:\n"
        f"      model: {fixture(MODEL)}\n"
        "      backend: cpu\n"
        "      cpu_threads: 1\n"
        "      task: classify\n"
        "      score_threshold: 0.0\n"
        "      publish_markers: false\n")
    return str(path)


def generate_test_description() -> tuple[launch.LaunchDescription, dict[str, Any]]:
    return launch.LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(LAUNCH)),
                                 launch_arguments={"config": _config()}.items()),
        launch_testing.actions.ReadyToTest(),
    ]), {}


class TestCameras(unittest.TestCase):
    def setUp(self) -> None:
        self.probe = Probe("launch_test_probe")

    def tearDown(self) -> None:
        self.probe.close()

    def test_each_camera_gets_its_results_in_one_process(self) -> None:
        import numpy as np
        from vision_msgs.msg import Classification

        for node in NODES:  # bringup takes each to active itself
            self.assertEqual(self.probe.wait_for_state(node, "active"), "active")
        rgb = np.random.default_rng(2).integers(0, 256, (120, 160, 3), dtype=np.uint8)
        for ns in ("front", "rear"):
            publish = camera(self.probe.node, rgb, f"/lt/{ns}/image_raw")
            result = self.probe.wait_for_result(Classification, f"/lt/{ns}/classification", publish)
            self.assertEqual(result.header.frame_id, "camera")


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_every_process_exited_cleanly(self, proc_info: Any) -> None:
        launch_testing.asserts.assertExitCodes(proc_info)
