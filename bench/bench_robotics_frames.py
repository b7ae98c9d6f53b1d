"""The robotics modules' CPU part per 64×64 frame against a bare LiteRT invoke of their interpreter.

For each module (spot red/bright, looming in both TTC modes, flow with and without the refinement, the
compass) on 64×64 frames rendered by the scene kit (libredgetpu_ros/scenes), one run:

- ``invoke``: ``interpreter.invoke()`` alone, on the module's own loaded interpreter with the module's own
  model input of the first frame already set: the floor a frame costs on the CPU twin (on an Edge TPU this
  part leaves the CPU);
- ``frame``: the module's whole per-frame call (``track``, ``detect(frame, stamp)``, ``step(frame)``) on the
  scene's frames in turn;
- ``CPU part`` = frame - invoke, and its ratio to the invoke (issue 36's target: <= 0.25x);
- the pieces of the CPU part timed alone on the same frames (what costs what).

Thread CPU time (``_timing``), BLAS, OpenCV and LiteRT single-threaded; ``ROUNDS`` interleaved rounds of
``CALLS`` calls, each figure the median of the round medians with the lowest and highest round median in
brackets (the machine is shared: the spread says how much of a figure is waiting for a core).

    python bench/bench_robotics_frames.py --out before.md   # with PYTHONPATH on an older checkout, then
    python bench/bench_robotics_frames.py --before before.md   # writes bench/results/robotics_frames.md

``--before`` adds that run's ratios as a column (the same script on the same machine, a separate run).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before NumPy loads BLAS: thread CPU time must see all the work

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from itertools import cycle, pairwise  # noqa: E402
from pathlib import Path  # noqa: E402

import cv2  # noqa: E402
import numpy as np  # noqa: E402
from _timing import range_cell, round_medians_us, write_report  # noqa: E402
from libredgetpu_ros.robotics.compass import VisualCompass  # noqa: E402
from libredgetpu_ros.robotics.flow import OpticalFlow  # noqa: E402
from libredgetpu_ros.robotics.looming import LoomingDetector  # noqa: E402
from libredgetpu_ros.robotics.spot import SpotTracker  # noqa: E402
from libredgetpu_ros.scenes import presets, textures  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "robotics_frames.md"
ROUNDS = 7
CALLS = 60
TARGET = 0.25  # issue 36: CPU part <= 0.25x the bare invoke

Stats = tuple[float, float, float]


def interleaved(candidates: dict[str, Callable[[], object]]) -> dict[str, Stats]:
    """(median, lowest, highest) of the round medians in µs per candidate, rounds interleaved."""
    return round_medians_us(candidates, ROUNDS, CALLS)


cell = range_cell


def scenes(size: tuple[int, int] = (64, 64)) -> dict[str, list[np.ndarray]]:
    wall = textures.natural(3, 256, color=True)
    spot = [f.image for f in presets.spot_scene((230, 30, 30), 12 * size[0] / 320, wall, size=size,
                                                velocity_px=(300, 0), frames=8)]
    approach = [f.image for f in presets.motion_scene("approach", textures.natural(4, 256), size=size,
                                                      frames=16)]
    lateral = [f.image for f in presets.motion_scene("lateral", textures.natural(4, 256), size=size,
                                                     frames=16)]
    pan = [f.image for f in presets.pan_scene(textures.natural(5, 1024, color=True), 60.0, size=size,
                                              frames=16)]
    return {"spot": spot, "approach": approach, "lateral": lateral, "pan": pan}


def bare_invoke(module, model_input: np.ndarray) -> Callable[[], object]:
    """The module's own interpreter, its input set once: invoke() and nothing around it."""
    backend = module.runner.backend
    interp = backend._interpreter
    interp.set_tensor(backend._input_indices[0], model_input.reshape(module.template.input.shape))
    return interp.invoke


def over(frames: list[np.ndarray], fn: Callable[[np.ndarray], object]) -> Callable[[], object]:
    items = cycle(frames)
    return lambda: fn(next(items))


