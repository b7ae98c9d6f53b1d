"""LiteRT thread count on the CPU backend (the perception node's ``cpu_threads``): inference time per frame
with 1 thread, LiteRT's default (``num_threads=None``, what the node used before ``cpu_threads``) and one
thread per core this process may use (the new default), on the fixture models' CPU twins.

Threads exist to cut wall time, so the figure is wall time per ``CpuBackend.run`` (median of ``--rounds``
batches, the settings interleaved batch by batch in the same run so load from other processes hits all of
them alike); the CPU spent is process CPU time (all threads) per run. Outputs are checked equal across
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


def bench_model(path: Path, settings: dict[str, int | None], rounds: int) -> dict[str, tuple[float, float]]:
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
    runs = max(1, int(300 / max(single_ms, 1.0)))  # about 0.3 s per batch
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in backends}
    for _ in range(rounds):
        for name, backend in backends.items():  # interleaved: the same load for every setting
            samples[name].append(_batch(backend, inputs, runs))
    for backend in backends.values():
        backend.close()
    return {name: (statistics.median(w for w, _ in s), statistics.median(c for _, c in s))
            for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    settings: dict[str, int | None] = {"1 thread": 1, "LiteRT default": None, f"{CORES} (all cores)": CORES}
    rows = []
    for label, rel in MODELS.items():
        result = bench_model(fixture(rel), settings, args.rounds)
        rows.append((label, result))
        print(label, {k: f"{w:.1f} ms wall, {c:.1f} ms cpu" for k, (w, c) in result.items()}, flush=True)
    load = os.getloadavg()
    names = list(settings)
    lines = [
        "# CPU backend threads (`cpu_threads`)",
        "",
        f"`bench/bench_cpu_threads.py`, {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, "
        f"{CORES} usable cores (`os.sched_getaffinity`), load average {load[0]:.1f} / {load[1]:.1f} "
        f"(1 / 5 min: the host is shared). `CpuBackend.run` on each model's CPU twin (LiteRT "
        f"{_litert_version()}), median of {args.rounds} interleaved batches of ~0.3 s each; wall ms per "
        "run, and process CPU ms per run (all threads). Outputs identical across settings (checked).",
        "",
        "| model | " + " | ".join(f"{n} wall ms" for n in names) + " | " + " | ".join(
            f"{n} CPU ms" for n in names) + f" | speed-up {names[2]} vs 1 | vs LiteRT default |",
        "|---|" + "---:|" * (2 * len(names) + 2),
    ]
    for label, result in rows:
        walls = [result[n][0] for n in names]
        cpus = [result[n][1] for n in names]
        lines.append(f"| {label} | " + " | ".join(f"{w:.1f}" for w in walls) + " | "
                     + " | ".join(f"{c:.1f}" for c in cpus)
                     + f" | {walls[0] / walls[2]:.2f}x | {walls[1] / walls[2]:.2f}x |")
    lines += ["", "Speed-up = wall time of the baseline setting / wall time with one thread per core, both "
              "measured in this run.", ""]
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))


def _litert_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ai-edge-litert")
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    main()
