"""Parse time of every fixture model vs. reading its bytes, and proof that parsing copies no blobs.

Run: .venv/bin/python bench/bench_parse.py   (writes bench/results/parse.md)
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from pathlib import Path

import numpy as np
from libredgetpu_ros.fixtures import fixtures_dir
from libredgetpu_ros.formats import load_model

REPEATS = 15
TARGET_MS = 20.0
OUT = Path(__file__).resolve().parent / "results" / "parse.md"


def _median_ms(fn) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _parse_all(data: bytes) -> None:
    model = load_model(data)
    for op in model.edgetpu_ops():
        model.darwinn(op)


def main() -> None:
    base = fixtures_dir()
    rows = []
    for path in sorted(base.glob("**/*.tflite")):
        data = path.read_bytes()
        read_ms = _median_ms(path.read_bytes)
        parse_ms = _median_ms(lambda d=data: _parse_all(d))
        # Memory evidence: peak Python allocation while parsing, and whether blobs alias the file bytes.
        tracemalloc.start()
        model = load_model(data)
        packages = [model.darwinn(op) for op in model.edgetpu_ops()]
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        whole = np.frombuffer(data, np.uint8)
        params = sum(len(e.parameters) for p in packages for e in p.executables)
        shared = all(np.shares_memory(np.frombuffer(e.parameters, np.uint8), whole)
                     for p in packages for e in p.executables if len(e.parameters))
        rows.append((str(path.relative_to(base)), len(data), read_ms, parse_ms, peak, params, shared))
    worst = max(r[3] for r in rows)
    lines = [
        "# Model parsing (formats/)",
        "",
        f"`load_model` + DarwiNN packages of every Edge TPU op, median of {REPEATS} runs, next to "
        "`Path.read_bytes()` of the same file measured in the same run (baseline). Peak = Python heap peak "
        "during one parse (tracemalloc), to compare with the parameter bytes it exposes; "
        "`zero-copy` = every parameter blob is a view of the file bytes (`np.shares_memory`).",
        "",
        "| model | file bytes | read_bytes ms | parse ms | parse / read | parse peak KiB | parameter bytes "
        "| zero-copy |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, size, read_ms, parse_ms, peak, params, shared in rows:
        lines.append(f"| {name} | {size} | {read_ms:.2f} | {parse_ms:.2f} | {parse_ms / read_ms:.1f}x "
                     f"| {peak / 1024:.0f} | {params} | {'yes' if shared else 'NO'} |")
    lines += ["", f"Slowest parse: {worst:.2f} ms (target <= {TARGET_MS:.0f} ms): "
              f"{'met' if worst <= TARGET_MS else 'NOT met'}.", ""]
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
