"""SIGTERM to ``ros2 launch`` stops every node it started (issue 33).

``ros2 launch`` handles SIGTERM by cancelling its own task and exiting, without signalling its children
(launch_service.py: "using SIGTERM can result in orphaned processes"; ros2/launch#666): before
``ros/lifetime.py`` the node went on running, reparented to PID 1. Here one ``ros2 launch`` runs every
launch file of this package (this checkout's files, each in a namespace of its own, without autostart so no
model is needed; the perception one with ``rviz:=true`` and a stand-in rviz2 that only sleeps), the processes
it started are read from /proc, the launch gets SIGTERM, and each of them must be gone within
:data:`GONE_S`.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(240)]

LAUNCH_DIR = Path(__file__).resolve().parents[2] / "launch"
# launch file -> the node name it gives its node
NODES = {"control": "control_node", "flow": "flow", "looming": "looming", "perception": "perception",
         "recognition": "recognition", "reservoir": "reservoir", "spu": "spu", "tracker": "tracker",
         "trainer": "trainer_node"}
START_S = 120.0  # nine Python node processes starting together on a loaded 2-core machine
GONE_S = 30.0

ALL_LAUNCH = '''
from launch import LaunchDescription
from launch.actions import GroupAction, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource

FILES = {files!r}


def generate_launch_description():
    return LaunchDescription([
        GroupAction([IncludeLaunchDescription(PythonLaunchDescriptionSource(path), launch_arguments={{
            "namespace": "/sigterm_" + name, "autostart": "false",
            **({{"rviz": "true"}} if name == "perception" else {{}})}}.items())], scoped=True)
        for name, path in FILES.items()])
'''


def _children() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def _descendants(root: int) -> set[int]:
    parents = _children()
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited orphan waiting for its new parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "<gone>"


def test_sigterm_to_ros2_launch_stops_every_node(ros_env) -> None:
    from lifecycle_msgs.srv import GetState

    ros2 = shutil.which("ros2")
    assert ros2, "ros2 is not on PATH (run under tools/ros_sandbox.sh after make setup)"
    fake_rviz = ros_env.work_dir / "bin" / "rviz2"  # the PyPI wheels have no rviz2
    fake_rviz.parent.mkdir()
    fake_rviz.write_text("#!/bin/sh\nexec sleep 300\n")
    fake_rviz.chmod(0o755)
    ros_env.env["PATH"] = f"{fake_rviz.parent}{os.pathsep}{ros_env.env.get('PATH', '')}"
    launch_file = ros_env.work_dir / "all.launch.py"
    launch_file.write_text(ALL_LAUNCH.format(files={n: str(LAUNCH_DIR / f"{n}.launch.py") for n in NODES}))
    launch = ros_env.spawn([ros2, "launch", str(launch_file)], "launch", expect_exit=True)  # ends by SIGTERM

    probe, _ = ros_env.probe("sigterm_probe")
    clients = {name: probe.create_client(GetState, f"/sigterm_{launch_name}/{name}/get_state")
               for launch_name, name in NODES.items()}
    deadline = time.monotonic() + START_S
    for name, client in clients.items():  # each node spins: its main() and signal handling are in place
        assert client.wait_for_service(timeout_sec=max(0.1, deadline - time.monotonic())), \
            f"{name} did not come up within {START_S:.0f} s:\n{(ros_env.work_dir / 'launch.log').read_text()}"
    started = _descendants(launch.pid)
    nodes = {pid for pid in started if "/libredgetpu_ros/" in _cmdline(pid) or "_node" in _cmdline(pid)}
    assert len(nodes) == len(NODES), {pid: _cmdline(pid) for pid in started}
    deadline = time.monotonic() + 20.0  # rviz2 (the stand-in) is up once it exec'ed its sleep
    while not any(_cmdline(p).startswith("sleep 300") for p in _descendants(launch.pid)):
        assert time.monotonic() < deadline, "the stand-in rviz2 did not start"
        time.sleep(0.1)
    started = _descendants(launch.pid)

    launch.send_signal(signal.SIGTERM)
    launch.wait(timeout=15)
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline and any(_running(pid) for pid in started):
        time.sleep(0.2)
    left = {pid: f"{_cmdline(pid)} (parent {_children().get(pid)})" for pid in started if _running(pid)}
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running {GONE_S:.0f} s after SIGTERM to ros2 launch: {left}"
