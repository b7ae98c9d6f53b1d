"""Fuzz targets' budgets as the docs quote them (docs/reliability.md): what each target's cases cost and what
they end in; reports: bench/results/fuzz_budget.md (``--suite readers``), fuzz_budget_<suite>.md for the
others.

Suites: ``readers`` runs exactly the CI budget of ``test/fuzz/test_fuzz_readers.py`` (its ``CASES``, seed 1,
its per-case time and memory limits) on the three reader targets of ``test/fuzz/targets.py`` (section 2);
``images`` runs the long runs section 6 quotes: 100,000 cases, seed 2, 2 s and 1 GiB per case, of
``image_file`` (``test/fuzz/image_targets.py``) and ``compressed_frame``
(``test/fuzz/test_fuzz_compressed_frames.py``); ``text`` and ``services`` the CI budgets of
``test/fuzz/test_fuzz_text.py`` (section 11) and ``test/fuzz/test_fuzz_services.py`` (section 13: the learned-
state files and requests to live nodes, so run it inside ``tools/ros_sandbox.sh``). Each target runs
``--repeats`` times, interleaved with a baseline measured in the same run: the same target's seeds and hot
ranges with a ``run`` that only takes the length of the case (what the harness itself costs a case: building
it from ``(seed, i)``, the forked worker, the pipe). Figures per target: the verdict counts (the same every
repeat: cases are seeded), the workers' CPU time (user + system of the reaped worker processes,
``RUSAGE_CHILDREN``; the cases run there, not in this thread), its ratio to the baseline's, the wall time, the
slowest case and the workers' RSS. Spreads are min–max over the repeats. The machine is shared (2 cores): the
load average is recorded. CPU: readers about 20 s with the default 3 repeats, images about 1 min with its
default 1, text about 30 s, services about 10 s.

    .venv/bin/python bench/bench_fuzz_budget.py                  # writes bench/results/fuzz_budget.md
    .venv/bin/python bench/bench_fuzz_budget.py --suite images   # fuzz_budget_images.md
    .venv/bin/python bench/bench_fuzz_budget.py --suite text     # fuzz_budget_text.md
    tools/ros_sandbox.sh .venv/bin/python bench/bench_fuzz_budget.py --suite services
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()

import argparse  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402

from _timing import write_report  # noqa: E402
from libredgetpu_ros.fixtures import fixture  # noqa: E402


@dataclass(frozen=True)
class Run:
    """One target's budget: ``cases`` from ``seed`` with these per-case limits."""
    target: object  # fuzz.harness.FuzzTarget
    cases: int
    seed: int
    time_limit_s: float
    memory_limit_mb: int


@dataclass(frozen=True)
class Suite:
    title: str
    out: str  # file under bench/results/
    repeats: int  # default
    describe: Callable[[], str]  # what the budget is (the report's header)
    runs: Callable[[], dict[str, Run]]


def _readers() -> dict[str, Run]:
    test = _common.import_test_module("fuzz.test_fuzz_readers")
    targets = _common.import_test_module("fuzz.targets").targets(fixture)
    return {name: Run(t, test.CASES, 1, test.TIME_LIMIT_S, test.MEMORY_LIMIT_MB)
            for name, t in targets.items()}


def _readers_budget() -> str:
    test = _common.import_test_module("fuzz.test_fuzz_readers")
    return (f"Budget of `test/fuzz/test_fuzz_readers.py`: {test.CASES:,} cases per target, seed 1, "
            f"{test.TIME_LIMIT_S:g} s and {test.MEMORY_LIMIT_MB} MiB per case.")


IMAGE_CASES, IMAGE_SEED = 100_000, 2


def _images() -> dict[str, Run]:
    image = _common.import_test_module("fuzz.image_targets").targets()["image_file"]
    frame = _common.import_test_module("fuzz.test_fuzz_compressed_frames").compressed_frame_target()
    return {t.name: Run(t, IMAGE_CASES, IMAGE_SEED, 2.0, 1024) for t in (image, frame)}


def _ci_budget(test_module: str, build: Callable[[object], dict]) -> dict[str, Run]:
    """A CI test's budget (its ``CASES``, an int or a dict per target; seed 1; its limits) of the targets
    ``build(test)`` makes."""
    test = _common.import_test_module(test_module)
    return {name: Run(t, test.CASES[name] if isinstance(test.CASES, dict) else test.CASES, 1,
                      test.TIME_LIMIT_S, test.MEMORY_LIMIT_MB) for name, t in build(test).items()}


def _ci_budget_text(test_module: str) -> str:
    test = _common.import_test_module(test_module)
    cases = (", ".join(f"{name} {n:,}" for name, n in test.CASES.items()) if isinstance(test.CASES, dict)
             else f"{test.CASES:,} per target")
    return (f"Budget of `test/{test_module.replace('.', '/')}.py`: cases {cases}; seed 1, "
            f"{test.TIME_LIMIT_S:g} s and {test.MEMORY_LIMIT_MB} MiB per case.")


