"""Corpus throughput of ``process-bags``: bag count x workers (local engine, 1 and 2 processes), the Ray
engine's overhead per bag and per run against the local engine, and the per-bag steady rate against the
pipeline alone on the same frames, all in one run.

Each point is the wall time of the whole command (a fresh process, as a user runs it: imports, workers,
every bag's model load and warm-up, outputs written and published, summary), on a corpus of B bags of F
frames (the classify model on the CPU twin, the fixture images, mcap). Wall time, not CPU time: what a
corpus costs is the time until its results are there; the 2 cores are shared with other jobs, so each point
is repeated (best and median shown) and the load said. The scaling model is fitted on the medians:
``wall(B, N) = T0 + ceil(B / N) * (S + F / fps)`` (least squares for T0 and the per-bag cost per N).

Run (network-isolated, one benchmark at a time):
``flock /tmp/libredgetpu_heavy.lock tools/ros_sandbox.sh .venv/bin/python bench/bench_fleet.py``
-> bench/results/fleet.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import write_report

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "fleet.md"
MODEL = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
IMAGES = ("images/cat.bmp", "images/grace_hopper.bmp", "images/test_couple.jpg")


def _corpus(root: Path, bags: int, frames: int) -> Path:
    from libredgetpu_ros.cli import main as cli
    from libredgetpu_ros.fixtures import fixture

    folder = root / f"corpus_{bags}"
    for i in range(bags):
        images = [str(fixture(IMAGES[(i + k) % len(IMAGES)])) for k in range(len(IMAGES))]
        loops = math.ceil(frames / len(images))
        assert cli.main(["make-bag", "--images", *images, "--out", str(folder / f"bag{i:02d}"), "--rate",
                         "30", "--loop", str(loops), "--start", "100", "--no-progress"]) == 0
    return folder


def _config(root: Path) -> Path:
    import yaml
    from libredgetpu_ros.fixtures import fixture

    path = root / "classify.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "model": str(fixture(MODEL)), "backend": "cpu", "task": "classify", "score_threshold": 0.0,
        "top_k": 3, "max_results": 3}}}))
    return path


def run_once(corpus: Path, config: Path, out: Path, jobs: int, engine: str) -> dict:
    import resource

    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "libredgetpu_ros.cli.main", "process-bags", "--config",
                           str(config), "-o", str(out), "--jobs", str(jobs), "--engine", engine, "--json",
                           "--no-progress", str(corpus)], capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command and the workers it waited for
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    summary = json.loads(done.stdout)
    return {"wall": wall, "cpu": cpu, "frames": summary["totals"]["frames"],
            "bag_fps": statistics.median(b["fps"] for b in summary["bags"]),
            "bag_cpu_ms": statistics.median(b["cpu_s"] / b["frames"] * 1e3 for b in summary["bags"]),
            "setup": statistics.median(b["setup_s"] for b in summary["bags"]),
            "bag_wall": statistics.median(b["wall_s"] for b in summary["bags"])}


def pipeline_alone(config: Path, corpus: Path) -> dict:
    """The pipeline alone on the corpus's first bag's frames, decoded in memory: frames/s (wall) and process
    CPU ms per frame, after 2 warm-up frames (one measurement; called once per repeat, interleaved)."""
    from libredgetpu_ros.bags.storage import open_reader
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline
    from libredgetpu_ros.ros.bag_processing import load_node_config
    from libredgetpu_ros.ros.image_msgs import to_rgb
    from libredgetpu_ros.ros.perception_node import pipeline_config
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image

    reader = open_reader(sorted(corpus.iterdir())[0])
    try:
        frames = [to_rgb(deserialize_message(bytes(raw), Image)).copy() for _, _, raw in reader.messages()]
    finally:
        reader.close()
    with PerceptionPipeline.from_config(pipeline_config(load_node_config(config).params)) as pipeline:
        for rgb in frames[:2]:
            pipeline.process(rgb)
        start, cpu = time.perf_counter(), time.process_time()
        for rgb in frames:
            pipeline.process(rgb)
        return {"fps": len(frames) / (time.perf_counter() - start),
                "cpu_ms": (time.process_time() - cpu) / len(frames) * 1e3}


def fit(points: dict[int, float], jobs: int) -> tuple[float, float]:
    """(T0, per-bag cost) of ``wall = T0 + ceil(B / jobs) * cost`` by least squares over the bag counts."""
    xs = np.array([math.ceil(b / jobs) for b in points], float)
    if len(set(xs)) < 2:
        return float("nan"), float("nan")  # one point of the model: nothing to fit
    ys = np.array(list(points.values()), float)
    a = np.vstack([np.ones_like(xs), xs]).T
    (t0, cost), *_ = np.linalg.lstsq(a, ys, rcond=None)
    return float(t0), float(cost)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bags", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--frames", type=int, default=60, help="frames per bag")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ray-bags", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--ray-repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        config = _config(tmp)
        corpora = {b: _corpus(tmp, b, args.frames) for b in sorted(set(args.bags) | set(args.ray_bags))}
        local: dict[tuple[int, int], list[dict]] = {}
        alone: list[dict] = []
        for _ in range(args.repeats):  # interleaved: the machine's load hits every point alike
            alone.append(pipeline_alone(config, corpora[min(corpora)]))
            for b in args.bags:
                for jobs in (1, 2):
                    local.setdefault((b, jobs), []).append(run_once(corpora[b], config, tmp / "out", jobs,
                                                                    "local"))
        ray_runs: dict[int, list[dict]] = {}
        try:
            import ray  # noqa: F401

            for _ in range(args.ray_repeats):
                for b in args.ray_bags:
                    ray_runs.setdefault(b, []).append(run_once(corpora[b], config, tmp / "out", 2, "ray"))
        except ImportError:
            pass
    report(args, local, ray_runs, alone, load)
    return 0


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def _med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def report(args: argparse.Namespace, local: dict, ray_runs: dict, alone: list[dict], load: tuple) -> None:
    lines = ["# process-bags: corpus throughput, workers, Ray overhead", "",
             f"Python {platform.python_version()}, {os.cpu_count()} cores shared with other jobs (load "
             f"average {load[0]:.1f} / {load[1]:.1f} at the start: figures move by 10-20% between runs). "
             f"Classify (MobileNet v1 0.25 128, CPU twin), {args.frames} frames of the three fixture images "
             f"per bag, mcap; wall time of the whole command (fresh process), best / median of "
             f"{args.repeats} (Ray: {args.ray_repeats}). `bench/bench_fleet.py`.", "",
             "| bags | workers | wall best (s) | wall median (s) | corpus frames/s | speed-up vs 1 worker | "
             "CPU median (s) | per-bag setup (s) | per-bag steady fps |",
             "|---|---|---|---|---|---|---|---|---|"]
    for b in args.bags:
        one = _med(local[(b, 1)], "wall")
        for jobs in (1, 2):
            runs = local[(b, jobs)]
            wall = _med(runs, "wall")
            lines.append(f"| {b} | {jobs} local | {min(r['wall'] for r in runs):.2f} | {wall:.2f} | "
                         f"{runs[0]['frames'] / wall:.0f} | {one / wall:.2f}x | {_med(runs, 'cpu'):.1f} | "
                         f"{_med(runs, 'setup'):.2f} | "
                         f"{_med(runs, 'bag_fps'):.0f} |")
    for b, runs in sorted(ray_runs.items()):
        wall = _med(runs, "wall")
        lines.append(f"| {b} | 2 ray (local cluster) | {min(r['wall'] for r in runs):.2f} | {wall:.2f} | "
                     f"{runs[0]['frames'] / wall:.0f} | "
                     f"{_ratio(_med(local[(b, 1)], 'wall'), wall) if (b, 1) in local else 'n/a'} | "
                     f"{_med(runs, 'cpu'):.1f} (driver only) | {_med(runs, 'setup'):.2f} | "
                     f"{_med(runs, 'bag_fps'):.0f} |")
    lines += ["", "## Scaling model", "",
              "`wall(B, N) = T0 + ceil(B / N) * c`, c = S + F / fps (a bag's setup, model load and warm-up "
              "included, plus its frames at the steady rate); fitted on the medians:", "",
              "| engine | workers | T0 (s) | c per bag (s) |", "|---|---|---|---|"]
    fits = {}
    for jobs in (1, 2):
        fits[jobs] = fit({b: _med(local[(b, jobs)], "wall") for b in args.bags}, jobs)
        lines.append(f"| local | {jobs} | {fits[jobs][0]:.2f} | {fits[jobs][1]:.2f} |")
    cpu = {jobs: fit({b: _med(local[(b, jobs)], "cpu") for b in args.bags}, 1) for jobs in (1, 2)}
    if len(ray_runs) >= 2:
        fits[0] = fit({b: _med(r, "wall") for b, r in ray_runs.items()}, 2)
        lines.append(f"| ray | 2 | {fits[0][0]:.2f} | {fits[0][1]:.2f} |")
    lines += ["", "CPU time (the command and its workers; `cpu(B) = f + b * B`, least squares): "
              + "; ".join(f"{jobs} worker(s): f = {cpu[jobs][0]:.2f} s, b = {cpu[jobs][1]:.2f} s per bag"
                          for jobs in (1, 2))
              + ". On an idle machine with N free cores the wall time would follow the CPU: about "
              "f + ceil(B / N) * b, the parent's and each worker's imports in f."]
    steady = statistics.median(_med(runs, "bag_fps") for runs in local.values())
    steady_cpu = statistics.median(_med(runs, "bag_cpu_ms") for runs in local.values())
    alone_fps, alone_cpu = _med(alone, "fps"), _med(alone, "cpu_ms")
    lines += ["", f"Per-bag steady rate (process_bag's loop, median over the local runs): {steady:.0f} "
              f"frames/s and {steady_cpu:.2f} CPU ms per frame (the bag's `cpu_s`); the pipeline alone on "
              f"the same frames, measured once per repeat between the runs: {alone_fps:.0f} frames/s and "
              f"{alone_cpu:.2f} CPU ms per frame (medians of {len(alone)}): {steady / alone_fps:.2f}x in "
              f"wall rate (the scheduler's share of loaded cores as much as the code: 2-worker runs share "
              f"the 2 cores with each other), {alone_cpu / steady_cpu:.2f}x in CPU time.", ""]
    if 0 in fits:
        lines.append(f"Ray against the local engine (2 workers each): {fits[0][0] - fits[2][0]:+.2f} s per "
                     f"run (the local cluster's start and stop) and {fits[0][1] - fits[2][1]:+.2f} s per "
                     f"pair of bags (task scheduling, a worker's imports).")
    write_report(RESULTS, lines)


if __name__ == "__main__":
    sys.exit(main())
