"""What parsing an IOSpec or a reference program costs as the file grows, up to the caps that bound it.

Every YAML the femto package reads goes through PyYAML's pure-Python loader (``textdata``, femtorun's
loader), whose cost grows with the file's tokens; the caps keep a node's configure short: an IOSpec is at most
4 MiB in the library (``femto.iospec.MAX_TEXT_BYTES``, what ``iospec check`` takes) and 256 KiB in the SPU
node (``ros/spu/node.py`` ``MAX_IOSPEC_BYTES``), a reference program 256 KiB (``femto.reference``
``MAX_PROGRAM_BYTES``). Timed: ``load_iospec`` / ``load_program`` on a file, as the node's configure and the
CLI call them (read, UTF-8 check, the event pass bounding depth and aliases, the pure-Python load, femtorun's
checks). Files:

- the fixture ``add_bc_api`` IOSpec (685 bytes): the baseline, measured in the same run;
- fmot-shaped IOSpecs of growing size (``bench_textdata.iospec_text``: n inputs of 16 values, one sequence);
- the densest YAML tried: the fixture with its sequence's ``comments`` a flow list ``[0,0,0,...]``;
- the fixture followed by 1 KiB comment lines (the SPU node test's over-the-cap file);
- for the fmot-shaped IOSpecs, ``textdata.load_yaml`` alone on the same bytes: the YAML part of the time;
- reference programs at their cap: the densest list under an unread key, and one float64 weight matrix
  (random normal values) as flow lists of ``repr`` floats and as ``yaml.safe_dump``'s block lists, the
  largest square matrix that fits.

Thread CPU time (``_timing``) of each call, no warm-up call for the large files (the fixture's warm-up loads
the code); median and min–max of the repeats. The machine is shared (2 cores, ~8 jobs): the load average is
recorded at the start and the end. About 2 min of CPU.

    .venv/bin/python bench/bench_iospec_parse.py     # writes bench/results/iospec_parse.md
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml
from _timing import thread_times_ns, write_report  # beside this script (its folder is on sys.path)
from bench_textdata import iospec_text
from libredgetpu_ros.femto import load_iospec
from libredgetpu_ros.femto.iospec import MAX_TEXT_BYTES
from libredgetpu_ros.femto.reference import MAX_PROGRAM_BYTES, load_program
from libredgetpu_ros.fixtures import fixtures_dir
from libredgetpu_ros.ros.spu.node import MAX_IOSPEC_BYTES

from libredgetpu_ros import textdata

OUT = Path(__file__).resolve().parent / "results" / "iospec_parse.md"
KIB = 1024
FIXTURE = "add_bc_api"
FIXTURE_REPEATS = 21


def largest(make: Callable[[int], str], limit: int, hi: int) -> tuple[int, str]:
    """The largest n in [1, hi] whose ``make(n)`` is at most ``limit`` bytes (sizes grow with n), and the
    text."""
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(make(mid).encode()) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo, make(lo)


def dense_iospec(base: str, limit: int) -> str:
    """The fixture with its sequence's ``comments: {}`` replaced by ``[0,0,...]``, at most ``limit`` bytes."""
    head, tail = base.split("comments: {}", 1)
    room = limit - len((head + "comments: []" + tail).encode())
    zeros = ",".join(["0"] * ((room + 1) // 2))
    return head + "comments: [" + zeros + "]" + tail


def comment_lines(base: str, limit: int) -> str:
    line = "# " + "x" * 1022 + "\n"
    return base + line * ((limit - len(base.encode())) // len(line))


def sized_spec(base: str, n: int) -> str:
    """The fixture with every vector ``n`` values long (a program's matrix must match the lengths)."""
    return base.replace("length: 12", f"length: {n}")


def matrix_program(n: int, block: bool) -> str:
    w = np.random.default_rng(n).standard_normal((n, n))
    doc = {"outputs": {"A": {"terms": [{"input": "B", "weight": w.tolist()}], "bias": 0.0}}}
    if block:
        return yaml.safe_dump(doc)
    rows = ",\n        ".join("[" + ", ".join(repr(float(v)) for v in r) + "]" for r in w)
    return ("outputs:\n  A:\n    terms:\n    - input: B\n      weight: [\n        " + rows
            + "]\n    bias: 0.0\n")


def dense_program(limit: int) -> str:
    head = "outputs:\n  A:\n    terms:\n    - {input: B, weight: 1.0}\n    bias: 0.0\nnotes: ["
    zeros = ",".join(["0"] * ((limit - len(head) - 2 + 1) // 2))
    return head + zeros + "]\n"


def timed(fn: Callable[[], object], repeats: int, warm_up: bool) -> tuple[float, float, float]:
    """(median, min, max) thread CPU seconds."""
    t = [x / 1e9 for x in thread_times_ns(fn, repeats, warm_up=warm_up)]
    return statistics.median(t), min(t), max(t)


def main() -> None:
    load_start = os.getloadavg()
    base_path = fixtures_dir() / "femto" / f"{FIXTURE}.yaml"
    base = base_path.read_text(encoding="utf-8")
    # (kind, content, repeats, text, the IOSpec a program is checked against: "" = the fixture, split:
    # also time the YAML load alone, where the file's vectors are many enough for femtorun's checks to count)
    cases: list[tuple[str, str, int, str, str, bool]] = []
    for target, repeats in ((64 * KIB, 5), (MAX_IOSPEC_BYTES, 3), (1024 * KIB, 2), (MAX_TEXT_BYTES, 1)):
        n, text = largest(iospec_text, target, 40_000)
        cases.append(("iospec", f"fmot-shaped, {n:,} inputs", repeats, text, "", True))
    for target, repeats in ((MAX_IOSPEC_BYTES, 3), (1024 * KIB, 1)):
        cases.append(("iospec", "densest: `[0,0,...]` in the fixture's comments", repeats,
                      dense_iospec(base, target), "", False))
    cases.append(("iospec", "fixture + 1 KiB comment lines", 2, comment_lines(base, MAX_TEXT_BYTES), "",
                  False))
    cases.append(("program", "densest: `[0,0,...]` under an unread key", 3, dense_program(MAX_PROGRAM_BYTES),
                  "", False))
    for block in (False, True):
        n, text = largest(lambda k, b=block: matrix_program(k, b), MAX_PROGRAM_BYTES, 200)
        style = "`yaml.safe_dump` block lists" if block else "flow lists of `repr` floats"
        cases.append(("program", f"one {n}×{n} float64 matrix, {style}", 3, text, sized_spec(base, n), False))

    lines = ["# Parsing IOSpecs and reference programs: cost against size", "",
             f"{platform.machine()}, Python {platform.python_version()}, PyYAML {yaml.__version__}; "
             "`.venv/bin/python bench/bench_iospec_parse.py`. Thread CPU time of each `load_iospec` / "
             "`load_program` call on a file (what the SPU node's configure and `iospec check` run); "
             "median (min–max) of the repeats, no warm-up call for the large files. Caps: IOSpec "
             f"{MAX_TEXT_BYTES:,} bytes in the library, {MAX_IOSPEC_BYTES:,} in the SPU node; program "
             f"{MAX_PROGRAM_BYTES:,}. Baseline: the fixture `{FIXTURE}` IOSpec, same run. "
             f"Shared machine (2 cores, ~8 jobs): load average {load_start[0]:.1f} at the start, "
             "{END_LOAD} at the end.", ""]
    with tempfile.TemporaryDirectory(prefix="bench_iospec_") as tmp:
        folder = Path(tmp)
        fixture = timed(lambda: load_iospec(base_path), FIXTURE_REPEATS, True)
        lines += [f"Fixture `{FIXTURE}` ({len(base.encode()):,} bytes): {fixture[0] * 1e3:.2f} ms "
                  f"({fixture[1] * 1e3:.2f}–{fixture[2] * 1e3:.2f}, {FIXTURE_REPEATS} calls).", "",
                  "| file | content | bytes | repeats | thread CPU s: median (min–max) | µs / KiB "
                  "| × fixture | of which the YAML load (`textdata.load_yaml` alone, median) |",
                  "|---|---|---:|---:|---|---:|---:|---:|"]
        for i, (kind, label, repeats, text, spec_text, split) in enumerate(cases):
            path = folder / f"case{i}.yaml"
            path.write_text(text, encoding="utf-8")
            size = path.stat().st_size
            if kind == "iospec":
                med, lo, hi = timed(lambda p=path: load_iospec(p), repeats, False)
            else:
                spec_path = folder / f"spec{i}.yaml"
                spec_path.write_text(spec_text or base, encoding="utf-8")
                spec = load_iospec(spec_path)
                med, lo, hi = timed(lambda p=path, s=spec: load_program(p, s), repeats, False)
            yaml_cell = ""
            if split:
                raw = path.read_bytes()
                alone = timed(lambda r=raw: textdata.load_yaml(r, max_bytes=MAX_TEXT_BYTES), repeats, False)
                yaml_cell = f"{alone[0]:.3f} ({alone[0] / med:.0%})"
            lines.append(f"| {kind} | {label} | {size:,} | {repeats} | {med:.3f} ({lo:.3f}–{hi:.3f}) | "
                         f"{med * 1e6 / (size / KIB):.0f} | {med / fixture[0]:,.0f}× | {yaml_cell} |")
    lines += ["", "The YAML load's cost follows the file's tokens, not its bytes (compare the µs / KiB "
              "of the densest list, the fmot-shaped IOSpecs and the comment lines). The rest of an IOSpec's "
              "time is femtorun's checks and the package's own view of the spec (`iospec_from_data`), linear "
              "in the number of vectors (the YAML column can exceed 100%: separate calls, a shared "
              "machine). The programs' matrices are the largest square ones under the cap."]
    lines[2] = lines[2].replace("{END_LOAD}", f"{os.getloadavg()[0]:.1f}")
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
