"""What one small NumPy operation costs at the PoseNet sampler's sizes, broadcast or not, for the design notes
of docs/postprocessing.md (the decoder writes into buffers of equal shapes); report:
bench/results/numpy_call_cost.md.

Operands are the sampler's: float32 ``(2, 64)`` (y/x planes of a 64-root batch,
``postprocess/posenet_sampler.py``), written into a preallocated ``out``. Candidates: a same-shape multiply
(the baseline), the same multiply against a Python float, a NumPy float32 scalar, a ``(2, 1)`` column and a
``(64,)`` row (broadcasts), and a same-shape add. Each timed call runs ``LOOP`` operations; thread CPU time
per operation, candidates interleaved round by round (``_timing.round_medians_us``), median (lowest–highest)
of the round medians; ratio = candidate / same-shape multiply of the same run. The machine is shared (2
cores): the load average is recorded. About 1 s of CPU.

    .venv/bin/python bench/bench_numpy_call_cost.py        # writes bench/results/numpy_call_cost.md
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()

import os  # noqa: E402
import platform  # noqa: E402

import numpy as np  # noqa: E402
from _timing import ratio, round_medians_us, write_report  # noqa: E402

OUT = _common.RESULTS / "numpy_call_cost.md"
LOOP = 1000
ROUNDS, CALLS = 7, 15


def _looped(op) -> object:
    def run() -> None:
        for _ in range(LOOP):
            op()
    return run


def main() -> None:
    load_start = os.getloadavg()[0]
    rng = np.random.default_rng(0)
    a, b = (rng.random((2, 64), dtype=np.float32) for _ in range(2))
    out = np.empty_like(a)
    column, row, scalar = b[:, :1].copy(), b[0].copy(), np.float32(0.5)
    ops = {
        "same shape: `multiply(a, b, out=out)`": lambda: np.multiply(a, b, out=out),
        "same shape: `add(a, b, out=out)`": lambda: np.add(a, b, out=out),
        "Python float: `multiply(a, 0.5, out=out)`": lambda: np.multiply(a, 0.5, out=out),
        "NumPy scalar: `multiply(a, np.float32(0.5), out=out)`": lambda: np.multiply(a, scalar, out=out),
        "(2, 1) column: `multiply(a, column, out=out)`": lambda: np.multiply(a, column, out=out),
        "(64,) row: `multiply(a, row, out=out)`": lambda: np.multiply(a, row, out=out),
    }
    stats = round_medians_us({name: _looped(op) for name, op in ops.items()}, ROUNDS, CALLS)
    per_op = {name: tuple(v / LOOP for v in s) for name, s in stats.items()}
    base = per_op[next(iter(ops))][0]
    rows = [f"| {name} | {s[0]:.3f} ({s[1]:.3f}–{s[2]:.3f}) | {ratio(s[0], base, 2)} |"
            for name, s in per_op.items()]
    lines = [
        "# One small NumPy operation: same shape vs broadcast (PoseNet sampler sizes)",
        "",
        f"{platform.machine()}, Python {platform.python_version()}, NumPy {np.__version__}; "
        "`.venv/bin/python bench/bench_numpy_call_cost.py`. Operands float32 (2, 64), output preallocated. "
        f"Thread CPU µs per operation ({LOOP:,} per timed call), {ROUNDS} interleaved rounds of {CALLS} "
        "calls: median (lowest–highest) of the round medians; ratio against the same-shape multiply of this "
        "run. "
        f"Shared machine ({os.cpu_count()} cores, other engineers' jobs): load average {load_start:.1f} at "
        f"the start, {os.getloadavg()[0]:.1f} at the end.",
        "",
        "| operation | µs per operation | / same-shape multiply |",
        "|---|---:|---:|",
        *rows,
    ]
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
