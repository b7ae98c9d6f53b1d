"""launch_testing: launch/control.launch.py as a robot starts it (run by `make test` through launch_test).

Dense(256) template on the CPU backend, a 2x4 controller loaded from a .npy at configure (its command_size
given as a launch argument over the params file's 3); a state vector published on the remapped state topic
must produce a command; after a supervisor's deactivate -> cleanup -> configure the node stays inactive
(autostart acts once). Broken case: a template file that does not exist.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, launch_tests


def _state(node: Any) -> Callable[[], None]:
    from std_msgs.msg import Float32MultiArray

    pub = node.create_publisher(Float32MultiArray, "/lt/joint_state_vector", 10)
    msg = Float32MultiArray(data=[1.0, -0.5, 0.25, 0.5])
    return lambda: pub.publish(msg)


def _case() -> LaunchCase:
    import numpy as np
    from std_msgs.msg import Float32MultiArray

    weights = Path(tempfile.mkdtemp(prefix="libredgetpu_ros_launch_test_")) / "w.npy"
    np.save(weights, np.array([[0.03, -0.02, 0.0, 0.01], [0.0, 0.02, -0.03, 0.025]], np.float32))
    params = {"backend": "cpu", "template": 256, "state_size": 4, "command_size": 3,
              "initial_weights": str(weights), "stale_timeout": 5.0, "diagnostics_period": 0.5}
    return LaunchCase(
        launch_file="control.launch.py",
        node="/lt/control_node",
        arguments={"namespace": "lt", "state_topic": "/lt/joint_state_vector"},
        params_key="/**",  # as config/control.yaml
        params=params,
        expect_params={"state_size": 4, "command_size": 2, "stale_timeout": 5.0, "backend": "cpu"},
        broken={"template_path": "/nonexistent/dense_256_edgetpu.tflite"},
        failure_log="configure failed: template '/nonexistent/dense_256_edgetpu.tflite' is incomplete",
        result=(Float32MultiArray, "/lt/control_node/command"),
        stimulus=_state,
        good_arguments={"command_size": "2"},
        autostart_once=True,
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
