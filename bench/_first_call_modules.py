"""bench_first_call.py's module part: each module with compiled kernels on its data path (the cases of
libredgetpu_ros/test/_first_call_cases.py, the ones test_jit_warm_up.py checks), opened in a fresh process,
then its first data-path call against the median of the next ones.

Per case and cache state, ``repeats`` fresh processes (interleaved: an empty cache folder, then the one it
filled): the open (import, numba, compile or load, model) in wall and process CPU time, then each call's
thread CPU and wall time, and how many numba specializations the first call compiled (0 when the warm-up at
open covered it).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

CASES_FILE = Path(__file__).resolve().parents[1] / "libredgetpu_ros" / "test" / "_first_call_cases.py"
# issue 36's modules: DeepLab pipeline, SpotTracker, OpticalFlow / VisualCompass, LoomingDetector,
# PatternTracker (the MatMulEngine is the API part of bench_first_call.py)
CASES = {
    "segment": "perception pipeline, DeepLab v3 (`segment`, CPU twin, 640x480 frame) — `process`",
    "spot_red": "SpotTracker red 64x64 (validity checked) — `track`",
    "looming_scale": "LoomingDetector 64x64, scale TTC — `detect`",
    "flow_refined": "OpticalFlow gabor_64x64_p4, refined — `step`",
    "compass": "VisualCompass gabor_64x64_p4 — `step`",
    "pattern": "PatternTracker 64x64 8x8, normalized — `track`",
}

_CHILD = """
import importlib.util, json, sys, time
t, c = time.perf_counter(), time.process_time()
spec = importlib.util.spec_from_file_location("_first_call_cases", sys.argv[1])
cases = importlib.util.module_from_spec(spec); sys.modules[spec.name] = cases; spec.loader.exec_module(cases)
case = cases.CASES[sys.argv[2]](int(sys.argv[3]), False)
open_s, open_cpu = time.perf_counter() - t, time.process_time() - c
before = cases.signatures()  # before the frames are made: its walk over every object evicts the caches
inputs = case.inputs()
cpu, wall, compiled = [], [], 0
for k, item in enumerate(inputs):
    w, s = time.perf_counter_ns(), time.thread_time_ns()
    case.call(item)
    cpu.append((time.thread_time_ns() - s) / 1e6); wall.append((time.perf_counter_ns() - w) / 1e6)
    if k == 0:
        compiled = sum(len(v) for v in cases.added(before, cases.signatures()).values())
print(json.dumps({"open_s": open_s, "open_cpu_s": open_cpu, "cpu": cpu, "wall": wall, "compiled": compiled}))
"""


def run(prefix: list[str], env: dict[str, str], work: Path, repeats: int, calls: int,
        names: list[str]) -> dict[str, dict[str, list[dict]]]:
    """{case: {"empty cache" | "warm cache": [one dict per process]}}."""
    out: dict[str, dict[str, list[dict]]] = {n: {"empty cache": [], "warm cache": []} for n in names}
    for k in range(repeats):
        for name in names:  # interleaved: every case's empty folder, then the one it filled
            cache = work / f"modules_cache_{name}_{k}"
            for kind in ("empty cache", "warm cache"):
                done = subprocess.run([*prefix, sys.executable, "-c", _CHILD, str(CASES_FILE), name,
                                       str(calls + 1)], env={**env, "XDG_CACHE_HOME": str(cache)},
                                      capture_output=True, text=True, timeout=900)
                if done.returncode != 0:
                    raise RuntimeError(f"{name}: {done.stderr[-3000:]}")
                out[name][kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


def _spread(values: list[float], digits: int = 2) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"


def _ms(values: list[float]) -> str:
    digits = 2 if max(values) < 10 else 1
    return f"{_spread(values, digits)} ms"


def report(results: dict[str, dict[str, list[dict]]], calls: int) -> list[str]:
    lines = [
        "## Modules: fresh process, the module opened, then its first data-path call and the next "
        f"{calls}",
        "",
        "Frames as a node hands them over: read-only `rgb8` views (the message's bytes) at the template's "
        "size (640x480 for DeepLab), the backend's outputs read-only as the Edge TPU's are (CPU twin here). "
        "*compiled on call 1*: numba specializations the first call added (0: the open's warm-up covered "
        "it). Ratios per process, spread min–max over the repeats.",
        "",
        "| module — call | cache folder | open (wall) | open (process CPU) | first call (thread CPU) | "
        f"median of next {calls} | first / median (CPU) | first / median (wall) | compiled on call 1 "
        "| target ≤ 2× |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, kinds in results.items():
        for kind, runs in kinds.items():
            cpu_ratio = [r["cpu"][0] / statistics.median(r["cpu"][1:]) for r in runs]
            wall_ratio = [r["wall"][0] / statistics.median(r["wall"][1:]) for r in runs]
            met = max(cpu_ratio) <= 2.0 and max(wall_ratio) <= 2.0
            lines.append(
                f"| {CASES[name]} | {kind} | {_spread([r['open_s'] for r in runs])} s | "
                f"{_spread([r['open_cpu_s'] for r in runs])} s | {_ms([r['cpu'][0] for r in runs])} | "
                f"{_ms([statistics.median(r['cpu'][1:]) for r in runs])} | {_spread(cpu_ratio)}× | "
                f"{_spread(wall_ratio)}× | {max(r['compiled'] for r in runs)} | "
                f"{'met' if met else 'missed'} |")
    return lines
