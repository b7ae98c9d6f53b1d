"""Ctrl-C to a real ``ros2 launch`` of a node whose data-path call is stuck, with launch's DEFAULT timeouts.

``ros2 launch`` stops a node with SIGINT, then SIGTERM ``sigterm_timeout`` (5 s) later, then SIGKILL
``sigkill_timeout`` (5 s) after that (launch/actions/execute_local.py). The node here is the control node run
as this package's launch files run it (a ``LifecycleNode`` autostarted by ``ros/launching.autostarted``),
through ``_held_runner_node.py``: its MatMul runner holds one engine call forever (a wedged device, a
runner that never returns). ``deactivate_timeout`` is left at its default (10 s). The launch gets SIGINT
(stdin not a terminal: launch itself then sends SIGINT to its node, as it does for a terminal's Ctrl-C that
reached only the launch process; from a terminal the node gets the terminal's SIGINT instead: the same one
signal).

Recorded from launch's own output, each line stamped when it first appears: launch's escalations
("escalating to 'SIGTERM'" / "'SIGKILL'"), the node's ERROR line, launch's report of the node's exit.
Required: the node exits by itself, status 3 (``stuck_exit.EXIT_DATA_PATH_STUCK``), with one ERROR line
naming the stuck call, before launch has to escalate to SIGKILL. Before the fix the node ignored the SIGTERM
and waited its whole ``deactivate_timeout`` (10 s): its ERROR and exit came 10.4-10.5 s after the SIGINT,
in the same instant as launch's "escalating to 'SIGKILL'" (3 of 3 runs here; the node's exit got in first
by milliseconds, any delay and it is SIGKILLed: exit code -9, no ERROR line, nothing says the data path was
stuck). Now launch's SIGTERM (a second stop signal while the stop waits for the stuck call,
``ros/signal_stop.py``) ends the wait at once: ERROR and status 3 about 5.4 s after the SIGINT.
"""

from __future__ import annotations

import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .._helpers import load_helper

