"""The online-learning loop's processes for the trainer node tests: tt-worker, control node, trainer node.

Load it with ``load_helper`` after ``ros/_control_harness.py`` (which it imports by that name)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _control_harness as harness  # registered by the test file's load_helper

T_CONFIGURE, T_CLEANUP, T_ACTIVATE, T_DEACTIVATE = 1, 2, 3, 4  # lifecycle_msgs/Transition ids
CTL, TRAINER = "/ctl/control_node", "/tt/trainer_node"


def worker_port(log: Path, timeout: float = 30.0) -> int:
    """The port a ``tt-worker --json`` process reports in its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists():
            for line in log.read_text().splitlines():
                if line.startswith('{"listening"'):
                    return int(json.loads(line)["listening"]["port"])
        time.sleep(0.05)
    raise TimeoutError(f"tt-worker did not report its port in {log}")


def spawn_worker(ros_env, *args: str) -> tuple[subprocess.Popen, int]:
    """A ``tt-worker --port 0 --json`` process (``args`` added), logging to ``tt_worker.log``; (process, its
    port)."""
    worker = ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.cli.main", "tt-worker", "--port", "0",
                            "--json", *args], "tt_worker")
    return worker, worker_port(ros_env.work_dir / "tt_worker.log")


def start_loop(ros_env, input_size: int):
    """tt-worker, control node (3 states -> 2 commands) and trainer node (``input_size`` -> 2) processes;
    the harness driving the control node."""
    _, port = spawn_worker(ros_env, "--learning-rate", "0.1")
    ros_env.spawn([sys.executable, "-m", harness.CONTROL_NODE_MODULE, "--ros-args", "-r", "__ns:=/ctl",
                   "-p", "backend:=cpu", "-p", "template:=256", "-p", "state_size:=3",
                   "-p", "command_size:=2", "-p", "stale_timeout:=30.0"], "control_node")
    ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.trainer.node", "--ros-args", "-r", "__ns:=/tt",
                   "-p", f"worker_port:={port}", "-p", f"input_size:={input_size}", "-p", "output_size:=2",
                   "-p", "batch_size:=16", "-p", "push_period:=0.5", "-p", "metrics_period:=0.3",
                   "-p", "retransmit_timeout:=0.02", "-p", f"set_weights_service:={CTL}/set_weights"],
                  "trainer_node")
    return harness.ControlHarness(ros_env.init_rclpy(), CTL)


def trainer_transitions(ctl, transitions: tuple[int, ...] = (T_CONFIGURE, T_ACTIVATE)) -> None:
    from lifecycle_msgs.srv import ChangeState

    client = ctl.node.create_client(ChangeState, f"{TRAINER}/change_state")
    for transition in transitions:
        req = ChangeState.Request()
        req.transition.id = transition
        assert ctl.call(client, req).success, f"trainer transition {transition} failed (see its log)"


@dataclass
class InProcessTrainer:
    """A ``TrainerNode`` in this process (namespace /tt) and a probe node, spun by ``executor``; ``context``
    for more nodes. ``add`` spins another node and destroys it with the rest."""

    trainer: Any
    probe: Any
    executor: Any
    context: Any
    nodes: list[Any] = field(default_factory=list)

    def add(self, node: Any) -> Any:
        self.executor.add_node(node)
        self.nodes.append(node)
        return node


@contextmanager
def in_process_trainer(ros_env, probe_name: str, **params: Any) -> Iterator[InProcessTrainer]:
    """A real tt-worker process and an ``InProcessTrainer`` whose trainer has ``worker_port`` set to it and
    ``params`` as parameter overrides (types from the values). On exit: the executor shut down, the trainer
    torn down, every node destroyed."""
    from libredgetpu_ros.ros.trainer.node import TrainerNode
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    _, port = spawn_worker(ros_env)
    context = ros_env.init_rclpy()
    overrides = [Parameter(name, value=value) for name, value in {"worker_port": port, **params}.items()]
    trainer = TrainerNode(context=context, namespace="/tt", parameter_overrides=overrides)
    probe, executor = Node(probe_name, context=context), SingleThreadedExecutor(context=context)
    rig = InProcessTrainer(trainer, probe, executor, context)
    rig.add(trainer)
    rig.add(rig.probe)
    try:
        yield rig
    finally:
        rig.executor.shutdown()
        trainer.teardown()
        for node in rig.nodes:
            node.destroy_node()
