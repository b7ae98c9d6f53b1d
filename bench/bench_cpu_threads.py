"""LiteRT thread count on the CPU backend (the perception node's ``cpu_threads``): inference time per frame
with 1 thread, LiteRT's default (``num_threads=None``, what the node used before ``cpu_threads``) and one
thread per core this process may use (the new default), on the fixture models' CPU twins.

Threads exist to cut wall time, so the figure is wall time per ``CpuBackend.run``, the settings interleaved
batch by batch in the same run so load from other processes hits all of them alike: the median of
``--rounds`` batches, and the best batch (on this shared 2-core host other engineers' jobs take cores away
most of the time; the best batch is the closest to what the cores can do when they are free). The CPU spent is
process CPU time (all threads) per run. Outputs are checked equal across
settings (LiteRT's integer kernels do not depend on the thread count).

Run: .venv/bin/python bench/bench_cpu_threads.py   (writes bench/results/cpu_threads.md)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
from _timing import ratio, write_report  # beside this script (its folder is on sys.path)
from libredgetpu_ros.backends.cpu import CpuBackend
from libredgetpu_ros.fixtures import fixture

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "cpu_threads.md"
MODELS = {
    "classify MobileNet v2 224": "classify/mobilenet_v2_1.0_224_quant_edgetpu.tflite",
    "pose PoseNet 481x641": "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite",
    "segment DeepLab v3 513": "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite",
}
CORES = len(os.sched_getaffinity(0))


def _batch(backend: CpuBackend, inputs: list[np.ndarray], runs: int) -> tuple[float, float]:
    """(wall ms, process CPU ms) per run over ``runs`` runs."""
    wall, cpu = time.perf_counter_ns(), time.process_time_ns()
    for _ in range(runs):
        backend.run(inputs)
    return (time.perf_counter_ns() - wall) / runs / 1e6, (time.process_time_ns() - cpu) / runs / 1e6


def bench_model(path: Path, settings: dict[str, int | None],
                rounds: int) -> dict[str, tuple[float, float, float]]:
    """setting -> (median wall ms, best wall ms, median CPU ms) per run."""
    backends = {}
    for name, threads in settings.items():
        backend = CpuBackend(num_threads=threads)
        backend.load(path)
        backends[name] = backend
    spec = next(iter(backends.values())).boundary.inputs
    rng = np.random.default_rng(1)
    inputs = [rng.integers(0, 256, s.shape, dtype=np.uint8).astype(s.dtype) for s in spec]
    outputs = {name: b.run(inputs) for name, b in backends.items()}  # warm-up + equality check
    reference = next(iter(outputs.values()))
    for name, out in outputs.items():
        for tensor, value in out.items():
            assert np.array_equal(value, reference[tensor]), (path.name, name, tensor)
    single_ms, _ = _batch(backends[next(iter(backends))], inputs, 1)
    runs = max(1, int(150 / max(single_ms, 1.0)))  # about 0.15 s per batch
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in backends}
    for _ in range(rounds):
        for name, backend in backends.items():  # interleaved: the same load for every setting
            samples[name].append(_batch(backend, inputs, runs))
    for backend in backends.values():
        backend.close()
    out = {}
    for name, batches in samples.items():
        walls = [w for w, _ in batches]
        out[name] = (statistics.median(walls), min(walls), statistics.median(c for _, c in batches))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    settings: dict[str, int | None] = {"1 thread": 1, "LiteRT default": None, f"{CORES} (all cores)": CORES}
    rows = []
    for label, rel in MODELS.items():
        result = bench_model(fixture(rel), settings, args.rounds)
        rows.append((label, result))
        summary = {k: f"{w:.1f} ms wall (best {b:.1f}), {c:.1f} ms CPU" for k, (w, b, c) in result.items()}
        print(label, summary, flush=True)
    load = os.getloadavg()
    names = list(settings)
    lines = [
        "# CPU backend threads (`cpu_threads`)",
        "",
        f"`bench/bench_cpu_threads.py`, {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, "
        f"{CORES} usable cores (`os.sched_getaffinity`), load average {load[0]:.1f} / {load[1]:.1f} "
        f"(1 / 5 min: the host is shared with other jobs). `CpuBackend.run` on each model's CPU twin (LiteRT "
        f"{_litert_version()}), {args.rounds} interleaved batches of ~0.15 s per setting; wall ms per run "
        "(median and best batch) and process CPU ms per run (all threads, median). Outputs identical across "
        "settings (checked).",
        "",
        "| model | setting | wall ms median | wall ms best | CPU ms | speed-up vs 1 thread (median / best) "
        "| vs LiteRT default (median / best) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for label, result in rows:
        one, default = result[names[0]], result[names[1]]
        for name in names:
            med, best, cpu = result[name]
            lines.append(f"| {label} | {name} | {med:.1f} | {best:.1f} | {cpu:.1f} "
                         f"| {ratio(one[0], med, 2)} / {ratio(one[1], best, 2)} "
                         f"| {ratio(default[0], med, 2)} / {ratio(default[1], best, 2)} |")
    lines += ["", "Speed-up = the baseline setting's wall time / this setting's, both measured in this run. "
              "CPU ms staying flat while wall time drops is the threads working in parallel; wall time far "
              "above CPU time is other processes holding the cores.", ""]
    write_report(OUT, lines)


def _litert_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ai-edge-litert")
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    main()
