"""process-bag's steady rate against the pipeline alone on the same frames (classify and pose), pipelined
(reader and writer threads, the default) and in one thread, in wall-clock frames/s and in CPU time per frame.

Per round, interleaved (the 2 cores are shared with other jobs: every variant meets the same load):

1. **pipeline**: ``PerceptionPipeline.process`` alone on the bag's frames, decoded beforehand into memory
   (each frame its own copy), after 2 warm-up frames (the baseline);
2. **pipeline, bag views**: the same pipeline fed by ``FrameReader`` inline (zero-copy views into the mapped
   bag, read and decoded between inferences) and **copied into an aligned buffer**: each view copied into
   one reused 64-byte-aligned array first (is the pipeline slower on frames that come from the bag?);
3. **process-bag pipelined** / **one thread**: ``BagProcessor.run`` end to end on the bag (read, decode,
   pipeline, result messages, serialization, mcap write), its summary's steady rate (after model load and
   warm-up) and ``cpu_s`` (process CPU time of the frame loop, every thread).

Wall rates are frames / wall time of the loop; CPU is the process's CPU time (every thread: LiteRT's
worker, the reader and writer threads) per frame. One more run of the pipeline alone and of pipelined
process-bag per task, with ``/proc/self/task/*/schedstat`` sampled, splits that CPU by thread (not in the
rounds: the sampler costs CPU); then :class:`StepClock` splits the loop thread's time by step (CPU of
preprocess, inference, the rest of ``process``, the rest of the loop) and its loop's wall time into CPU,
run-queue wait and asleep-waiting (the GIL, LiteRT's barrier, a queue), for the pipeline alone,
process-bag pipelined with its helper threads niced (the default) and not, and in one thread.

Run (network-isolated, one benchmark at a time):
``flock /tmp/libredgetpu_heavy.lock tools/ros_sandbox.sh .venv/bin/python bench/bench_process_bag.py``
-> bench/results/process_bag.md
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import write_report
from bench_bags import _bringup, _camera_frames, _frames  # the bag, the configs and the decoded frames

RESULTS = Path(__file__).resolve().parent / "results" / "process_bag.md"
FRAMES = {"classify": 300, "pose": 45}  # ~0.5 s of loop each at this machine's rates
VARIANTS = ("pipeline", "views", "aligned copy", "pipelined", "one thread")


def _loop(pipeline: Any, frames: Iterable[np.ndarray]) -> tuple[float, float, int]:
    """(wall s, process CPU s, frames) of ``pipeline.process`` over ``frames``."""
    n = 0
    start, cpu = time.perf_counter(), time.process_time()
    for rgb in frames:
        pipeline.process(rgb)
        n += 1
    return time.perf_counter() - start, time.process_time() - cpu, n


def _aligned(shape: tuple[int, ...]) -> np.ndarray:
    raw = np.empty(int(np.prod(shape)) + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + int(np.prod(shape))].reshape(shape)


def pipeline_runs(config: Path, bag: Path, frames: list[np.ndarray], topic: str) -> dict[str, tuple]:
    """The pipeline alone on frames in memory, on the bag's views, and on views copied into one buffer."""
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline
    from libredgetpu_ros.ros.bag_processing import load_node_config
    from libredgetpu_ros.ros.bag_reader import FrameReader
    from libredgetpu_ros.ros.perception_node import pipeline_config

    out = {}
    with PerceptionPipeline.from_config(pipeline_config(load_node_config(config).params)) as pipeline:
        for rgb in frames[:2]:
            pipeline.process(rgb)  # warm-up (LiteRT allocates on the first runs)
        out["pipeline"] = _loop(pipeline, frames)
        with FrameReader(bag, [topic], thread=False) as reader:
            out["views"] = _loop(pipeline, (f.rgb for f in reader))
        buffer = _aligned(frames[0].shape)

        def copied(reader: FrameReader) -> Iterable[np.ndarray]:
            for f in reader:
                np.copyto(buffer, f.rgb)
                yield buffer

        with FrameReader(bag, [topic], thread=False) as reader:
            out["aligned copy"] = _loop(pipeline, copied(reader))
    return out


