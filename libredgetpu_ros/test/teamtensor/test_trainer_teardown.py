"""A trainer sample in flight while a supervisor deactivates and cleans the node up (three processes over
real localhost-only DDS and UDP: ``tt-worker``, the trainer node, this test).

The trainer node runs with its Team Tensor session's batch hand-over instrumented
(``_held_trainer_node.py``: the real ``submit`` and ``stop`` behind a hold and an event log). The sample
that fills a batch has its ``submit`` held on the samples callback (the node's data path) while
``deactivate`` and ``cleanup`` are requested back to back, as ``bringup`` does on Ctrl-C; the test releases it
after ``RELEASE_AFTER_S``.

Required: both transitions succeed and the node ends ``unconfigured``; the session is stopped only after the
held ``submit`` returned (``stop in_flight=0``, no ``submit-after-stop``: cleanup never stopped the session
under the callback); nothing escaped the data path (no "crashed", no traceback in the node's log); the node
configures and trains again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from .._helpers import load_helper

HERE = Path(__file__).resolve().parent
supervision = load_helper(HERE.parent / "ros" / "_lifecycle_supervisor.py")
load_helper(HERE.parent / "ros" / "_control_harness.py")  # imported by name by _trainer_loop
loop = load_helper(HERE / "_trainer_loop.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

WAIT_S = 30.0
RELEASE_AFTER_S = 2.0
BATCH = 2  # samples per batch: every second sample hands a batch over


def _events(folder: Path) -> list[str]:
    path = folder / "events"
    return path.read_text().splitlines() if path.exists() else []


def _activate_and_train(sup: Any, folder: Path, samples: Any, publish_batch: Any) -> None:
    """Configure, activate, and wait until a batch of samples reached the session."""
    before = len(_events(folder))
    assert sup.transition("configure") and sup.transition("activate")
    sup.wait_for("the node's samples subscription", lambda: samples.get_subscription_count() > 0)
    sup.wait_for("a batch handed to the session", lambda: "submit-end" in _events(folder)[before:],
                 every=publish_batch)


def test_a_sample_in_flight_survives_deactivate_and_cleanup(ros_env, tmp_path: Path) -> None:
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float32MultiArray

    ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.cli.main", "tt-worker", "--port", "0", "--json"],
                  "tt_worker")
    port = loop.worker_port(ros_env.work_dir / "tt_worker.log")
    ros_env.spawn([sys.executable, str(HERE / "_held_trainer_node.py"), str(tmp_path), "--ros-args",
                   "-r", "__node:=trainer_race", "-p", f"worker_port:={port}", "-p", "input_size:=3",
                   "-p", "output_size:=2", "-p", f"batch_size:={BATCH}", "-p", "push_period:=0.0",
                   "-p", "samples_topic:=/race/samples", "-p", "retransmit_timeout:=0.02"], "trainer_race")
    sup = supervision.LifecycleSupervisor(ros_env, "trainer_supervisor", "/trainer_race", WAIT_S)
    samples = sup.node.create_publisher(Float32MultiArray, "/race/samples", QoSProfile(depth=100))
    sample = Float32MultiArray(data=[0.5, -0.25, 0.75, 0.1, -0.2])

    def publish_batch() -> None:
        for _ in range(BATCH):
            samples.publish(sample)

    _activate_and_train(sup, tmp_path, samples, publish_batch)
    sup.spin_for(0.5)  # samples published twice while the subscription matched arrive late
    (tmp_path / "arm").touch()
    publish_batch()
    sup.wait_for("the batch hand-over to be held", lambda: "held" in _events(tmp_path))
    answers = sup.answers_while_held(("deactivate", "cleanup"), (tmp_path / "release").touch, RELEASE_AFTER_S)
    assert [a.success for a in answers] == [True, True]
    assert sup.state() == "unconfigured"
    events = _events(tmp_path)
    assert "submit-after-stop" not in events, f"a batch went to a stopped session: {events}"
    stops = [i for i, e in enumerate(events) if e.startswith("stop")]
    assert stops and events[stops[0]] == "stop in_flight=0", f"stopped under the held submit: {events}"
    assert stops[0] > events.index("submit-end", events.index("held")), events
    _activate_and_train(sup, tmp_path, samples, publish_batch)  # configures and trains again
    log = (ros_env.work_dir / "trainer_race.log").read_text()
    assert "crashed" not in log and "Traceback" not in log, log[-3000:]
    assert sup.transition("deactivate") and sup.transition("cleanup")
