"""``process-bags --engine ray`` on a real local Ray cluster, started and stopped by the command (2 CPUs, a
96 MiB object store, no dashboard, 127.0.0.1 only; the test bounds it to 300 s): the corpus of
test_process_bags.py gives the same outputs as ``--jobs 1``, message for message, the broken bag is
reported and the rest processed, no Ray process looked its address up through 8.8.8.8 (Ray's logs, in
a private RAY_TMPDIR; test_ray_network.py has the sockets), and no Ray process outlives the command."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_process_bags import bag_messages, config, make_corpus, outputs
from .test_ray_network import no_address_probe, ray_temp_dir

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def _ray_processes(since: float) -> list:
    import psutil

    found = []
    for proc in psutil.process_iter(["name", "create_time", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["create_time"] >= since and ("raylet" in cmdline or "gcs_server" in cmdline
                                                   or "ray::" in (proc.info["name"] or "")):
            found.append(proc)
    return found


def test_ray_engine_gives_the_local_outputs(tmp_path: Path, fixture_path, ros_env) -> None:
    pytest.importorskip("ray", reason="ray is installed by make setup (requirements.lock.txt)")
    from libredgetpu_ros.cli import main as cli

    inputs = make_corpus(tmp_path / "in", fixture_path)
    cfg = config(tmp_path, fixture_path)
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert cli.main(["process-bags", "--config", str(cfg), "-o", str(local), "--jobs", "1", "--no-progress",
                     *map(str, inputs)]) == 1
    began = time.time() - 1
    command = [sys.executable, "-m", "libredgetpu_ros.cli.main", "process-bags", "--engine", "ray", "--jobs",
               "2", "--config", str(cfg), "-o", str(remote), "--json", "--no-progress",
               "--bag-timeout", "240", *map(str, inputs)]  # each task's watchdog armed and cancelled
    with ray_temp_dir() as ray_tmp:
        done = subprocess.run(command, env={**ros_env.env, "RAY_TMPDIR": str(ray_tmp)}, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 1, done.stderr[-3000:]
        no_address_probe(done.stderr, ray_tmp)
    summary = json.loads(done.stdout)
    assert summary["engine"] == "ray" and summary["totals"]["done"] == 6
    (broken,) = [r for r in summary["bags"] if r["status"] != "done"]
    assert broken["bag"] == "broken" and "cannot read bag" in broken["error"]
    assert set(outputs(remote)) == set(outputs(local)) == {"a", "b", "r1/c", "r2/c", "r2/d", "e"}
    for name, bag in outputs(local).items():
        assert bag_messages(outputs(remote)[name]) == bag_messages(bag), name
    deadline = time.monotonic() + 30
    while _ray_processes(began) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_processes(began), "Ray processes outlived the command"
