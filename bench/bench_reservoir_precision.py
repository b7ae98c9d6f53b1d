"""The reservoir's precision scheme (``passes``): held-out one-step NRMSE against the float64 network with the
same weights, and the CPU twin's time per step, for the table of docs/robotics.md ("Reservoir precision").

The NRMSE comes from the precision test's own ``compare`` (test/robotics/test_reservoir_precision.py: tanh
reservoir, ``input_scaling`` 1, seed 1, ridge readout fitted on steps 100-2000 of 2,600 standardised steps,
NRMSE held out on the rest; Mackey-Glass tau = 17 and Lorenz-x made there), so the table and the test compute
the same thing. Baseline, same run: the float64 network (the ratio columns). Step time: thread CPU µs of
``ReservoirComputer.step`` on the CPU twin (``_timing.spread_us``: median and p10-p90 of ``STEPS`` steps of
the Mackey-Glass series). BLAS on one thread. The machine is shared (2 cores, ~8 jobs): the load average is
recorded. About 1 min of CPU. Also the test's dithered step error against one pass's (same states).

    .venv/bin/python bench/bench_reservoir_precision.py    # writes bench/results/reservoir_precision.md
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()  # before NumPy loads BLAS: thread CPU time must see all the work

import os  # noqa: E402
import platform  # noqa: E402

from _timing import spread_us, write_report  # noqa: E402
from libredgetpu_ros.matmul import MatMulEngine  # noqa: E402
from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig  # noqa: E402

OUT = _common.RESULTS / "reservoir_precision.md"
CASES = {256: (1, 9, 17, 25), 1024: (1, 17, 25, 33)}
SYSTEMS = {"mackey_glass": "Mackey-Glass", "lorenz_x": "Lorenz-x"}
STEPS = 300
STEP_ERROR_STEPS = 150  # the precision test's default


def main() -> None:
    load_start = os.getloadavg()[0]
    test = _common.import_test_module("robotics.test_reservoir_precision")
    every = sorted({p for passes in CASES.values() for p in passes})
    header = ("| | float64, same weights | " + " | ".join(f"{p} pass{'es' if p > 1 else ''}" for p in every)
              + " |")
    rows = []
    for n, passes in CASES.items():
        for system, label in SYSTEMS.items():
            result = test.compare(n, system, passes)
            base = result["float64"]
            cells = [f"{result[f'passes={p}'] / base:.2f}×" if p in passes else "" for p in every]
            rows.append(f"| {label}, N={n} | {base:.5f} | " + " | ".join(cells) + " |")
    errors = test.dithered_step_errors(9, STEP_ERROR_STEPS)
    series = test.series_of("mackey_glass")
    for n, passes in CASES.items():
        cells = {}
        with MatMulEngine.from_template(n, backend="cpu") as engine:
            for p in passes:
                config = ReservoirConfig(input_dim=1, input_scaling=1.0, seed=1, passes=p)
                rc = ReservoirComputer(engine, config)
                med, p10, p90 = spread_us(rc.step, list(series), STEPS)
                cells[p] = f"{med:.0f} ({p10:.0f}–{p90:.0f})"
        rows.append(f"| step µs, N={n} (CPU twin) | | " + " | ".join(cells.get(p, "") for p in every) + " |")
    lines = ["# Reservoir precision: NRMSE against the float64 network, and the step's cost", "",
             f"{platform.machine()}, Python {platform.python_version()}; "
             "`.venv/bin/python bench/bench_reservoir_precision.py`. NRMSE: the precision test's `compare` "
             "(held-out one-step NRMSE; the float64 column is the network with the same weights and no "
             "quantization, the pass columns its multiple). Step: thread CPU µs of `ReservoirComputer.step` "
             f"on the CPU twin, median (p10–p90) of {STEPS} steps. Shared machine (2 cores, ~8 jobs): load "
             f"average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.", "",
             header, "|---|---:|" + "---:|" * len(every), *rows, "",
             "Dithered step from the same states (the precision test's `dithered_step_errors`: N=256, "
             f"seed 3, {STEP_ERROR_STEPS} Mackey-Glass steps), mean RMS error against the float64 step with "
             f"the engine's int8 weights: 9 passes {errors['dithered']:.6f}, one pass "
             f"{errors['one_pass']:.6f} ({errors['one_pass'] / errors['dithered']:.2f}× larger); worst "
             f"excess over the step's own bound {errors['bound_excess']:.3g} (≤ 0: within it)."]
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
