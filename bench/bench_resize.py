"""A camera-size frame shrunk to a template's size: robotics/resize_kernels.py against cv2.resize(INTER_AREA).

For each (camera size, template size, channels) the package meets, one run:

- ``OpenCV``: ``cv2.resize(frame, size, interpolation=cv2.INTER_AREA)`` (what fit_image called before);
- ``compiled``: ``resize_kernels.shrink(frame, ...)`` (the same bytes: test_resize_exactness.py);
- ``fit_image``, before / after: the whole call a module makes on a node's frame (a read-only ``rgb8``
  view) for a colour and a one-channel template, with the compiled resize (and luma: a one-channel
  template's colour frame, image_kernels.py) switched off / on;
- the refined flow's whole ``step`` on rendered 320×240 camera frames (issue 36's "flow, refined, 320×240
  frames" row of bench_robotics_frames.py) with the compiled resize off / on (its luma was compiled
  before).

Thread CPU time (``_timing``), OpenCV on one thread (as the nodes set it, threads.py: with more threads its
work leaves this thread and the figure would hide it); ``ROUNDS`` interleaved rounds of ``CALLS`` calls, each
figure the median of the round medians with the lowest and highest round median in brackets (the machine
is shared: the spread says how much of a figure is waiting for a core).

    python bench/bench_resize.py          # writes bench/results/resize.md
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from _timing import range_cell, round_medians_us, write_report
from libredgetpu_ros.robotics import image_kernels, resize_kernels
from libredgetpu_ros.robotics.flow import OpticalFlow
from libredgetpu_ros.robotics.image import fit_image
from libredgetpu_ros.scenes import presets, textures

RESULTS = Path(__file__).resolve().parent / "results" / "resize.md"
ROUNDS = 7
CALLS = 40
PAIRS = [((240, 320), (64, 64), 1), ((240, 320), (64, 64), 3), ((480, 640), (64, 64), 1),
         ((480, 640), (64, 64), 3), ((480, 640), (96, 96), 3), ((720, 1280), (64, 64), 1),
         ((239, 321), (47, 63), 1)]

Stats = tuple[float, float, float]


def interleaved(candidates: dict[str, Callable[[], object]]) -> dict[str, Stats]:
    """(median, lowest, highest) of the round medians in µs per candidate, rounds interleaved."""
    return round_medians_us(candidates, ROUNDS, CALLS)


cell = range_cell


def ratio(a: Stats, b: Stats) -> str:
    """a / b with the spread of the round medians (lowest a / highest b – highest a / lowest b)."""
    return f"{a[0] / b[0]:.2f}x ({a[1] / b[2]:.2f}–{a[2] / b[1]:.2f})"


def camera_frame(height: int, width: int) -> np.ndarray:
    """A rendered photo-like RGB frame of the camera's size, as a node gets it: a read-only view."""
    texture = textures.natural(7, max(height, width), color=True)
    frame = np.clip(np.rint(texture[:height, :width]), 0, 255).astype(np.uint8)
    view = np.frombuffer(frame.tobytes(), np.uint8).reshape(frame.shape)
    return view


def without_kernels(fn: Callable[[], object], luma: bool = True) -> Callable[[], object]:
    """``fn`` run with the compiled resize (and, if ``luma``, the compiled luma) switched off in fit_image:
    its path before them (OpenCV's resize; OpenCV's cvtColor for a one-channel template, the general path
    never used the luma kernel)."""
    def run() -> object:
        resize_kernels._warm = False
        image_kernels._warm = not luma
        try:
            return fn()
        finally:
            resize_kernels._warm = image_kernels._warm = True
    return run


def flow_row() -> str:
    """The refined flow's frame on 320×240 camera frames, the compiled resize off / on, one run."""
    frames = [f.image for f in presets.motion_scene("lateral", textures.natural(4, 256), size=(320, 240),
                                                    frames=16)]
    flow = OpticalFlow.from_template("gabor_64x64_p4", backend="cpu", refine=True)
    turn = iter(range(1 << 30))

    def step() -> object:
        return flow.step(frames[next(turn) % len(frames)])

    result = interleaved({"before": without_kernels(step, luma=False), "after": step})
    flow.close()
    return (f"| flow gabor_64x64_p4, refined, 320×240 frames: whole frame | {cell(result['before'])} | "
            f"{cell(result['after'])} | {ratio(result['after'], result['before'])} |")


def revision() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    cv2.setNumThreads(1)
    if not (resize_kernels.warm_up() and image_kernels.warm_up()):  # as a module's open warms them
        print("numba is not installed: nothing to compare", file=sys.stderr)
        return 1
    rows, fits = [], []
    for (height, width), (out_h, out_w), channels in PAIRS:
        rgb = camera_frame(height, width)
        frame = rgb if channels == 3 else cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)[:, :, None]
        want = cv2.resize(frame, (out_w, out_h), interpolation=cv2.INTER_AREA).reshape(out_h, out_w, channels)
        got = resize_kernels.shrink(frame, out_h, out_w)
        assert got is not None and np.array_equal(got, want), "not OpenCV's bytes"
        result = interleaved({
            "opencv": lambda f=frame, s=(out_w, out_h): cv2.resize(f, s, interpolation=cv2.INTER_AREA),
            "compiled": lambda f=frame, h=out_h, w=out_w: resize_kernels.shrink(f, h, w)})
        label = f"{width}×{height} → {out_w}×{out_h}, {channels} channel{'s' if channels > 1 else ''}"
        rows.append(f"| {label} | {cell(result['opencv'])} | {cell(result['compiled'])} | "
                    f"{ratio(result['compiled'], result['opencv'])} |")
        if (out_h, out_w) == (64, 64) and channels == 3:  # a node's rgb8 frame through fit_image
            for template in (3, 1):
                def call(f: np.ndarray = rgb, c: int = template) -> np.ndarray:
                    return fit_image(f, 64, 64, c)

                fit = interleaved({"before": without_kernels(call), "after": call})
                fits.append(f"| {width}×{height} rgb8 (read-only) → 64×64×{template} | "
                            f"{cell(fit['before'])} | {cell(fit['after'])} | "
                            f"{ratio(fit['after'], fit['before'])} |")
    fits.append(flow_row())
    lines = ["# Camera-size frames to a template's size: the compiled INTER_AREA shrink against OpenCV's", "",
             f"`bench/bench_resize.py` at {revision()}; {platform.machine()}, Python "
             f"{platform.python_version()}, NumPy {np.__version__}, OpenCV {cv2.__version__}; thread CPU "
             f"time in µs, median of {ROUNDS} interleaved rounds of {CALLS} calls (lowest–highest round "
             f"median in brackets; ratios: median, and the extremes the round medians allow); OpenCV on "
             f"one thread; a shared, loaded machine (2 cores, ~8 jobs). Both give the same bytes "
             f"(test/robotics/test_resize_exactness.py; checked again here on each frame).", "",
             "| frame → template | cv2.resize INTER_AREA | compiled (resize_kernels) | compiled / OpenCV |",
             "|---|---:|---:|---:|", *rows, "",
             "fit_image on a node's frame (colour template: the resize; one-channel template: the whole "
             "frame's luma, OpenCV's cvtColor before / image_kernels' compiled pass after, then the resize; "
             "the flow: its own compiled luma of the whole frame (both columns), then the resize, the "
             "invoke and the refinement):",
             "",
             "| frame → template input | before (OpenCV) | after (compiled) | after / before |",
             "|---|---:|---:|---:|", *fits]
    write_report(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