def spot_case(variant: str, frames: list[np.ndarray]) -> tuple[dict, dict]:
    tracker = SpotTracker.from_template(64, variant, backend="cpu")
    fitted = [tracker.fit(f) for f in frames]
    weights = None if tracker._filter is None else tracker.runner.parameters.twin[tracker._filter.index]
    scale = tracker.filter_scale
    candidates = {"invoke": bare_invoke(tracker, fitted[0]), "frame": over(frames, tracker.track),
                  "fit (channels, resize)": over(frames, tracker.fit),
                  "validity check": over(fitted, lambda f: tracker.validity.frame(f, weights, scale)),
                  "runner.run (the invoke included)": over(fitted, lambda f: tracker.runner.run((f[None],)))}
    name, decoder = tracker.template.output.name, tracker.decoder
    raws = [tracker.runner.run((f[None],))[0][name] for f in fitted]  # the outputs the frames decode
    candidates["decode and result"] = over(raws, lambda raw: decoder.decode(raw, 0, True, "ok", 0.01, 1.0))
    # what the bench's own wrapper (a lambda taking the next frame) adds to the frame and each piece
    candidates["bench wrapper alone (a no-op)"] = over(frames, lambda frame: None)
    return {"tracker": tracker}, candidates


def looming_case(mode: str, frames: list[np.ndarray]) -> tuple[dict, dict]:
    detector = LoomingDetector.from_template(64, backend="cpu", ttc_mode=mode)
    stamps = iter(i / 30.0 for i in range(10 ** 7))
    fitted = [detector.fit(f) for f in frames]
    candidates = {"invoke": bare_invoke(detector, fitted[0]),
                  "frame": over(frames, lambda f: detector.detect(f, next(stamps)))}
    if mode == "scale":
        from libredgetpu_ros.robotics.ttc import ScaleTtc

        ttc = ScaleTtc(detector.scale_ttc.settings)
        ttc_stamps = iter(i / 30.0 for i in range(10 ** 7))
        name = detector.template.output.name
        raws = [(f, detector.runner.run([f[None]])[0][name]) for f in fitted]  # the device's outputs
        candidates["border correction"] = over(raws, lambda p: detector.border.zones(*p))
        candidates["scale TTC update"] = over(fitted, lambda f: ttc.update(f[:, :, 0], next(ttc_stamps)))
    return {"detector": detector}, candidates


def flow_case(name: str, refine: bool, frames: list[np.ndarray]) -> tuple[dict, dict]:
    flow = OpticalFlow.from_template(name, backend="cpu", refine=refine)
    model_input = flow.model_frame(frames[0])
    candidates = {"invoke": bare_invoke(flow, model_input), "frame": over(frames, flow.step)}
    if refine:
        from libredgetpu_ros.robotics import flow_refine

        grays = [cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in frames]
        fines = [flow_refine.fine_frame(g) for g in grays]
        pairs = list(pairwise(fines))
        candidates["fine frame (levels)"] = over(grays, flow_refine.fine_frame)
        candidates["refine one seed"] = over(pairs, lambda p: flow_refine.refine(p[0], p[1], 0.0, 0.0))
    return {"flow": flow}, candidates


def compass_case(frames: list[np.ndarray]) -> tuple[dict, dict]:
    compass = VisualCompass.from_template("gabor_64x64_p4", 60.0, backend="cpu")
    model_input = compass.flow.model_frame(frames[0])
    return {"compass": compass}, {"invoke": bare_invoke(compass.flow, model_input),
                                  "frame": over(frames, compass.step)}


def first_frames(make: Callable[[], object], call: Callable[[object, int], object]) -> str:
    """A newly opened module's first frame and the median of its next 20, thread CPU µs (kernels are
    compiled or loaded when the module opens: nothing is compiled on the first frame)."""
    module = make()
    times = []
    for i in range(21):
        start = time.thread_time_ns()
        call(module, i)
        times.append((time.thread_time_ns() - start) / 1e3)
    module.close()
    rest = statistics.median(times[1:])
    return f"{times[0]:.0f} | {rest:.0f} | {times[0] / rest:.1f}x"


def before_cells(path: Path | None) -> tuple[str, dict[str, str]]:
    """(revision, {module: "CPU part / invoke" cell, (module, piece): µs cell}) of an earlier run's file."""
    if path is None:
        return "", {}
    text = path.read_text(encoding="utf-8")
    rev = text.split("` at ", 1)[1].split(";", 1)[0] if "` at " in text else "before"
    cells: dict = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if len(parts) == 5 and parts[4].endswith(")") and "x (" in parts[4]:
            cells[parts[0]] = parts[4].split(" ")[0]
        elif len(parts) == 3 and parts[2][:1].isdigit():
            cells[(parts[0], parts[1])] = parts[2].split(" ")[0]
    return rev, cells


