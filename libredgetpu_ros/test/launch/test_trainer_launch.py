"""launch_testing: launch/trainer.launch.py as a robot starts it (run by `make test` through launch_test).

The launch description also starts a `libredgetpu-ros tt-worker` process on a free UDP port; the trainer
node from the launch file connects to it at configure. A few training samples published on the remapped
samples topic (one batch per publish) must produce a ``~/metrics`` message. The worker's port comes from
the ``worker_port`` launch argument, over a params file that names a silent port (so the node connects only
if the argument overrides the file). Broken case: the params file's ``worker_host`` is an address where
nobody answers (configure times out). The worker, like the node, must exit 0 at shutdown.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import launch
import launch_testing
from launch.actions import ExecuteProcess

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, launch_tests

BATCH = 4  # samples per batch: each stimulus is one batch


def _free_udp_port() -> int:
    """A port nobody listens on now (bound, then released): the worker's, or the broken case's silent one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


WORKER_PORT, SILENT_PORT = _free_udp_port(), _free_udp_port()


def _samples(node: Any) -> Callable[[], None]:
    from std_msgs.msg import Float32MultiArray

    pub = node.create_publisher(Float32MultiArray, "/lt/experience", 100)
    msg = Float32MultiArray(data=[0.5, -0.25, 1.0, 0.1, -0.2])  # 3 inputs, 2 targets

    def publish_batch() -> None:
        for _ in range(BATCH):
            pub.publish(msg)

    return publish_batch


def _case() -> LaunchCase:
    from std_msgs.msg import Float32MultiArray

    params = {"worker_port": SILENT_PORT, "input_size": 3, "output_size": 2, "batch_size": BATCH,
              "metrics_period": 0.2, "push_period": 0.0, "connect_timeout": 5.0, "retransmit_timeout": 0.02}
    return LaunchCase(
        launch_file="trainer.launch.py",
        node="/lt/trainer_node",
        arguments={"namespace": "lt", "samples_topic": "/lt/experience", "worker_port": str(WORKER_PORT)},
        params_key="/**",  # as config/trainer.yaml
        params=params,
        expect_params={"worker_port": WORKER_PORT, "batch_size": BATCH, "metrics_period": 0.2,
                       "set_weights_service": "control_node/set_weights"},
        broken={"worker_host": "127.0.0.2", "connect_timeout": 0.5},
        failure_log="configure failed: DeviceTimeoutError",
        result=(Float32MultiArray, "/lt/trainer_node/metrics"),
        stimulus=_samples,
    )


_with_node_only, TestLaunchedNode, TestShutdown = launch_tests(_case())


@launch_testing.parametrize("scenario", ["good", "broken"])
def generate_test_description(scenario: str) -> tuple[launch.LaunchDescription, dict[str, Any]]:
    """The harness's description of the scenario with the worker process in front of the launch file."""
    describe = next(partial for partial, args in _with_node_only() if args["scenario"] == scenario)
    description, context = describe()
    worker = ExecuteProcess(cmd=[sys.executable, "-m", "libredgetpu_ros.cli.main", "tt-worker",
                                 "--port", str(WORKER_PORT)], name="tt_worker", output="screen")
    return launch.LaunchDescription([worker, *description.entities]), context
