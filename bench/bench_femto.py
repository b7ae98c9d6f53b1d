"""Per-event cost of the Femtosense sequence engine (send / recv) vs a dict update, and vs femtorun itself.

For every fixture IOSpec, one valid cycle (every streaming input in declared order, every latched input
once, one recv) is repeated; CPU time of this thread (``time.thread_time_ns``), best of 5 rounds. Baseline
measured in the same run: the same number of ``dict`` updates (``counts[name] = counts.get(name, 0) + 1``)
over the same event names. Target: <= 5 us per send / recv.

Run: .venv/bin/python bench/bench_femto.py   (writes bench/results/femto.md)
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _timing import best_ns, ratio, write_report  # beside this script (its folder is on sys.path)
from libredgetpu_ros.femto import SequenceEngine, load_iospec
from libredgetpu_ros.femto.reference import ReferenceRunner
from libredgetpu_ros.femto.vectors import prepare_input
from libredgetpu_ros.fixtures import fixtures_dir

CYCLES = 5000
ROUNDS = 5
TARGET_US = 5.0
OUT = Path(__file__).resolve().parent / "results" / "femto.md"
CASES = ["single_io_fmot16", "add_bc_api", "latched_one_fmot", "latched_two_api", "multi_output_fmot8",
         "padding_mixed_api", "femtofile_roundtrip", "legacy_padding", "two_signatures_api"]


def _cycle(spec) -> list[str | None]:
    """Event names of one valid cycle; None = recv."""
    events: list[str | None] = [v.name for v in spec.latched_inputs()]
    for seq in spec.sequences:
        if seq.outputs:
            events += [spec.inputs[n].name for n, _ in seq.inputs]
    return [*events, None]


def _best_ns(fn: Callable[[], object]) -> int:
    return best_ns(fn, ROUNDS, warm_up=False)


def _engine_loop(engine: SequenceEngine, events: list, atomic: bool = False):
    send, recv = engine.send, engine.recv

    def run() -> None:
        for _ in range(CYCLES):
            for name in events:
                if name is None:
                    recv()
                else:
                    send(name, atomic=atomic)
    return run


def _dict_loop(events: list):
    counts: dict = {}
    names = ["<recv>" if n is None else n for n in events]

    def run() -> None:
        for _ in range(CYCLES):
            for name in names:
                counts[name] = counts.get(name, 0) + 1
    return run


def _slow_loop(send: Callable[[str], object], recv: Callable[[], object], events: list):
    """The cycle for a runner costing microseconds per event: a tenth of the cycles, ``send(name)`` per
    input event, ``recv()`` per None."""

    def run() -> None:
        for _ in range(CYCLES // 10):
            for name in events:
                if name is None:
                    recv()
                else:
                    send(name)
    return run


def _femtorun_loop(path: Path, events: list):
    import femtorun

    spec = femtorun.IOSpec(str(path))
    spec.sim_reset()
    return _slow_loop(lambda name: spec.sim_send_inputs([name]), spec.sim_recv_outputs, events)


def _reference_loop(spec, program: dict, events: list):
    runner = ReferenceRunner(spec, program)
    runner.reset()
    vecs = {v.name: v for v in spec.inputs.values()}
    values = {n: np.linspace(-1, 1, v.length) for n, v in vecs.items()}
    return _slow_loop(lambda name: runner.send(name, prepare_input(values[name], vecs[name])), runner.recv,
                      events)


def main() -> None:
    base = fixtures_dir() / "femto"
    rows = []
    try:
        import femtorun  # noqa: F401
        have_femtorun = True
    except ImportError:
        have_femtorun = False
    for case in CASES:
        path = base / f"{case}.yaml"
        spec = load_iospec(path)
        events = _cycle(spec)
        n = CYCLES * len(events)
        base_ns = _best_ns(_dict_loop(events)) / n
        exact = _best_ns(_engine_loop(SequenceEngine(spec), events)) / n
        strict = _best_ns(_engine_loop(SequenceEngine(spec, strict=True), events, atomic=True)) / n
        fr = _best_ns(_femtorun_loop(path, events)) / (n // 10) if have_femtorun else float("nan")
        rows.append((case, len(events), base_ns, exact, strict, fr))
    program = {"outputs": {"A": {"terms": [{"input": "B"}, {"input": "C"}]}}}
    spec = load_iospec(base / "add_bc_api.yaml")
    events = _cycle(spec)
    ref_us = _best_ns(_reference_loop(spec, program, events)) / (CYCLES // 10 * len(events)) / 1e3
    worst = max(max(r[3], r[4]) for r in rows) / 1e3
    lines = [
        "# Femtosense sequence engine: per-event overhead",
        "",
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; CPU time of "
        f"the bench thread (`time.thread_time_ns`), best of {ROUNDS} rounds of {CYCLES} valid cycles "
        "(every input of the spec in declared order, latched ones included, then one recv). Baseline: a "
        "dict update per event, same names, same run. `exact` = femtorun semantics (`send`, `recv`); "
        "`strict+atomic` = what the SPU node does per input (firmware order rules checked first, counts "
        "restored on error); `femtorun` = femtorun 4.1.2's own `sim_send_inputs` / `sim_recv_outputs` "
        "(networkx), for scale.",
        "",
        "| IOSpec | events / cycle | dict update ns | exact ns | exact / dict | strict+atomic ns "
        "| strict / dict | femtorun ns |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case, k, b, e, s, fr in rows:
        lines.append(f"| {case} | {k} | {b:.0f} | {e:.0f} | {ratio(e, b)} | {s:.0f} | {ratio(s, b)} "
                     f"| {fr:.0f} |")
    lines += [
        "",
        f"Worst engine cost per event: {worst:.2f} us (target <= {TARGET_US:.0f} us per send / recv): "
        f"{'met' if worst <= TARGET_US else 'NOT met'}.",
        "",
        f"Reference runner, per event including quantize + pad + NumPy evaluation (add_bc_api, A = B + C): "
        f"{ref_us:.1f} us (not part of the target: this is the computation, not the sequence bookkeeping).",
        "",
    ]
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
