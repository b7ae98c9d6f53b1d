"""The venv as a ROS install (what `make setup` builds): `ros2 launch`, `ros2 run`, `ros2 lifecycle`,
`ros2 param`, `ros2 pkg` from .venv/bin, as a user types them after `source tools/env.sh`.

`ros2 launch` / `ros2 run` start in their own process group and are stopped the way Ctrl-C stops them: SIGINT
to the whole group (a background job of a non-interactive shell would ignore SIGINT). Clean exit is 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow, pytest.mark.timeout(120)]

ROS2 = str(Path(sys.prefix) / "bin" / "ros2")
WAIT_S = 30.0


def _env(ros_env: Any) -> dict[str, str]:
    env = dict(ros_env.env)
    env["AMENT_PREFIX_PATH"] = sys.prefix  # what tools/env.sh sets
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}:{env.get('PATH', '')}"
    return env


def _ros2(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([ROS2, *args], env=env, capture_output=True, text=True, timeout=WAIT_S, check=False)
    return done.stdout + done.stderr


def _start(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([ROS2, *args], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_state(env: dict[str, str], node: str, wanted: str) -> str:
    deadline, out = time.monotonic() + WAIT_S, ""
    while time.monotonic() < deadline:
        out = _ros2(env, "lifecycle", "get", node, "--no-daemon", "--spin-time", "2")
        if out.startswith(wanted):
            break
        time.sleep(0.5)
    return out


def _stop(proc: subprocess.Popen) -> int:
    """Ctrl-C to the process group; the exit code (SIGKILL after WAIT_S, then the test fails)."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def test_ros2_launch_lifecycle_param_and_ctrl_c(ros_env, tmp_path: Path) -> None:
    import yaml

    env = _env(ros_env)
    params = tmp_path / "control.yaml"
    params.write_text(yaml.safe_dump({"/**/control_node": {"ros__parameters": {
        "backend": "cpu", "template": 256, "state_size": 4, "command_size": 2, "stale_timeout": 2.5}}}))
    executables = _ros2(env, "pkg", "executables", "libredgetpu_ros")
    assert "libredgetpu_ros control_node" in executables and "libredgetpu_ros perception_node" in executables
    log = tmp_path / "launch.log"
    proc = _start(env, log, "launch", "libredgetpu_ros", "control.launch.py", f"params_file:={params}",
                  "namespace:=cli")
    try:
        state = _wait_state(env, "/cli/control_node", "active")
        assert state.startswith("active"), f"{state}\n{log.read_text()}"
        # Without the daemon each call discovers the graph afresh: give discovery (0.1-3 s) its time.
        value = _ros2(env, "param", "get", "/cli/control_node", "stale_timeout",
                      "--no-daemon", "--spin-time", "5")
        assert "Double value is: 2.5" in value, value
        assert _stop(proc) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "process has finished cleanly" in log.read_text()


def test_ros2_run_starts_an_unconfigured_node(ros_env, tmp_path: Path) -> None:
    env = _env(ros_env)
    log = tmp_path / "run.log"
    proc = _start(env, log, "run", "libredgetpu_ros", "control_node", "--ros-args", "-r", "__ns:=/run")
    try:
        state = _wait_state(env, "/run/control_node", "unconfigured")
        assert state.startswith("unconfigured"), f"{state}\n{log.read_text()}"
        assert _stop(proc) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