def bag_run(config: Path, bag: Path, out: Path, pipelined: bool,
            on_frame: Callable[[int], None] | None = None) -> tuple[float, float, int]:
    from libredgetpu_ros.ros.bag_processing import BagProcessor, load_node_config

    shutil.rmtree(out, ignore_errors=True)
    processor = BagProcessor(load_node_config(config), log=lambda _: None)
    if on_frame is not None:
        frame = processor._frame

        def counted(summary: Any, *args: Any) -> None:
            on_frame(summary.frames)
            frame(summary, *args)

        processor._frame = counted  # type: ignore[method-assign]
    summary = processor.run(bag, out, progress=False, pipelined=pipelined)
    if summary.processed != summary.frames:
        raise RuntimeError(summary.text())
    return summary.elapsed_s, summary.cpu_s, summary.frames


class ThreadCpu:
    """CPU ns per thread over a region: ``/proc/self/task/*/schedstat`` sampled every 5 ms by a thread of
    its own (threads that end inside the region keep their last sample), named by their Python names."""

    def __init__(self) -> None:
        self.last: dict[int, int] = {}
        self.base: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)

    def sample(self) -> None:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    self.last[int(tid)] = int(f.read().split()[0])
            except OSError:
                pass
        for t in threading.enumerate():
            if t.native_id is not None:
                self.names.setdefault(t.native_id, t.name)

    def start_region(self) -> None:
        self.sample()
        self.base = dict(self.last)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.005)

    def __enter__(self) -> ThreadCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def split(self, frames: int) -> dict[str, float]:
        """ms per frame by thread (LiteRT's worker has no Python name: "LiteRT (native)")."""
        out: dict[str, float] = {}
        for tid, ns in self.last.items():
            name = self.names.get(tid, "LiteRT (native)")
            name = {"MainThread": "main", "bag-prefetch": "reader (read + decode + prepare)",
                    "bag-writer": "writer (serialize + write)"}.get(name, name)
            if name not in ("sampler", "tqdm_monitor") and ns > self.base.get(tid, 0):
                out[name] = out.get(name, 0.0) + (ns - self.base.get(tid, 0)) / frames / 1e6
        return out


def thread_split(config: Path, bag: Path, out: Path, frames: list[np.ndarray]) -> dict[str, dict[str, float]]:
    """CPU ms per frame by thread of the pipeline alone and of one pipelined process-bag run (not in the
    rounds: the sampler costs CPU)."""
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline
    from libredgetpu_ros.ros.bag_processing import load_node_config
    from libredgetpu_ros.ros.perception_node import pipeline_config

    with PerceptionPipeline.from_config(pipeline_config(load_node_config(config).params)) as pipeline:
        for rgb in frames[:2]:
            pipeline.process(rgb)
        with ThreadCpu() as alone:
            alone.start_region()
            _, _, n = _loop(pipeline, frames)
    with ThreadCpu() as piped:
        _, _, m = bag_run(config, bag, out, True, lambda i: piped.start_region() if i == 0 else None)
    return {"pipeline alone": alone.split(n), "process-bag, pipelined": piped.split(m)}