def revision() -> str:
    try:
        import libredgetpu_ros

        root = Path(libredgetpu_ros.__file__).resolve().parents[2]
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=False).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--before", type=Path, help="an earlier run's results file: its ratios as a column")
    args = parser.parse_args()
    load_at_start = os.getloadavg()[0]
    cv2.setNumThreads(1)
    frames = scenes()
    camera = scenes((320, 240))
    cases = [("spot red_64 (checked)", lambda: spot_case("red", frames["spot"])),
             ("spot bright_64 (checked)", lambda: spot_case("bright", frames["spot"])),
             ("looming 64, scale TTC", lambda: looming_case("scale", frames["approach"])),
             ("looming 64, libredgetpu TTC", lambda: looming_case("libredgetpu", frames["approach"])),
             ("flow gabor_64x64_p4, refined", lambda: flow_case("gabor_64x64_p4", True, frames["lateral"])),
             ("flow gabor_64x64_p4, refine=False",
              lambda: flow_case("gabor_64x64_p4", False, frames["lateral"])),
             ("compass gabor_64x64_p4 (pinhole, refined)", lambda: compass_case(frames["pan"])),
             ("flow gabor_64x64_p4, refined, 320×240 frames",
              lambda: flow_case("gabor_64x64_p4", True, camera["lateral"]))]
    rev, before = before_cells(args.before)
    firsts = [
        ("spot red_64", first_frames(lambda: SpotTracker.from_template(64, "red", backend="cpu"),
                                     lambda m, i: m.track(frames["spot"][i % 8]))),
        ("looming 64, scale TTC", first_frames(lambda: LoomingDetector.from_template(64, backend="cpu"),
                                               lambda m, i: m.detect(frames["approach"][i % 16], i / 30.0))),
        ("flow gabor_64x64_p4, refined", first_frames(
            lambda: OpticalFlow.from_template("gabor_64x64_p4", backend="cpu"),
            lambda m, i: m.step(frames["lateral"][i % 16])))]
    rows, pieces = [], []
    for label, make in cases:
        opened, candidates = make()
        result = interleaved(candidates)
        invoke, frame = result["invoke"], result["frame"]
        part = frame[0] - invoke[0]
        share = part / invoke[0]
        verdict = "—" if "320×240" in label else "met" if share <= TARGET else "not met"
        earlier = f" {before.get(label, '—')} |" if before else ""
        rows.append(f"| {label} | {cell(invoke)} | {cell(frame)} | {part:.1f} | {share:.2f}x ({verdict}) |"
                    f"{earlier}")
        for name, stats in result.items():
            if name not in ("invoke", "frame"):
                earlier = f" {before.get((label, name), '—')} |" if before else ""
                pieces.append(f"| {label} | {name} | {cell(stats)} |{earlier}")
        for module in opened.values():
            module.close()
    lines = ["# Robotics frames at 64×64: the CPU part against a bare LiteRT invoke (issue 36)", "",
             f"`bench/bench_robotics_frames.py` at {revision()}; {platform.machine()}, Python "
             f"{platform.python_version()}, NumPy {np.__version__}; thread CPU time in µs, median of "
             f"{ROUNDS} interleaved rounds of {CALLS} calls (lowest–highest round median in brackets); "
             f"LiteRT, BLAS and OpenCV on one thread; {os.cpu_count()} cores shared with other jobs (load "
             f"average {load_at_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end).", "",
             "| module | bare invoke (same interpreter, same input) | whole frame | CPU part | CPU part / "
             "invoke (target ≤ 0.25x) |" + (f" before ({rev}, separate run) |" if before else ""),
             "|---|---:|---:|---:|---:|" + ("---:|" if before else ""), *rows, "",
             "Pieces of the CPU part, timed alone on the same frames:", "",
             "| module | piece | µs |" + (f" before ({rev}) |" if before else ""),
             "|---|---|---:|" + ("---:|" if before else ""), *pieces, "",
             "First frames of a newly opened module (one run each, µs; the process had run the others: "
             "the first LiteRT invoke and first-touch memory still cost extra, no compiling happens):", "",
             "| module | first frame | median of the next 20 | first / next |", "|---|---:|---:|---:|",
             *(f"| {label} | {cells} |" for label, cells in firsts)]
    write_report(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
