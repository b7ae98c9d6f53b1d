"""`libredgetpu-ros tt-worker`: bad arguments are one error line (exit 2); SIGINT/SIGTERM stop it cleanly."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys

import pytest

from .._helpers import one_error_line

pytestmark = [pytest.mark.timeout(60)]

CMD = [sys.executable, "-m", "libredgetpu_ros.cli.main", "tt-worker"]


@pytest.mark.parametrize("args", [["--port", "70000"], ["--managers", "0"], ["--host", "203.0.113.7"],
                                  ["--value-dtype", "U4"], ["--value-dtype", "nonsense"],
                                  ["--framing", "seed", "--key", "k"], ["--key", " "],
                                  ["--key-file", "/nonexistent/tt.key"], ["--session-timeout", "0"]])
def test_bad_arguments_exit_2_with_one_error_line(args):
    done = subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=30)
    one_error_line(done.returncode, done.stderr)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_the_worker_cleanly(sig):
    proc = subprocess.Popen([*CMD, "--port", "0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready and json.loads(proc.stdout.readline())["listening"]["host"] == "127.0.0.1"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["stats"]["rejected_total"] == 0
    assert "Traceback" not in err


def _private_netns() -> bool:
    with open("/proc/net/dev") as f:
        return [line.split(":")[0].strip() for line in f.readlines()[2:]] == ["lo"]


@pytest.mark.skipif(not _private_netns(), reason="binds 0.0.0.0: only inside tools/ros_sandbox.sh (lo only)")
def test_non_loopback_without_a_key_warns():
    proc = subprocess.Popen([*CMD, "--host", "0.0.0.0", "--port", "0", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready and proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert err.startswith("warning: tt-worker bound to 0.0.0.0 without --key")


def test_a_keyed_worker_answers_only_the_key_holder(tmp_path):
    import asyncio
    from pathlib import Path

    from libredgetpu_ros.errors import DeviceTimeoutError
    from libredgetpu_ros.teamtensor import DataSource

    from .._helpers import load_helper

    training = load_helper(Path(__file__).resolve().parent / "_training.py")
    key_file = tmp_path / "tt.key"
    key_file.write_text("robot-cell-7\n")

    async def run(address) -> None:
        async with DataSource(address, key=b"robot-cell-7", timeout=0.05) as src:
            await src.hello(timeout=5.0)
            await src.assign_pipeline(1)
            assert await src.managers_available() == 4
        async with DataSource(address, timeout=0.02, retries=3) as stranger:  # CRC-32 tags: no key
            with pytest.raises(DeviceTimeoutError):
                await stranger.hello(timeout=0.5)
        async with DataSource(address, key=b"robot-cell-8", timeout=0.02, retries=3) as wrong:
            with pytest.raises(DeviceTimeoutError):
                await wrong.managers_available()

    with training.worker_process("--key-file", str(key_file)) as worker:
        asyncio.run(run(worker.address))
    assert worker.stats["rejected"]["integrity"] >= 2
    assert worker.stats["sessions"] == {"claimed": 1, "released": 1}


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_key_file_that_is_a_fifo_or_a_device_is_refused(tmp_path, kind):
    """Issue 30: ``--key-file`` / the trainer's ``auth_key_file`` naming a FIFO blocked (the trainer node's
    configure went unanswered, found by test/ros/test_services_hostile.py), ``/dev/zero`` read forever."""
    import os

    path = tmp_path / "key"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    done = subprocess.run([*CMD, "--port", "0", "--key-file", str(path)], capture_output=True, text=True,
                          timeout=30)
    one_error_line(done.returncode, done.stderr)
    assert ("is a FIFO" if kind == "fifo" else "is a device") in done.stderr