class StepClock:
    """The loop thread's CPU per step and its loop's wall time split three ways: CPU (its clock), run-queue
    wait (runnable, no core: the machine's load and the process's other threads; its
    ``/proc/thread-self/schedstat``) and the rest, "waiting" (asleep: the GIL held by another thread,
    LiteRT's barrier once its spin ends, a queue). Steps, counted on the loop's thread only: preprocess
    (``InputTransform``: process-bag pipelined runs it on the reader thread, inside ``prepare``), inference
    (``CpuBackend.run``), the rest of ``PerceptionPipeline.prepare`` + ``run`` (post-processing, checks)
    and the rest of the loop (process-bag: the frame hand-overs, header, result messages, counters).
    Class-level wrappers, ~1 us each, set only inside ``with``. (Run-queue wait is not split by step: the
    kernel credits it when the thread gets a core back, which does not always fall in the step that
    waited.)"""

    STEPS = ("preprocess", "inference", "rest of process", "rest of the loop")

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.region: list[float] = [0.0, 0.0, 0.0]
        self._fd = -1
        self._restore: list[Callable[[], None]] = []

    def _now(self) -> tuple[float, float, float]:
        # CPU from the thread's clock: schedstat's runtime of a running thread lags up to a tick; its
        # run-queue wait is current (it grows only while the thread is off the core)
        return time.perf_counter(), time.thread_time(), int(os.pread(self._fd, 128, 0).split()[1]) / 1e9

    def _wrap(self, cls: type, name: str, step: str) -> None:
        original = getattr(cls, name)
        cpu = self.cpu
        cpu.setdefault(step, 0.0)
        loop = threading.get_ident()

        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != loop:  # the reader thread's prepare: not the loop's step
                return original(*args, **kwargs)
            start = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                cpu[step] += time.thread_time() - start

        setattr(cls, name, timed)
        self._restore.append(lambda: setattr(cls, name, original))

    def __enter__(self) -> StepClock:
        from libredgetpu_ros.backends.cpu import CpuBackend
        from libredgetpu_ros.perception.pipeline import PerceptionPipeline
        from libredgetpu_ros.perception.preprocess import InputTransform

        self._fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)  # the loop's (this) thread
        self._wrap(PerceptionPipeline, "prepare", "process")  # process = prepare + run
        self._wrap(PerceptionPipeline, "run", "process")
        self._wrap(InputTransform, "__call__", "preprocess")
        self._wrap(CpuBackend, "run", "inference")
        return self

    def __exit__(self, *exc: object) -> None:
        for restore in reversed(self._restore):
            restore()
        os.close(self._fd)

    def start(self) -> None:
        for step in self.cpu:
            self.cpu[step] = 0.0
        self.region = list(self._now())

    def stop(self) -> None:
        self.region = [b - a for a, b in zip(self.region, self._now(), strict=True)]

    def split(self, frames: int) -> dict[str, float]:
        """ms per frame: each step's CPU, then the loop's "CPU", "run-queue wait" and "waiting"."""
        c = self.cpu
        wall, cpu, queued = self.region
        steps = {"preprocess": c["preprocess"], "inference": c["inference"],
                 "rest of process": c["process"] - c["preprocess"] - c["inference"],
                 "rest of the loop": cpu - c["process"], "CPU": cpu, "run-queue wait": queued,
                 "waiting": wall - cpu - queued}
        return {k: v / frames * 1e3 for k, v in steps.items()}


def step_split(config: Path, bag: Path, out: Path, frames: list[np.ndarray],
               repeats: int = 3) -> dict[str, dict[str, float]]:
    """The loop thread's steps (:class:`StepClock`) for the pipeline alone and process-bag pipelined (helper
    threads at ``bag_threads.HELPER_NICE``, and not niced) and in one thread, medians of ``repeats``
    interleaved runs each (after the rounds: the wrappers cost ~3 us a frame, the same in each)."""
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline
    from libredgetpu_ros.ros import bag_threads
    from libredgetpu_ros.ros.bag_processing import load_node_config
    from libredgetpu_ros.ros.bag_writer import ResultWriter
    from libredgetpu_ros.ros.perception_node import pipeline_config

    runs: dict[str, list[dict[str, float]]] = {}
    close = ResultWriter.close
    stopped: list[bool] = []

    def closed(self: Any, finish: bool = True) -> None:  # the loop's clock stops at the first close
        close(self, finish)
        if not stopped:
            stopped.append(True)
            clock.stop()

    def first(i: int) -> None:
        if i == 0:
            clock.start()
    with StepClock() as clock:
        for _ in range(repeats):
            with PerceptionPipeline.from_config(pipeline_config(load_node_config(config).params)) as pipeline:
                for rgb in frames[:2]:
                    pipeline.process(rgb)
                clock.start()
                _, _, n = _loop(pipeline, frames)
                clock.stop()
            runs.setdefault("pipeline alone", []).append(clock.split(n))
            for pipelined, nice, what in ((True, bag_threads.HELPER_NICE, "process-bag, pipelined"),
                                          (True, 0, "process-bag, pipelined, helpers not niced"),
                                          (False, 0, "process-bag, one thread")):
                stopped.clear()
                ResultWriter.close = closed  # type: ignore[method-assign]
                default_nice, bag_threads.HELPER_NICE = bag_threads.HELPER_NICE, nice
                try:
                    _, _, m = bag_run(config, bag, out, pipelined, first)
                finally:
                    ResultWriter.close = close  # type: ignore[method-assign]
                    bag_threads.HELPER_NICE = default_nice
                runs.setdefault(what, []).append(clock.split(m))
    return {what: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for what, rs in runs.items()}


