"""How long a cancelled reservoir fit can keep a teardown waiting, at the largest fit the node accepts.

``ReservoirComputer.fit(check=)`` (the node's ``~/fit`` cancel, ``ros/reservoir/fit_run.py``) is checked every
``CHECK_STEPS`` steps of the drive, before each ``ridge.BLOCK_ROWS`` block of the normal equations and of the
train prediction, and before the solve. A cancel waits at most the longest stretch between two checks; before
them it waited for the whole fit (one check before it). This run: a fit of the most states the node takes
(``MAX_FIT_BYTES`` at N = 1024, M = 1), every check's time stamped, the stretches grouped by stage; wall time
(what a teardown waits) and, alongside, the thread CPU time of the whole fit with BLAS on one thread (so the
thread sees all the work). Repeats: ``REPEATS``; the machine's load average is stated.

    .venv/bin/python bench/bench_reservoir_fit_cancel.py     # writes bench/results/reservoir_fit_cancel.md
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()  # before NumPy loads BLAS: thread CPU time must see all the work

import os  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from _timing import write_report  # noqa: E402
from libredgetpu_ros.matmul import MatMulEngine  # noqa: E402
from libredgetpu_ros.robotics.reservoir import CHECK_STEPS, ReservoirComputer, ReservoirConfig  # noqa: E402
from libredgetpu_ros.robotics.ridge import BLOCK_ROWS  # noqa: E402
from libredgetpu_ros.ros.reservoir.node import MAX_FIT_BYTES, fit_bytes  # noqa: E402

RESULTS = _common.RESULTS / "reservoir_fit_cancel.md"
UNITS, INPUTS, WASHOUT, REPEATS = 1024, 1, 100, 3


def one_fit(rc: ReservoirComputer, series: np.ndarray) -> dict[str, float]:
    """Seconds: the whole fit (wall, thread CPU) and the longest stretch between checks per stage."""
    stamps: list[float] = []
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    rc.fit(series[:-1], series[1:], check=lambda: stamps.append(time.perf_counter()))
    wall1, cpu1 = time.perf_counter(), time.thread_time()
    gaps = np.diff(np.array([*stamps, wall1]))
    steps = len(series) - 1
    drive = -(-steps // CHECK_STEPS)
    blocks = -(-(steps - WASHOUT) // BLOCK_ROWS)
    assert len(stamps) == drive + 2 * blocks + 1, (len(stamps), drive, blocks)
    return {"wall": wall1 - wall0, "cpu": cpu1 - cpu0, "drive": gaps[:drive].max(),
            "sums": gaps[drive:drive + blocks].max(), "solve": gaps[drive + blocks],
            "prediction": gaps[drive + blocks + 1:].max()}


def main() -> None:
    steps = MAX_FIT_BYTES // fit_bytes(1, INPUTS, UNITS)
    t = np.arange(steps) * 0.05
    series = np.sin(t)[:, None]
    load = os.getloadavg()
    with MatMulEngine.from_template(UNITS, backend="cpu") as engine:
        rc = ReservoirComputer(engine, ReservoirConfig(input_dim=INPUTS, seed=1, washout=WASHOUT))
        runs = [one_fit(rc, series) for _ in range(REPEATS)]
    load_after = os.getloadavg()

    def cell(key: str, scale: float = 1e3, digits: int = 0) -> str:
        values = sorted(run[key] * scale for run in runs)
        return f"{values[len(values) // 2]:.{digits}f} ({values[0]:.{digits}f}–{values[-1]:.{digits}f})"

    longest = [max(run[k] for k in ("drive", "sums", "solve", "prediction")) for run in runs]
    share = sorted(w / run["wall"] for w, run in zip(longest, runs, strict=True))
    write_report(RESULTS, [
        "# Reservoir fit: how long a cancel waits",
        "",
        f"`bench/bench_reservoir_fit_cancel.py` on {platform.machine()}, Python {platform.python_version()}, "
        f"NumPy {np.__version__}; BLAS on one thread; {REPEATS} fits, median (min–max); load average "
        f"{load[0]:.1f} before, {load_after[0]:.1f} after (2 cores shared with other jobs).",
        "",
        f"The largest fit the node accepts: N = {UNITS}, M = {INPUTS}, {steps:,} states "
        f"({fit_bytes(steps, INPUTS, UNITS) / 2**20:.0f} MiB counted against MAX_FIT_BYTES), washout "
        f"{WASHOUT}; checks every {CHECK_STEPS} drive steps and {BLOCK_ROWS:,}-row blocks.",
        "",
        "| whole fit, wall s | whole fit, thread CPU s | longest wait in the drive, ms | in a block of the "
        "normal equations, ms | the solve, ms | in a block of the prediction, ms |",
        "|---|---|---|---|---|---|",
        f"| {cell('wall', 1, 1)} | {cell('cpu', 1, 1)} | {cell('drive')} | {cell('sums')} | "
        f"{cell('solve')} | {cell('prediction')} |",
        "",
        f"Before the checks inside `fit`, a cancel waited for the whole fit (the wall column); now for the "
        f"longest stretch, {share[0] * 100:.1f}–{share[-1] * 100:.1f} % of it in these runs.",
    ])


if __name__ == "__main__":
    main()
