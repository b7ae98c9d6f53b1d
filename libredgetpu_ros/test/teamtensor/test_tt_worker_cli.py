"""`libredgetpu-ros tt-worker`: bad arguments are one error line (exit 2); SIGINT/SIGTERM stop it cleanly."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.timeout(60)]

CMD = [sys.executable, "-m", "libredgetpu_ros.cli.main", "tt-worker"]


@pytest.mark.parametrize("args", [["--port", "70000"], ["--managers", "0"], ["--host", "203.0.113.7"]])
def test_bad_arguments_exit_2_with_one_error_line(args):
    done = subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


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