def parallel_speedup(size: int = 400, repeats: int = 12) -> float:
    """How much two threads of GIL-free work (OpenBLAS matmuls, one BLAS thread each) gain over one, right
    now: 2.0 on two free cores, 1.0 when the machine gives this process one core's worth."""
    a = np.random.default_rng(0).random((size, size))

    def work() -> None:
        for _ in range(repeats):
            a @ a

    start = time.perf_counter()
    work()
    work()
    serial = time.perf_counter() - start
    threads = [threading.Thread(target=work) for _ in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return serial / (time.perf_counter() - start)


def _ratios(runs: list[tuple], base: list[tuple]) -> tuple[list[float], list[float]]:
    """Per round: (variant fps / pipeline fps, pipeline CPU per frame / variant CPU per frame)."""
    pairs = list(zip(runs, base, strict=True))
    return ([(n / w) / (bn / bw) for (w, _, n), (bw, _, bn) in pairs],
            [(bc / bn) / (c / n) for (_, c, n), (_, bc, bn) in pairs])


TARGET = 0.95  # issues 35 / 36: process-bag(s) >= 0.95 x the pipeline alone, classify and pose


def _spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", default="640x480")
    parser.add_argument("--tasks", nargs="+", default=list(FRAMES), choices=list(FRAMES))
    parser.add_argument("--cpu-threads", type=int, default=None,
                        help="the node's cpu_threads for every variant (default: the parameter's, 0 = one "
                             "LiteRT thread per core; the shipped classify config sets 1)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.threads import limit_library_threads

    limit_library_threads(1)  # as the CLI does; the speed-up probe then runs one BLAS thread per thread
    load_start = os.getloadavg()
    speedups = [statistics.median(parallel_speedup() for _ in range(3))]
    rows: dict[str, dict[str, list[tuple[float, float, int]]]] = {}
    splits: dict[str, dict[str, dict[str, float]]] = {}
    steps: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_process_bag_") as tmp_name:
        tmp = Path(tmp_name)
        images = _camera_frames(tmp, args.size)
        for task in args.tasks:
            bag = tmp / f"camera_{task}"
            loops = -(-FRAMES[task] // len(images))
            make_bag(images, bag, MakeBagOptions(topic="/cam/image_raw", rate=10.0, loop=loops, start_ns=0),
                     progress=False)
            frames = _frames(bag)
            config = _bringup(tmp, task)
            if args.cpu_threads is not None:  # the same setting for the pipeline alone and process-bag
                _set_cpu_threads(config, args.cpu_threads)
            runs = rows[task] = {v: [] for v in VARIANTS}
            for i in range(args.rounds):
                for name, run in pipeline_runs(config, bag, frames, "/cam/image_raw").items():
                    runs[name].append(run)
                order = (True, False) if i % 2 == 0 else (False, True)  # neither always runs first
                for pipelined in order:
                    runs["pipelined" if pipelined else "one thread"].append(
                        bag_run(config, bag, tmp / "out", pipelined))
                print(f"{task} round {i + 1}: " + ", ".join(
                    f"{v} {r[-1][2] / r[-1][0]:.0f} fps" for v, r in runs.items()), flush=True)
            splits[task] = thread_split(config, bag, tmp / "out", frames)
            steps[task] = step_split(config, bag, tmp / "out", frames)
            del frames
    speedups.append(statistics.median(parallel_speedup() for _ in range(3)))
    report(args, rows, splits, steps, load_start, os.getloadavg(), speedups)
    return 0


def _set_cpu_threads(config: Path, threads: int) -> None:
    import yaml

    doc = yaml.safe_load(config.read_text())
    doc["nodes"][0]["parameters"]["cpu_threads"] = threads
    config.write_text(yaml.safe_dump(doc))


def _stage_bound(split: dict[str, float]) -> str:
    """The rate the thread split allows on two free cores: stages overlap, so a frame costs at least its
    slowest Python thread's CPU (each thread is one stage: reader, loop, writer; LiteRT's worker overlaps
    the loop's inference) and at least the total CPU spread over the two cores."""
    slowest = max((ms, name) for name, ms in split.items() if name != "LiteRT (native)")
    total = sum(split.values())
    bound = min(1e3 / slowest[0], 2e3 / total)
    return (f"Bound on two free cores: min(1 / slowest stage ({slowest[1]} {slowest[0]:.3f} ms), "
            f"2 / total CPU) = {bound:.0f} frames/s.")


def report(args: argparse.Namespace, rows: dict, splits: dict, steps: dict, load_start: tuple,
           load_end: tuple, speedups: list[float]) -> None:
    threads = "its default threads" if args.cpu_threads is None else f"cpu_threads {args.cpu_threads}"
    lines = ["# process-bag against the pipeline alone: pipelined and in one thread", "",
             f"`bench/bench_process_bag.py`, {time.strftime('%Y-%m-%d')}, "
             f"Python {platform.python_version()}, "
             f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs (load average "
             f"{load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end), CPU backend (LiteRT, "
             f"{threads}), one mcap bag per task of {args.size} rgb8 frames (the three fixture images "
             f"looped: classify {FRAMES['classify']}, pose {FRAMES['pose']}). {args.rounds} rounds, every "
             "variant once per round, interleaved; median (min-max) over the rounds. Ratios are per round "
             "(each against the pipeline alone of the same round): wall = variant fps / pipeline fps, "
             "CPU = pipeline CPU ms / variant CPU ms (above 1: cheaper than the baseline, i.e. noise).", "",
             f"Two threads of GIL-free work ran {speedups[0]:.2f}x as fast as one at the start of the run "
             f"and {speedups[-1]:.2f}x at the end (2.0: two free cores): with the cores this busy, "
             "wall-clock rates measure the scheduler as much as the code, and a process with more runnable "
             "threads gets a larger share of the cores, so the wall ratios below swing both ways; CPU time "
             "per frame is the steadier measure (it inflates too under contention: shared caches).", ""]
    for task, runs in rows.items():
        base = runs["pipeline"]
        lines += [f"## {task}", "",
                  "| variant | frames/s (wall) | / pipeline (wall) | CPU ms / frame "
                  "| pipeline / variant (CPU) |",
                  "|---|---|---|---|---|"]
        for name, rs in runs.items():
            fps = [n / w for w, _, n in rs]
            cpu = [c / n * 1e3 for _, c, n in rs]
            wall_ratio, cpu_ratio = _ratios(rs, base)
            label = {"views": "pipeline on the bag's views (read inline)",
                     "aligned copy": "pipeline on views copied into an aligned buffer",
                     "pipelined": "**process-bag, pipelined (default)**",
                     "one thread": "process-bag, one thread"}.get(name, "pipeline alone (baseline)")
            digits = 0 if min(fps) >= 100 else 1
            lines.append(f"| {label} | {_spread(fps, digits)} | {_spread(wall_ratio)} | {_spread(cpu, 3)} | "
                         f"{_spread(cpu_ratio)} |")
        for what, split in splits.get(task, {}).items():
            lines += ["", f"CPU ms per frame by thread, {what} (one more run, schedstat): " + "; ".join(
                f"{name} {ms:.3f}" for name, ms in sorted(split.items(), key=lambda kv: -kv[1]))
                + f"; total {sum(split.values()):.3f}. {_stage_bound(split)}"]
        if steps.get(task):
            columns = [*StepClock.STEPS, "CPU", "run-queue wait", "waiting"]
            lines += ["", "The loop's thread, ms per frame: CPU by step, then its loop's wall time split "
                      "into CPU, run-queue wait (no core) and waiting (asleep: the GIL held by another "
                      "thread, LiteRT's barrier, a queue); `StepClock`, medians of 3 more interleaved runs "
                      "each:", "",
                      "| variant | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
            for what, split in steps[task].items():
                lines.append(f"| {what} | " + " | ".join(f"{split[c]:.3f}" for c in columns) + " |")
        lines.append("")
    lines += [f"Target (issues 35 / 36): process-bag >= {TARGET} x the pipeline alone, median of the rounds:"]
    for task, runs in rows.items():
        for name in ("pipelined", "one thread"):
            wall, cpu = (statistics.median(r) for r in _ratios(runs[name], runs["pipeline"]))
            lines.append(f"- {task}, {name}: wall {wall:.2f} ({'met' if wall >= TARGET else 'not met'}), "
                         f"CPU {cpu:.2f} ({'met' if cpu >= TARGET else 'not met'})")
    write_report(args.out, lines)


if __name__ == "__main__":
    sys.exit(main())