HERE = Path(__file__).resolve().parent
supervision = load_helper(HERE / "_lifecycle_supervisor.py")
held = load_helper(HERE / "_held_runner_node.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]

WAIT_S = 60.0  # launch and a Python node starting on a loaded 2-core machine
END_S = 30.0  # SIGINT to launch's exit: its SIGKILL comes at 10 s at the latest
HELD_NODE = HERE / "_held_runner_node.py"
NAME = "stuck_ctl"

LAUNCH = '''
import sys

from launch import LaunchDescription
from launch_ros.actions import LifecycleNode
from libredgetpu_ros.ros.launching import autostarted


def generate_launch_description():
    node = LifecycleNode(
        executable=sys.executable, arguments=[{held!r}, {folder!r}, "libredgetpu_ros.ros.control_node"],
        name={name!r}, namespace="", output="screen",
        parameters=[{{"backend": "cpu", "template": 256, "state_size": 2, "command_size": 2,
                      "state_topic": "/lstuck/state", "stale_timeout": 30.0}}])
    return LaunchDescription(autostarted(node, "true"))
'''

# what launch and the node print, as they print it (launch/actions/execute_local.py, ros/stuck_exit.py)
MARKERS = {
    "sigterm": re.compile(r"escalating to 'SIGTERM'"),
    "sigkill": re.compile(r"escalating to 'SIGKILL'"),
    "error": re.compile(r"\[ERROR\].*exit on SIG\w+.*the data-path callback on /lstuck/state"),
    "exit": re.compile(r"process has (died|finished cleanly).*"),
}


def _launch_and_hold(ros_env, folder: Path) -> tuple[Any, Any, Path]:
    """``ros2 launch`` of the held-runner control node, active, one engine call done, the next one held:
    (the launch process, the supervisor, launch's log)."""
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float32MultiArray

    ros2 = shutil.which("ros2")
    assert ros2, "ros2 is not on PATH (run under tools/ros_sandbox.sh after make setup)"
    launch_file = ros_env.work_dir / "stuck.launch.py"
    launch_file.write_text(LAUNCH.format(held=str(HELD_NODE), folder=str(folder), name=NAME))
    launch = ros_env.spawn([ros2, "launch", str(launch_file)], "launch", expect_exit=True)
    log_path = ros_env.work_dir / "launch.log"

    sup = supervision.LifecycleSupervisor(ros_env, "lstuck_supervisor", f"/{NAME}", WAIT_S)
    sup.wait_for(lambda: f"the node active (autostart):\n{log_path.read_text()[-3000:]}",
                 lambda: sup.state() == "active", timeout=WAIT_S)
    states = sup.node.create_publisher(Float32MultiArray, "/lstuck/state", QoSProfile(depth=10))
    state = Float32MultiArray(data=[0.5, -0.25])
    sup.wait_for("the node's state subscription", lambda: states.get_subscription_count() > 0)
    held.first_call_then_hold(sup, folder, lambda: states.publish(state))
    return launch, sup, log_path


def _follow(launch: Any, log_path: Path, during: Any = None) -> tuple[dict[str, tuple[float, str]], float]:
    """Read launch's output until it exits (at most :data:`END_S`), each marker stamped with the seconds
    since this call when its line first appeared; ``during(seconds)`` runs on every poll. (markers, the
    seconds launch took to exit)."""
    seen: dict[str, tuple[float, str]] = {}
    start = time.monotonic()
    while time.monotonic() - start < END_S:
        now = time.monotonic() - start
        for line in log_path.read_text(errors="replace").splitlines():
            for key, marker in MARKERS.items():
                if key not in seen and marker.search(line):
                    seen[key] = (now, line)
        if launch.poll() is not None:
            break
        if during is not None:
            during(now)
        time.sleep(0.05)
    return seen, time.monotonic() - start


def _report(seen: dict[str, tuple[float, str]]) -> str:
    return "\n".join(f"  {key}: {at:.2f} s: {line.strip()[:200]}" for key, (at, line) in
                      sorted(seen.items(), key=lambda kv: kv[1][0]))


def test_ctrl_c_to_launch_ends_a_stuck_node_with_its_error_and_status_3(ros_env, tmp_path: Path) -> None:
    from libredgetpu_ros.ros.stuck_exit import EXIT_DATA_PATH_STUCK

    launch, _supervisor, log_path = _launch_and_hold(ros_env, tmp_path)
    launch.send_signal(signal.SIGINT)
    seen, ended = _follow(launch, log_path)
    log = log_path.read_text(errors="replace")
    report = _report(seen)
    print(f"SIGINT to ros2 launch, node's call held, default timeouts; launch exited after {ended:.2f} s "
          f"(status {launch.poll()}):\n{report}")
    assert launch.poll() is not None, f"ros2 launch still runs {END_S:.0f} s after SIGINT:\n{log[-4000:]}"
    assert "exit" in seen, f"launch reported no exit of the node:\n{log[-4000:]}"
    assert "sigkill" not in seen, f"launch had to SIGKILL the node:\n{report}\n{log[-4000:]}"
    assert f"exit code {EXIT_DATA_PATH_STUCK}" in seen["exit"][1], f"{report}\n{log[-4000:]}"
    errors = [line for line in log.splitlines() if MARKERS["error"].search(line)]
    assert len(errors) == 1, f"the node's ERROR line (one):\n{log[-4000:]}"
    assert "Traceback" not in log, log[-4000:]
    events = held.events(tmp_path)
    assert events[-1] == "held" and not any(e.startswith("close") for e in events), events


def test_one_ctrl_c_to_the_launch_group_waits_for_a_call_that_returns(ros_env, tmp_path: Path) -> None:
    """SIGINT to launch's whole process group, as a terminal's Ctrl-C: the node gets it, and launch's own
    SIGINT (its stdin is no terminal) milliseconds later. Those copies of one Ctrl-C must not hurry the stop
    (``signal_stop.REPEAT_S``): the held call, released 2 s in, returns within the node's wait, and the node
    tears down as usual: exit 0, no ERROR line, no escalation by launch.

    Relies on launch's own SIGINT reaching the node within ``REPEAT_S`` (2 s) of the group's (0.4 s measured
    on a loaded 2-core machine): later, it counts as a second Ctrl-C and hurries the stop (exit 3, "a second
    stop signal (SIGINT, ..."), which the failure message then says."""
    import os

    from libredgetpu_ros.ros.signal_stop import REPEAT_S

    launch, _supervisor, log_path = _launch_and_hold(ros_env, tmp_path)
    os.killpg(launch.pid, signal.SIGINT)
    seen, ended = _follow(launch, log_path, during=lambda now: now >= 2.0 and (tmp_path / "release").touch())
    log = log_path.read_text(errors="replace")
    report = _report(seen)
    print(f"SIGINT to the launch's process group, the call released after 2 s; launch exited after "
          f"{ended:.2f} s:\n{report}")
    assert "sending signal 'SIGINT'" in log, f"launch sent no SIGINT of its own:\n{log[-4000:]}"
    assert launch.poll() is not None, f"ros2 launch still runs {END_S:.0f} s after SIGINT:\n{log[-4000:]}"
    late = ""
    if "second stop signal (SIGINT" in log:
        late = (f"launch's own SIGINT reached the node {REPEAT_S:g} s or more after the group's (a loaded "
                "machine?): taken for a second Ctrl-C, it hurried the stop\n")
    assert "exit" in seen and "finished cleanly" in seen["exit"][1], f"{late}{report}\n{log[-4000:]}"
    assert "sigterm" not in seen and "error" not in seen, f"{late}{report}\n{log[-4000:]}"
    assert "Traceback" not in log, log[-4000:]
    events = held.events(tmp_path)
    assert "use-after-close" not in events and events[-1] == "close in_flight=0", events
