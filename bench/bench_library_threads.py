"""DeepLab's CPU tail against LiteRT's, by library thread setting, idle and beside a competing CPU load;
report: bench/results/library_threads.md.

Settings (each in a fresh child process):
- ``libraries' default``: no ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` in the environment, nothing set
  (what the package did before ``threads.py``: one OpenBLAS thread per core);
- ``package default``: the same environment, then ``threads.limit_library_threads()`` as a node's ``main``,
  the CLI and ``Pipeline.open`` call it (``library_threads`` = 1);
- ``pinned``: ``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1`` in the environment (the other benches' setting).

Conditions: ``idle`` (nothing added; the machine is shared with other engineers' jobs all the same) and
``loaded``: two busy-looping processes (bounded: killed after the condition, and they stop by themselves
after ``--load-s``). Each child times, alternately and 20 times, our tail on the boundary tensors of
grace_hopper.bmp and LiteRT (one thread) invoking the full CPU model and the model cut at the Edge TPU
boundary (LiteRT's tail = full - cut): thread CPU time (the calling thread's work), process CPU time (all
threads: what a spinning pool takes from the rest of the robot) and wall time (what a frame waits). Rounds
repeat the settings x conditions grid, interleaved; cells give the median over rounds and the min–max spread.
The children use the package's numba cache folder as a user's process would (kernels loaded, or compiled
once, when the tail is built, before the timed calls).

    tools/ros_sandbox.sh .venv/bin/python bench/bench_library_threads.py [--rounds 5]
Target (issue 36): tail <= 0.75x LiteRT's (full - cut), package default, idle and loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "library_threads.md"
SETTINGS = ("libraries' default", "package default", "pinned")
CONDITIONS = ("idle", "loaded")
CALLS = 20
_BUSY = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


def _child(setting: str) -> dict[str, float]:
    import cv2
    from ai_edge_litert.interpreter import Interpreter
    from libredgetpu_ros.backends.twin import cut_at_tensors
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.formats import load_model
    from libredgetpu_ros.postprocess.deeplab import DeepLabTail
    from libredgetpu_ros.threads import limit_library_threads

    if setting == "package default":
        limit_library_threads()
    tail = DeepLabTail.from_model(load_model(fixture("deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite")))
    twin = fixture("deeplab/deeplabv3_mnv2_pascal_quant.tflite")
    full = Interpreter(str(twin), num_threads=1)
    content, _, _ = cut_at_tensors(twin.read_bytes(), tail.input_names)
    cut = Interpreter(model_content=content, num_threads=1)
    bgr = cv2.imread(str(fixture("images/grace_hopper.bmp")))
    image = cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (513, 513))[None]
    for interpreter in (full, cut):
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], image)
    cut.invoke()
    outputs = {d["name"]: cut.get_tensor(d["index"]) for d in cut.get_output_details()}
    tail(outputs)
    full.invoke()

    clocks = {"wall": time.perf_counter, "thread": time.thread_time, "process": time.process_time}

    def timed(fn) -> dict[str, float]:
        start = {k: clock() for k, clock in clocks.items()}
        fn()
        return {k: (clock() - start[k]) * 1e3 for k, clock in clocks.items()}

    runs: dict[str, list[dict[str, float]]] = {"tail": [], "full": [], "cut": []}
    for _ in range(CALLS):
        runs["tail"].append(timed(lambda: tail(outputs)))
        runs["full"].append(timed(full.invoke))
        runs["cut"].append(timed(cut.invoke))
    result = {}
    for clock in clocks:
        med = {k: statistics.median(r[clock] for r in vs) for k, vs in runs.items()}
        result[f"tail_{clock}"] = med["tail"]
        result[f"litert_{clock}"] = med["full"] - med["cut"]
    return result


def _run_child(setting: str) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                        "LIBREDGETPU_ROS_LIBRARY_THREADS")}
    if setting == "pinned":
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, __file__, "--child", setting], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _spread(values: list[float], digits: int = 1) -> str:
    return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"
            if len(values) > 1 else f"{values[0]:.{digits}f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--load-s", type=float, default=120.0, help="upper bound of each busy process's life")
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return 0
    results: dict[tuple[str, str], list[dict[str, float]]] = {
        (s, c): [] for s in SETTINGS for c in CONDITIONS}
    for round_index in range(args.rounds):
        order = SETTINGS[round_index % len(SETTINGS):] + SETTINGS[:round_index % len(SETTINGS)]
        for condition in CONDITIONS:
            busy = []
            if condition == "loaded":
                busy = [subprocess.Popen([sys.executable, "-c", _BUSY.format(s=args.load_s)])
                        for _ in range(2)]
            try:
                for setting in order:  # rotated each round: no setting always runs first
                    results[setting, condition].append(_run_child(setting))
            finally:
                for proc in busy:
                    proc.kill()
                    proc.wait()
    load = os.getloadavg()
    cores = len(os.sched_getaffinity(0))
    busy_note = ": the machine was loaded by other jobs" if max(load[:2]) > cores else ""
    lines = [
        "# Library thread pools: DeepLab's CPU tail against LiteRT's",
        "",
        f"`bench/bench_library_threads.py --rounds {args.rounds}` on {platform.machine()}, "
        f"{cores} usable cores shared with other engineers' jobs (load average "
        f"{load[0]:.1f} / {load[1]:.1f} at the end{busy_note}). Per child process: {CALLS} alternating "
        "calls of our tail and of LiteRT (1 thread) on the full and the cut model, medians; cells: median "
        "over the interleaved rounds (min–max). LiteRT's tail = full − cut model. Thread CPU time is the "
        "calling thread's work (LiteRT with one thread and our tail with one BLAS thread run there); process "
        "CPU time adds every other thread (spinning BLAS workers: the `libraries' default` row); wall time "
        "is what a frame waits, and with other jobs on the 2 cores it swings between calls. `loaded` = "
        "two busy-looping processes beside the child, started and stopped by the bench. The calls alternate "
        "with LiteRT's full model, so our tail starts each call with caches holding LiteRT's activations, as "
        "in a node.",
        "",
        "| setting | condition | tail thread CPU ms | LiteRT tail thread CPU ms | tail / LiteRT (thread CPU) "
        "| tail / LiteRT (process CPU) | tail wall ms | LiteRT tail wall ms | tail / LiteRT (wall) "
        "| target ≤ 0.75× (CPU, wall) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (setting, condition), runs in results.items():
        ratios = {clock: [r[f"tail_{clock}"] / r[f"litert_{clock}"] for r in runs]
                  for clock in ("thread", "process", "wall")}
        cpu_met = max(ratios["thread"] + ratios["process"]) <= 0.75
        wall_met = max(ratios["wall"]) <= 0.75
        verdict = f"{'met' if cpu_met else 'missed'}, {'met' if wall_met else 'missed'}"
        lines.append(
            f"| {setting} | {condition} | {_spread([r['tail_thread'] for r in runs], 2)} | "
            f"{_spread([r['litert_thread'] for r in runs], 2)} | {_spread(ratios['thread'], 2)}× | "
            f"{_spread(ratios['process'], 2)}× | {_spread([r['tail_wall'] for r in runs], 2)} | "
            f"{_spread([r['litert_wall'] for r in runs], 2)} | {_spread(ratios['wall'], 2)}× | "
            f"{verdict if setting == 'package default' else '(' + verdict + ')'} |")
    lines += [
        "",
        "`package default` is the default environment: nothing set by the caller, the package's own setting "
        "as every node, the CLI and `Pipeline.open` apply it (`threads.py`, `library_threads` = 1; parameter "
        "`library_threads` of the perception node, `$LIBREDGETPU_ROS_LIBRARY_THREADS` elsewhere); the target "
        "applies to it, read on the worst round (met: every round ≤ 0.75×). `pinned` = "
        "`OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1` set by the caller; `libraries' default` = neither "
        "(OpenBLAS starts one thread per core; its workers also spin during LiteRT's invokes, which inflates "
        "LiteRT's process CPU there: read that row on thread CPU).",
        "",
    ]
    text = "\n".join(lines)
    OUT.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