def _text(test) -> dict:
    return _common.import_test_module("fuzz.text_targets").targets(fixture)


def _services(test) -> dict:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="bench_fuzz_services_"))  # seeds; the workers read them
    return _common.import_test_module("fuzz.service_targets").targets(folder)


SUITES = {
    "readers": Suite("Model readers: the CI fuzz budget, per target", "fuzz_budget.md", 3, _readers_budget,
                     _readers),
    "images": Suite("Image readers: the long fuzz runs, per target", "fuzz_budget_images.md", 1,
                    lambda: (f"Long runs of `image_file` (`test/fuzz/image_targets.py`) and "
                             "`compressed_frame` (`test/fuzz/test_fuzz_compressed_frames.py`): "
                             f"{IMAGE_CASES:,} cases per target, seed {IMAGE_SEED}, 2 s and 1024 MiB per "
                             "case."),
                    _images),
    "text": Suite("User-text readers: the CI fuzz budget, per target", "fuzz_budget_text.md", 3,
                  lambda: _ci_budget_text("fuzz.test_fuzz_text"),
                  lambda: _ci_budget("fuzz.test_fuzz_text", _text)),
    "services": Suite("Learned-state files and service requests: the CI fuzz budget, per target (run inside "
                      "tools/ros_sandbox.sh: live nodes)", "fuzz_budget_services.md", 3,
                      lambda: _ci_budget_text("fuzz.test_fuzz_services"),
                      lambda: _ci_budget("fuzz.test_fuzz_services", _services)),
}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(harness, run: Run, target) -> tuple[object, float]:
    """(FuzzReport, CPU seconds of the workers it forked and reaped) of ``run``'s budget of ``target``."""
    before = _children_cpu_s()
    report = harness.fuzz(target, run.cases, seed=run.seed, time_limit_s=run.time_limit_s,
                          memory_limit_mb=run.memory_limit_mb)
    return report, _children_cpu_s() - before


def _spread(values: list[float], digits: int, unit: str = "") -> str:
    """"median (min–max)" of the repeats."""
    return (f"{statistics.median(values):.{digits}f}{unit} "
            f"({min(values):.{digits}f}–{max(values):.{digits}f}{unit})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=list(SUITES), default="readers")
    parser.add_argument("--repeats", type=int, help="default: the suite's (readers 3, images 1)")
    parser.add_argument("--out", help="report file (trial runs: elsewhere)")
    args = parser.parse_args()
    suite = SUITES[args.suite]
    repeats = args.repeats or suite.repeats
    load_start = os.getloadavg()[0]
    harness = _common.import_test_module("fuzz.harness")
    budget = suite.runs()
    runs: dict[str, list[tuple[object, float]]] = {}
    for _ in range(repeats):  # interleaved: the load changes over seconds
        for name, run in budget.items():
            runs.setdefault(name, []).append(_timed(harness, run, run.target))
            runs.setdefault(f"{name} baseline", []).append(
                _timed(harness, run, replace(run.target, name=f"{name} baseline", run=len)))
    rows = []
    for name, run in budget.items():
        reports = [r for r, _ in runs[name]]
        cpu = [c for _, c in runs[name]]
        base = [c for _, c in runs[f"{name} baseline"]]
        counts = reports[0].counts
        same = all(r.counts == counts for r in reports)
        per_case = [c / run.cases * 1e3 for c in cpu]
        ratios = [c / b for c, b in zip(cpu, base, strict=True)]
        rows.append(
            f"| {name} | {reports[0].cases:,} | {counts['accepted']:,} | {counts['refused']:,} | "
            f"{counts['untyped']} | {counts['hang']} | {counts['crash']} | {'yes' if same else 'NO'} | "
            f"{_spread(cpu, 2)} | {_spread(per_case, 3)} | "
            f"{_spread([b / run.cases * 1e3 for b in base], 3)} | "
            f"{_spread(ratios, 1, '×')} | {_spread([r.wall_s for r in reports], 2)} | "
            f"{max(r.slowest[0] for r in reports) * 1e3:.0f} ms | "
            f"{max(r.start_rss_mb for r in reports):.0f} / {max(r.peak_rss_mb for r in reports):.0f} MB |")
    suite_arg = "" if args.suite == "readers" else f" --suite {args.suite}"
    lines = [
        f"# {suite.title}",
        "",
        f"{platform.machine()}, Python {platform.python_version()}; "
        f"`.venv/bin/python bench/bench_fuzz_budget.py{suite_arg}` (`--repeats {repeats}`, interleaved). "
        f"{suite.describe()} Worker CPU: user + system time of the forked workers (the cases run there); "
        "baseline: the same seeds and hot ranges with a `run` that only takes the case's "
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
    write_report(Path(args.out) if args.out else _common.RESULTS / suite.out, lines)


if __name__ == "__main__":
    main()
