"""The model readers' CI fuzz budget (docs/reliability.md section 2): what each target's cases cost and what
they end in; report: bench/results/fuzz_budget.md.

Runs exactly the budget of ``test/fuzz/test_fuzz_readers.py`` (its ``CASES``, seed 1, its per-case time and
memory limits) on the three reader targets of ``test/fuzz/targets.py``, ``--repeats`` times, interleaved with
a baseline measured in the same run: the same target's seeds and hot ranges with a ``run`` that only takes
the length of the case (what the harness itself costs a case: building it from ``(seed, i)``, the forked
worker, the pipe). Figures per target: the verdict counts (the same every repeat: cases are seeded), the
workers' CPU time (user + system of the reaped worker processes, ``RUSAGE_CHILDREN``; the cases run there,
not in this thread), its ratio to the baseline's, the wall time, the slowest case and the workers' RSS.
Spreads are min–max over the repeats. The machine is shared (2 cores): the load average is recorded. About
20 s of CPU with the default 3 repeats.

    .venv/bin/python bench/bench_fuzz_budget.py        # writes bench/results/fuzz_budget.md
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()

import argparse  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

from _timing import write_report  # noqa: E402
from libredgetpu_ros.fixtures import fixture  # noqa: E402

OUT = _common.RESULTS / "fuzz_budget.md"


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(harness, target, test) -> tuple[object, float]:
    """(FuzzReport, CPU seconds of the workers it forked and reaped) of one CI budget of ``target``."""
    before = _children_cpu_s()
    report = harness.fuzz(target, test.CASES, seed=1, time_limit_s=test.TIME_LIMIT_S,
                          memory_limit_mb=test.MEMORY_LIMIT_MB)
    return report, _children_cpu_s() - before


def _spread(values: list[float], digits: int, unit: str = "") -> str:
    """"median (min–max)" of the repeats."""
    return (f"{statistics.median(values):.{digits}f}{unit} "
            f"({min(values):.{digits}f}–{max(values):.{digits}f}{unit})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(OUT), help="report file (trial runs: elsewhere)")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    harness = _common.import_test_module("fuzz.harness")
    test = _common.import_test_module("fuzz.test_fuzz_readers")
    targets = _common.import_test_module("fuzz.targets").targets(fixture)
    runs: dict[str, list[tuple[object, float]]] = {}
    for _ in range(args.repeats):  # interleaved: the load changes over seconds
        for name, target in targets.items():
            runs.setdefault(name, []).append(_timed(harness, target, test))
            runs.setdefault(f"{name} baseline", []).append(
                _timed(harness, replace(target, name=f"{name} baseline", run=len), test))
    rows = []
    for name in targets:
        reports = [r for r, _ in runs[name]]
        cpu = [c for _, c in runs[name]]
        base = [c for _, c in runs[f"{name} baseline"]]
        counts = reports[0].counts
        same = all(r.counts == counts for r in reports)
        per_case = [c / test.CASES * 1e3 for c in cpu]
        ratios = [c / b for c, b in zip(cpu, base, strict=True)]
        rows.append(
            f"| {name} | {reports[0].cases:,} | {counts['accepted']:,} | {counts['refused']:,} | "
            f"{counts['untyped']} | {counts['hang']} | {counts['crash']} | {'yes' if same else 'NO'} | "
            f"{_spread(cpu, 2)} | {_spread(per_case, 3)} | "
            f"{_spread([b / test.CASES * 1e3 for b in base], 3)} | "
            f"{_spread(ratios, 1, '×')} | {_spread([r.wall_s for r in reports], 2)} | "
            f"{max(r.slowest[0] for r in reports) * 1e3:.0f} ms | "
            f"{max(r.start_rss_mb for r in reports):.0f} / {max(r.peak_rss_mb for r in reports):.0f} MB |")
    lines = [
        "# Model readers: the CI fuzz budget, per target",
        "",
        f"{platform.machine()}, Python {platform.python_version()}; "
        f"`.venv/bin/python bench/bench_fuzz_budget.py` (`--repeats {args.repeats}`, interleaved). Budget of "
        f"`test/fuzz/test_fuzz_readers.py`: {test.CASES:,} cases per target, seed 1, {test.TIME_LIMIT_S:g} s "
        f"and {test.MEMORY_LIMIT_MB} MiB per case. Worker CPU: user + system time of the forked workers (the "
        "cases run there); baseline: the same seeds and hot ranges with a `run` that only takes the case's "
        "length (the harness's own cost per case), measured in the same run; ratio = target CPU / baseline "
        "CPU, per repeat. Cells: median "
        "(min–max) over the repeats; slowest case and RSS: the largest over the repeats (RSS at the worker's "
        "start is this process's, inherited by fork; under pytest it is larger). Shared machine "
        f"({os.cpu_count()} cores, other engineers' jobs): load average {load_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end.",
        "",
        "| target | cases | accepted | refused (typed) | untyped | hangs | crashes | "
        "counts equal every repeat | worker CPU s | CPU ms / case | baseline CPU ms / case | "
        "ratio to baseline | wall s | slowest case | worker RSS start / peak |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]
    write_report(Path(args.out), lines)


if __name__ == "__main__":
    main()
