"""``process-bags``' local worker pool (``ros/fleet.run_local``): a worker that dies while idle, between two
bags (killed, out of memory), is replaced and the bag handed to it runs on the fresh one; the run goes on
(the send to the dead worker's pipe was a BrokenPipeError that ended the whole corpus)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any


def _wait_dead(pid: int, timeout_s: float = 10.0) -> None:
    """Until ``pid`` (a child of this process) has exited: a zombie or gone, its pipe ends closed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.02)
    raise AssertionError(f"worker {pid} still alive {timeout_s} s after SIGKILL")


def test_a_worker_killed_between_bags_is_replaced_and_the_run_goes_on(tmp_path: Path) -> None:
    from libredgetpu_ros.ros.fleet import BagJob, run_local

    # Bags that fail fast and the same way on any worker (their config does not exist): what is tested is
    # the pool, not the processing (test/bags/test_process_bags.py runs real corpora through it).
    jobs = [BagJob(name=f"b{i}", input=str(tmp_path / f"in{i}"), output=str(tmp_path / "out" / f"b{i}"),
                   staging=str(tmp_path / "staging" / str(i)), config=str(tmp_path / "absent.yaml"))
            for i in range(3)]
    records: list[dict[str, Any]] = []
    killed: set[int] = set()

    def on_record(record: dict[str, Any]) -> None:
        records.append(record)
        pid = record["worker"]
        if pid not in killed and pid != os.getpid():  # every worker dies idle after its first bag
            killed.add(pid)
            os.kill(pid, signal.SIGKILL)
            _wait_dead(pid)

    run_local(jobs, 2, on_record, quiet=True)
    assert sorted(r["bag"] for r in records) == ["b0", "b1", "b2"]
    assert all(r["status"] == "error" and "absent.yaml" in r["error"] for r in records), records
    assert len({r["worker"] for r in records}) == 3  # the third bag ran on a fresh worker
