"""``ros/lifetime.py`` on real processes, no ROS: a process that armed :func:`stop_with_parent` gets SIGTERM
when its parent exits; one told its launcher's PID stops at once when that launcher is already gone (the
window before it could arm); ``LIBREDGETPU_ROS_STOP_WITH_PARENT=0`` leaves it running. The node-level
check (every node of every launch file, ``ros2 launch`` killed by SIGTERM) is test_launch_sigterm.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

# The watched process: marks SIGTERM in a file and exits; prints whether it armed, then waits.
CHILD = """
import signal, sys, time
from pathlib import Path
from libredgetpu_ros.ros.lifetime import stop_with_parent
marker = Path(sys.argv[1])
def on_term(signum, frame):
    marker.write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("armed" if stop_with_parent() else "not armed", flush=True)
time.sleep(30)
"""
# Its parent: starts it, passes its PID and first line on, and exits.
PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)  # run() below waits for EOF on its pipes
print(child.pid, child.stdout.readline().strip(), flush=True)
"""


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(pid)


def _orphan(tmp_path: Path, env: dict[str, str]) -> tuple[int, str, Path]:
    marker = tmp_path / "marker"
    out = subprocess.run([sys.executable, "-c", PARENT, CHILD, str(marker)], capture_output=True, text=True,
                         env=env, timeout=30, check=True).stdout.split(maxsplit=1)
    return int(out[0]), out[1].strip(), marker


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_parents_exit_is_a_sigterm(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBREDGETPU_ROS_STOP")}
    pid, armed, marker = _orphan(tmp_path, env)
    assert armed == "armed"
    assert _wait_gone(pid), "the child outlived its parent"
    assert marker.read_text() == "SIGTERM"  # stopped through its handler, not killed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_launcher_gone_before_arming_stops_the_node_at_once(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    marker = tmp_path / "marker"
    env = dict(os.environ, LIBREDGETPU_ROS_LAUNCH_PID=gone.stdout.strip())
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(marker)], env=env, stdout=subprocess.PIPE)
    assert child.wait(timeout=30) == 0 and marker.read_text() == "SIGTERM"
    # Its launcher alive (this process): armed, running.
    env["LIBREDGETPU_ROS_LAUNCH_PID"] = str(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "other")], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "armed" and child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_opting_out_keeps_the_process(tmp_path: Path) -> None:
    pid, armed, marker = _orphan(tmp_path, dict(os.environ, LIBREDGETPU_ROS_STOP_WITH_PARENT="0"))
    try:
        assert armed == "not armed"
        assert not _wait_gone(pid, 1.0) and not marker.exists()
    finally:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)
