"""What the pattern tracker's validity check (robotics/pattern_validity.py) costs per frame, per template.

Thread CPU time (``_timing``), LiteRT on one thread, frames from the validity tests' rendered scenes
(test/robotics/_pattern_scenes.py, ``clean``, held-out photos) at the template's input size. Per shape:
the check alone (the exact NCC over the whole frame, its local maxima and the decision), the CPU work the
tracker did before it (local normalisation and one exact-NCC refinement per device pass) and the whole
``track`` call in the normalized mode (two device runs on the CPU twin included). Each figure is the median
of ``REPEATS`` calls with the 10th-90th percentile spread; the machine is shared (2 cores, ~8 jobs), so
the spread says how much of a figure is waiting.

    tools/ros_sandbox.sh .venv/bin/python bench/bench_pattern_validity.py  # results/pattern_validity.md
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()  # before NumPy loads BLAS: thread CPU time must see all the work

import platform  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
from _timing import spread_cell as cell  # noqa: E402
from _timing import spread_us, write_report  # noqa: E402
from libredgetpu_ros.robotics import ncc  # noqa: E402
from libredgetpu_ros.robotics.pattern import REFINE_RADIUS, PatternTracker  # noqa: E402
from libredgetpu_ros.scenes import textures  # noqa: E402

RESULTS = _common.RESULTS / "pattern_validity.md"
REPEATS = 200
SHAPES = ((64, 8, 1), (64, 8, 3), (64, 16, 1), (128, 16, 1), (128, 32, 1))


def stats(fn, items: list) -> tuple[float, float, float]:
    return spread_us(fn, items, REPEATS)


def row(scenes, search: int, kernel: int, channels: int) -> str:
    case = scenes.case(search, kernel, "clean", textures.HELD_OUT_PHOTOS[0], scenes.EVAL_SEED)
    with PatternTracker.from_template(search, kernel, channels, backend="cpu") as tracker:
        frames = [tracker.fit(scenes._channels(image, channels)) for image, _ in case.frames]
        tracker.set_template_at(scenes._channels(case.reference, channels), case.x, case.y)
        weights = tracker.weights().astype(np.float32)
        normals = [ncc.normalize_search(f, kernel, kernel) for f in frames]
        answers = [tracker.track(f) for f in frames]
        half = (kernel - 1) / 2  # the answers' patch centres back to top-left corners
        inputs = [(n, m.x - half, m.y - half) for n, m in zip(normals, answers, strict=True)]
        check = stats(lambda a: tracker.validity.check(a[0], weights, a[1], a[2]), inputs)

        def before(f, passes=tracker.passes):  # normalisation and the refinements: the CPU work until now
            normal = ncc.normalize_search(f, kernel, kernel)
            for _ in range(passes):
                ncc.refine(normal, weights, search / 3, search / 3, REFINE_RADIUS)

        cpu = stats(before, frames)
        whole = stats(tracker.track, frames)
    return (f"| {search}/{kernel}×{kernel}/{channels}ch | {cell(check)} | {cell(cpu)} | "
            f"{check[0] / cpu[0]:.2f}x | {cell(whole)} | {100 * check[0] / whole[0]:.0f} % |")


def main() -> int:
    scenes = _common.load_test_helper("robotics/_pattern_scenes.py")
    lines = ["# PatternTracker validity check: CPU per frame (thread CPU µs, median (p10-p90))", "",
             f"Python {platform.python_version()}, {platform.machine()}, LiteRT 1 thread (CPU twin), "
             f"{REPEATS} calls a figure, frames of the template's input size; a shared, loaded machine "
             f"(2 cores, ~8 jobs): figures are from one run and their spread is shown.", "",
             "| template | validity check | CPU work before it (normalise + 2 refinements) | check / before "
             "| whole `track` (2 twin runs) | check share of `track` |", "|---|---:|---:|---:|---:|---:|"]
    lines += [row(scenes, *shape) for shape in SHAPES]
    write_report(RESULTS, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
