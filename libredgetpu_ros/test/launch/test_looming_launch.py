"""launch_testing: launch/looming.launch.py as a robot starts it (run by `make test` through launch_test).

The looming detector on the CPU twin with a params file of non-default values whose template does not
exist: in the good case ``model:=looming_64x64_3x3`` on the command line replaces it (read back as the
``template`` parameter) and a textured frame published on the remapped camera topic must produce a Looming
message; in the broken case (no ``model:=``) configure fails naming the missing template.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, camera, launch_tests

MISSING = "/nonexistent/looming_edgetpu.tflite"


def _camera(node: Any) -> Callable[[], None]:
    import numpy as np

    yy, xx = np.mgrid[:64, :64]
    gray = (((xx // 4) + (yy // 4)) % 2 * 120 + 60).astype(np.uint8)
    return camera(node, np.repeat(gray[:, :, None], 3, axis=2))


def _case() -> LaunchCase:
    from libredgetpu_ros_interfaces.msg import Looming

    params = {"template": MISSING, "backend": "cpu", "ttc_window": 7, "warn_tau": 3.0,
              "diagnostics_period": 0.5}
    return LaunchCase(
        launch_file="looming.launch.py",
        node="/lt/looming",
        arguments={"namespace": "lt", "image": "/lt/camera"},
        params_key="/**",
        params=params,
        expect_params={"ttc_window": 7, "warn_tau": 3.0, "backend": "cpu", "template": "looming_64x64_3x3"},
        broken={},
        failure_log=f"configure failed: compiled template {MISSING} does not exist",
        result=(Looming, "/lt/looming"),
        stimulus=_camera,
        good_arguments={"model": "looming_64x64_3x3"},
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
