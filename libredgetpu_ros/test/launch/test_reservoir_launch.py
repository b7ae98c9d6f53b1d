"""launch_testing: launch/reservoir.launch.py as a robot starts it (run by `make test` through launch_test).

The reservoir on the CPU twin with a params file of non-default values whose readout file does not exist:
in the good case ``model:=`` a readout fitted here (same seed, saved with ``save_readout``) replaces it (read
back as the ``readout`` parameter) and JointStates on the remapped state topic must produce a prediction
(after the ``washout`` states every activate holds back);
in the broken case (no ``model:=``) configure fails naming the missing file.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, launch_tests

SEED, SIZE = 11, 2


def _readout() -> str:
    import numpy as np
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig

    t = np.arange(700) * 0.2
    series = np.stack([np.sin(t), np.cos(0.7 * t)], axis=1)
    path = Path(tempfile.mkdtemp(prefix="libredgetpu_ros_reservoir_lt_")) / "readout.npz"
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        rc = ReservoirComputer(engine, ReservoirConfig(input_dim=SIZE, seed=SEED, washout=50))
        rc.fit(series[:-1], series[1:])
        rc.save_readout(path)
    return str(path)


def _joints(node: Any) -> Callable[[], None]:
    from sensor_msgs.msg import JointState

    pub = node.create_publisher(JointState, "/lt/joints", 10)
    msg = JointState(name=["elbow", "shoulder"], position=[0.3, -0.2])
    msg.header.frame_id = "arm"
    msg.header.stamp.sec = 42
    return lambda: pub.publish(msg)


def _case() -> LaunchCase:
    from sensor_msgs.msg import JointState

    readout = _readout()
    # washout 3: every activate holds the first `washout` predictions back; the stimulus comes every 0.25 s
    params = {"backend": "cpu", "template": 256, "state_size": SIZE, "seed": SEED, "washout": 3,
              "joint_names": ["shoulder", "elbow"], "readout": "/nonexistent/readout.npz",
              "diagnostics_period": 0.5}
    return LaunchCase(
        launch_file="reservoir.launch.py",
        node="/lt/reservoir",
        arguments={"namespace": "lt", "state_topic": "/lt/joints"},
        params_key="/**",
        params=params,
        expect_params={"seed": SEED, "state_size": SIZE, "washout": 3, "readout": readout},
        broken={},
        failure_log="configure failed: reservoir readout file /nonexistent/readout.npz does not exist",
        result=(JointState, "/lt/reservoir/prediction"),
        stimulus=_joints,
        good_arguments={"model": readout},
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
