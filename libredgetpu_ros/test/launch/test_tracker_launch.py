"""launch_testing: launch/tracker.launch.py as a robot starts it (run by `make test` through launch_test).

The colour spot tracker on the CPU twin with a params file of non-default values (green swapped in at
configure, a gain) whose template does not exist: in the good case ``model:=color_red_64x64`` on the command
line replaces it (read back as the ``template`` parameter) and a frame with a green spot right of centre
published on the remapped camera topic must produce an offset; in the broken case (no ``model:=``) configure
fails naming the missing template.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, camera, launch_tests

MISSING = "/nonexistent/spot_edgetpu.tflite"


def _camera(node: Any) -> Callable[[], None]:
    import numpy as np

    rgb = np.zeros((96, 96, 3), np.uint8)
    rgb[40:56, 72:88] = (0, 255, 0)
    return camera(node, rgb)


def _case() -> LaunchCase:
    from geometry_msgs.msg import PointStamped

    params = {"module": "spot", "template": MISSING, "backend": "cpu", "color": "green", "gain": 2.5,
              "diagnostics_period": 0.5}
    return LaunchCase(
        launch_file="tracker.launch.py",
        node="/lt/tracker",
        arguments={"namespace": "lt", "image": "/lt/camera"},
        params_key="/**",
        params=params,
        expect_params={"module": "spot", "color": "green", "gain": 2.5, "backend": "cpu",
                       "template": "color_red_64x64"},
        broken={},
        failure_log=f"configure failed: compiled template {MISSING} does not exist",
        result=(PointStamped, "/lt/offset"),
        stimulus=_camera,
        good_arguments={"model": "color_red_64x64"},
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
