"""launch_testing: launch/spu.launch.py as a robot starts it (run by `make test` through launch_test).

The installed example (A = B + latchedC, reference runner) with a params file of our own: latchedC = 1, so
a B published on the node's input topic must produce an A; the ``strict:=false`` launch argument overrides
the file's ``strict: true``. Broken case: a program file that does not exist.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, launch_tests


def _b(node: Any) -> Callable[[], None]:
    from sensor_msgs.msg import JointState

    pub = node.create_publisher(JointState, "/lt/spu/in/B", 10)
    msg = JointState(position=[0.5, 1.0, 1.5, 2.0])
    return lambda: pub.publish(msg)


def _case() -> LaunchCase:
    from ament_index_python.packages import get_package_share_directory
    from sensor_msgs.msg import JointState

    config = os.path.join(get_package_share_directory("libredgetpu_ros"), "config")
    params = {"iospec": os.path.join(config, "spu_add_latched.iospec.yaml"),
              "program": os.path.join(config, "spu_add_latched.program.yaml"),
              "runner": "reference", "strict": True, "qos_depth": 5, "diagnostics_period": 0.5,
              "latched.latchedC": [1.0, 1.0, 1.0, 1.0]}
    return LaunchCase(
        launch_file="spu.launch.py",
        node="/lt/spu",
        arguments={"namespace": "lt", "strict": "false"},
        params_key="/**",  # as config/spu.yaml
        params=params,
        expect_params={"runner": "reference", "strict": False, "qos_depth": 5},
        broken={"program": "/nonexistent/program.yaml"},
        failure_log="configure failed: program /nonexistent/program.yaml does not exist",
        result=(JointState, "/lt/spu/out/A"),
        stimulus=_b,
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
