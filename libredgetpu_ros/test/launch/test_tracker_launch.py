"""launch_testing: launch/tracker.launch.py as a robot starts it (run by `make test` through launch_test).

The colour spot tracker on the CPU twin with a params file of non-default values (green swapped in at
configure, a gain); a frame with a green spot right of centre published on the remapped camera topic must
produce an offset. Broken case: a template that does not exist.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, launch_tests


def _camera(node: Any) -> Callable[[], None]:
    import numpy as np
    from sensor_msgs.msg import Image

    rgb = np.zeros((96, 96, 3), np.uint8)
    rgb[40:56, 72:88] = (0, 255, 0)
    msg = Image(height=96, width=96, encoding="rgb8", step=96 * 3, data=rgb.tobytes())
    msg.header.frame_id = "camera"
    pub = node.create_publisher(Image, "/lt/camera", 10)
    return lambda: pub.publish(msg)


def _case() -> LaunchCase:
    from geometry_msgs.msg import PointStamped

    params = {"module": "spot", "template": "color_red_64x64", "backend": "cpu", "color": "green",
              "gain": 2.5, "diagnostics_period": 0.5}
    return LaunchCase(
        launch_file="tracker.launch.py",
        node="/lt/tracker",
        arguments={"namespace": "lt", "image": "/lt/camera"},
        params_key="/**",
        params=params,
        expect_params={"module": "spot", "color": "green", "gain": 2.5, "backend": "cpu"},
        broken={"template": "/nonexistent/spot_edgetpu.tflite"},
        failure_log="configure failed: template '/nonexistent/spot_edgetpu.tflite' is incomplete",
        result=(PointStamped, "/lt/offset"),
        stimulus=_camera,
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
