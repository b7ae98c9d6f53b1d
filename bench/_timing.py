"""Thread CPU time of a callable, ratio cells and the result file: what every benchmark here needs.

Thread CPU time (``time.thread_time_ns``) counts this thread's work only, so the load other jobs put on the
shared cores does not inflate a figure; work done on other threads is not counted either (benchmarks that
call BLAS keep it single-threaded). Imported as ``from _timing import ...``: a script's own folder is on
``sys.path`` (like ``_revisions.py``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def thread_times_ns(fn: Callable[[], object], repeats: int, *, warm_up: bool = True) -> list[int]:
    """Thread CPU time in ns of each of ``repeats`` calls of ``fn``, after one untimed call if ``warm_up``
    (first calls pay for imports, caches and allocations the steady state does not)."""
    if warm_up:
        fn()
    times = []
    for _ in range(repeats):
        start = time.thread_time_ns()
        fn()
        times.append(time.thread_time_ns() - start)
    return times


def interleaved_rounds_ns(candidates: Mapping[str, Callable[[], object]], rounds: int,
                          calls: int) -> dict[str, list[list[int]]]:
    """Per candidate, per round, the thread CPU time (ns) of each of ``calls`` calls (``thread_times_ns``),
    the candidates taking turns round after round: the load other jobs put on the shared cores changes over
    seconds, and timing one candidate after the other would hand one of them the quiet moment. Each round
    starts one candidate further on (a, b, c; b, c, a; ...), so none always runs first or after the same
    neighbour."""
    times: dict[str, list[list[int]]] = {name: [] for name in candidates}
    order = list(candidates.items())
    for round_index in range(rounds if order else 0):
        shift = round_index % len(order)
        for name, fn in order[shift:] + order[:shift]:
            times[name].append(thread_times_ns(fn, calls))
    return times


def round_medians_us(candidates: Mapping[str, Callable[[], object]], rounds: int,
                     calls: int) -> dict[str, tuple[float, float, float]]:
    """Per candidate, (median, lowest, highest) of its round medians in µs (``interleaved_rounds_ns``): the
    spread of the rounds says how much of a figure is waiting for a core."""
    times = interleaved_rounds_ns(candidates, rounds, calls)
    medians = {name: [statistics.median(r) / 1e3 for r in runs] for name, runs in times.items()}
    return {name: (statistics.median(v), min(v), max(v)) for name, v in medians.items()}


def range_cell(s: tuple[float, float, float]) -> str:
    """A table cell of :func:`round_medians_us`: "median (lowest–highest)"."""
    return f"{s[0]:.1f} ({s[1]:.1f}–{s[2]:.1f})"


def spread_us(fn: Callable[[object], object], items: Sequence[object], repeats: int
              ) -> tuple[float, float, float]:
    """(median, p10, p90) thread-CPU µs of ``fn(item)`` over ``repeats`` calls, cycling through ``items``."""
    cycle = iter(list(items) * (repeats // len(items) + 3))
    times = sorted(t / 1e3 for t in thread_times_ns(lambda: fn(next(cycle)), repeats))
    return statistics.median(times), times[len(times) // 10], times[9 * len(times) // 10]


def spread_cell(s: tuple[float, float, float]) -> str:
    """A table cell of :func:`spread_us`: "median (p10-p90)"."""
    return f"{s[0]:.0f} ({s[1]:.0f}-{s[2]:.0f})"


def best_ns(fn: Callable[[], object], repeats: int, *, warm_up: bool = True) -> int:
    """The fastest call: on a shared machine the minimum is the code, the rest is waiting for a core."""
    return min(thread_times_ns(fn, repeats, warm_up=warm_up))


def median_ns(fn: Callable[[], object], repeats: int, *, warm_up: bool = True) -> float:
    """The median call, for figures where a typical call matters more than the best one."""
    return statistics.median(thread_times_ns(fn, repeats, warm_up=warm_up))


def ratio(numerator: float, denominator: float, digits: int = 1, none: str = "n/a") -> str:
    """A table cell ``"3.2x"``; ``none`` when there is no baseline to divide by."""
    return f"{numerator / denominator:.{digits}f}x" if denominator > 0 else none


def write_report(path: Path, lines: Sequence[str]) -> str:
    """Write the Markdown ``lines`` to ``path`` (ending in one newline, folder created) and print them."""
    text = "\n".join(lines)
    if not text.endswith("\n"):
        text += "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(text, end="")
    return text
