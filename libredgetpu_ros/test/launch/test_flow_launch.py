"""launch_testing: launch/flow.launch.py as a robot starts it (run by `make test` through launch_test).

The pooled 64x64 Gabor template on the CPU backend with a params file of non-default values; two stamped
frames of a moving texture on the remapped camera topic must produce a TwistStamped on the node's flow
topic. Broken case: a template that does not exist.
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

    rng = np.random.default_rng(3)
    scene = np.kron(rng.integers(0, 256, (40, 40), dtype=np.uint8), np.ones((4, 4), np.uint8))
    pub = node.create_publisher(Image, "/lt/camera", 10)
    state = {"k": 0}

    def publish() -> None:  # every call: the next frame, 4 px further right, 0.1 s later
        k = state["k"]
        state["k"] = k + 1
        frame = np.ascontiguousarray(scene[40:104, 40 - 4 * (k % 8):104 - 4 * (k % 8)])
        msg = Image(height=64, width=64, encoding="mono8", step=64, data=frame.tobytes())
        msg.header.frame_id = "camera"
        msg.header.stamp.sec, msg.header.stamp.nanosec = 100 + k // 10, (k % 10) * 100_000_000
        pub.publish(msg)

    return publish


def _case() -> LaunchCase:
    from geometry_msgs.msg import TwistStamped

    params = {"model": "gabor_64x64_p4", "backend": "cpu", "fov_deg": 75.0, "min_confidence": 0.25,
              "max_gap": 2.0, "diagnostics_period": 0.5}
    return LaunchCase(
        launch_file="flow.launch.py",
        node="/lt/flow",
        arguments={"namespace": "lt", "image": "/lt/camera"},
        params_key="/**",  # as config/flow.yaml
        params=params,
        expect_params={"fov_deg": 75.0, "min_confidence": 0.25, "max_gap": 2.0, "backend": "cpu"},
        broken={"model": "/nonexistent/gabor_edgetpu.tflite"},
        failure_log="configure failed: compiled template /nonexistent/gabor_edgetpu.tflite does not exist",
        result=(TwistStamped, "/lt/flow"),
        stimulus=_camera,
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
