"""Per-bag functions for ``fleet.run_local``'s ``runner`` in tests (module level: the spawned workers import
them by name): one bag that never ends, the others quick."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def stuck_on_b1(job: Any, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Bag ``b1`` sleeps forever (a read that never returns), after leaving a partial output in staging;
    every other bag is done at once."""
    if job.name == "b1":
        Path(job.staging).mkdir(parents=True, exist_ok=True)
        (Path(job.staging) / "partial").write_bytes(b"x")
        while True:
            time.sleep(3600)
    return {"bag": job.name, "status": "done", "error": None, "worker": os.getpid(), "frames": 1}


def fails_fast(job: Any, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every bag fails at once, the same way on any worker, without importing the processing (ROS-free):
    what a pool test exercises is the pool."""
    return {"bag": job.name, "status": "error", "error": f"config {job.config} does not exist",
            "worker": os.getpid(), "frames": 0}
