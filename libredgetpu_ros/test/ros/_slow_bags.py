"""Per-bag functions for ``fleet.run_local``'s ``runner`` in tests (module level: the spawned workers import
them by name): one bag that never ends, the others quick; and a Ray task's stand-in process
(``ray_task_slow``)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def stuck_on_b1(job: Any, log: Callable[[str], None] | None = None,
                publishing: Callable[[], None] | None = None) -> dict[str, Any]:
    """Bag ``b1`` sleeps forever (a read that never returns), after leaving a partial output in staging;
    every other bag is done at once."""
    if job.name == "b1":
        Path(job.staging).mkdir(parents=True, exist_ok=True)
        (Path(job.staging) / "partial").write_bytes(b"x")
        while True:
            time.sleep(3600)
    return {"bag": job.name, "status": "done", "error": None, "worker": os.getpid(), "frames": 1}


def fails_fast(job: Any, log: Callable[[str], None] | None = None,
               publishing: Callable[[], None] | None = None) -> dict[str, Any]:
    """Every bag fails at once, the same way on any worker, without importing the processing (ROS-free):
    what a pool test exercises is the pool."""
    return {"bag": job.name, "status": "error", "error": f"config {job.config} does not exist",
            "worker": os.getpid(), "frames": 0}


def _fake_processing(slow: str, seconds: float) -> None:
    """In this process, ``fleet.run_bag``'s processing replaced by one that makes a one-file output at once,
    slow where ``slow`` says: ``"publish"``, the rename into place returns ``seconds`` after renaming (a slow
    mount's directory sync); ``"process"``, the processing ends that late."""
    from types import SimpleNamespace

    from libredgetpu_ros.ros import bag_processing

    from libredgetpu_ros import atomicio

    rename = atomicio.rename_noreplace
    counts = {"frames": 1, "processed": 1, "written": 1, "failed": 0, "failures": {}, "fps": 1.0,
              "elapsed_s": 0.0, "setup_s": 0.0, "cpu_s": 0.0, "topics": {}}

    def process_bag(input_bag: Any, output_bag: Any, config: Any, **_: Any) -> Any:
        Path(output_bag).mkdir(parents=True)
        (Path(output_bag) / "bag.mcap").write_bytes(b"x")
        if slow == "process":
            time.sleep(seconds)
        return SimpleNamespace(frames=1, processed=1, as_dict=lambda: counts)

    def rename_noreplace(src: Any, dst: Any) -> None:
        rename(src, dst)
        if slow == "publish":
            time.sleep(seconds)

    bag_processing.process_bag = process_bag  # run_bag imports both when it runs
    atomicio.rename_noreplace = rename_noreplace


def publishes_slowly(job: Any, log: Callable[[str], None] | None = None,
                     publishing: Callable[[], None] | None = None) -> dict[str, Any]:
    """``fleet.run_bag`` (a local worker's runner) on a bag whose rename into place returns 6 s late (twice
    the test's bag timeout)."""
    from libredgetpu_ros.ros.fleet import run_bag

    _fake_processing("publish", 6.0)
    return run_bag(job, log, publishing)


def ray_task_slow(job: dict[str, Any], bag_timeout_s: float, slow: str, result: str) -> None:
    """``fleet_ray._ray_bag`` in this process (a Ray worker's stand-in) on a bag processed at once but slow
    where ``slow`` says (``_fake_processing``, by ``2 * bag_timeout_s``). The task's record is written to
    ``result`` (as JSON) if the task returns."""
    from libredgetpu_ros.ros import fleet_ray

    _fake_processing(slow, 2 * bag_timeout_s)
    record = fleet_ray._ray_bag(job, bag_timeout_s)
    Path(result).write_text(json.dumps(record))
