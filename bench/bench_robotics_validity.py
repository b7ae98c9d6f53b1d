"""What issue 31's CPU work adds per frame: spot validity, normalised pattern matching, the scale TTC, and
the tracker node's extra message, beside a bare LiteRT invoke of each template's twin.

Thread CPU time (``_timing``), LiteRT on one thread, frames rendered by the scene kit (libredgetpu_ros/scenes)
at the template size (64×64) and at 320×240 (resized to the template by the module, the same in both modes,
so the added work is the same: the check runs on the template input). Each figure is the median of
``REPEATS`` calls with the 10th-90th percentile spread; the machine is shared (2 cores, ~8 jobs), so the
spread says how much of a figure is waiting. "added" = the checked mode minus LibrEdgeTPU's mode of the
same module on the same frames, measured in this run.

    tools/ros_sandbox.sh .venv/bin/python bench/bench_robotics_validity.py  # results/robotics_validity.md
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()  # before NumPy loads BLAS: thread CPU time must see all the work

import platform  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _timing import spread_cell as cell  # noqa: E402
from _timing import spread_us, write_report  # noqa: E402
from libredgetpu_ros.robotics import ncc  # noqa: E402
from libredgetpu_ros.robotics.looming import LoomingDetector  # noqa: E402
from libredgetpu_ros.robotics.pattern import PatternTracker  # noqa: E402
from libredgetpu_ros.robotics.spot import SpotTracker  # noqa: E402
from libredgetpu_ros.scenes import presets, textures  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "robotics_validity.md"
REPEATS = 300
Spread = tuple[float, float, float]  # spread_us: median, p10, p90


def stats(fn, items: list) -> Spread:
    return spread_us(fn, items, REPEATS)


def bare_invoke(module) -> Spread:
    """LiteRT invoke alone on the module's twin (input already set): the floor a frame costs."""
    backend = module.runner.backend
    interp = backend._interpreter  # the loaded twin's interpreter: the bare call, nothing around it
    index = backend._input_indices[0]
    interp.set_tensor(index, np.zeros(module.template.input.shape, np.uint8))
    return stats(lambda _: interp.invoke(), [None])


def frames(size: tuple[int, int]) -> dict[str, list[np.ndarray]]:
    wall = textures.natural(3, 256, color=True)
    spot = [f.image for f in presets.spot_scene((230, 30, 30), 12 * size[0] / 320, wall, size=size,
                                                velocity_px=(300, 0), frames=8)]
    approach = [f.image for f in presets.motion_scene("approach", textures.natural(4, 256), size=size,
                                                      frames=16)]
    return {"spot": spot, "approach": approach}


def row(label: str, size, plain, checked: Spread, unchecked: Spread, note: str = "") -> str:
    """A table row: the bare LiteRT invoke of ``plain``'s twin, LibrEdgeTPU's mode (``unchecked``), the
    checked mode and what the check adds (``note``: what the added time is made of)."""
    added = f"{checked[0] - unchecked[0]:.0f}" + (f" ({note})" if note else "")
    return (f"| {label} | {size[0]}×{size[1]} | {cell(bare_invoke(plain))} | {cell(unchecked)} | "
            f"{cell(checked)} | {added} |")


def spot_rows(size, scene) -> list[str]:
    rows = []
    for name in ("red", "bright"):
        checked = SpotTracker.from_template(64, name, backend="cpu")
        plain = SpotTracker.from_template(64, name, backend="cpu", mode="libredgetpu")
        a, b = stats(checked.track, scene["spot"]), stats(plain.track, scene["spot"])
        fitted = [checked.fit(f) for f in scene["spot"]]
        weights = None if checked._filter is None else checked.runner.parameters.twin[
            checked._filter.index].reshape(-1)
        alone = stats(lambda f, c=checked, w=weights: c.validity.check(f, w, c.filter_scale), fitted)
        rows.append(row(f"spot {name}_64", size, plain, a, b, f"check alone {cell(alone)}"))
        checked.close()
        plain.close()
    return rows


def pattern_rows(size, scene) -> list[str]:
    rows = []
    for search, kernel in ((64, 8), (128, 16)):
        norm = PatternTracker.from_template(search, kernel, 1, backend="cpu")
        plain = PatternTracker.from_template(search, kernel, 1, backend="cpu", mode="libredgetpu")
        first = norm.fit(scene["approach"][0])
        norm.set_template_at(first, search // 2 - kernel // 2, search // 2 - kernel // 2)
        plain.set_template(plain.cut_patch(first, search // 2 - kernel // 2, search // 2 - kernel // 2))
        a, b = stats(norm.track, scene["approach"]), stats(plain.track, scene["approach"])
        fitted = [norm.fit(f) for f in scene["approach"]]
        weights = norm.weights().astype(np.float32)

        def cpu_part(f, k=kernel, w=weights, passes=norm.passes):  # the CPU side, device runs apart
            normal = ncc.normalize_search(f, k, k)
            for _ in range(passes):
                ncc.refine(normal, w, 20.0, 20.0, 3)

        alone = stats(cpu_part, fitted)
        rows.append(row(f"pattern {search}/{kernel}×{kernel}", size, plain, a, b,
                        f"CPU alone {cell(alone)}, + 2nd run"))
        norm.close()
        plain.close()
    return rows


def looming_rows(size, scene) -> list[str]:
    scale = LoomingDetector.from_template(64, backend="cpu")
    plain = LoomingDetector.from_template(64, backend="cpu", ttc_mode="libredgetpu")
    stamps = iter(i / 30.0 for i in range(10 ** 6))
    approach = scene["approach"]
    a = stats(lambda f: scale.detect(f, next(stamps)), approach)
    b = stats(lambda f: plain.detect(f, next(stamps)), approach)
    line = row("looming 64 (scale TTC)", size, plain, a, b)
    scale.close()
    plain.close()
    return [line]


def node_rows() -> list[str]:
    """The tracker node's message building: the new ``target`` array, valid and not (rclpy messages)."""
    try:
        from libredgetpu_ros.robotics.offsets import TrackResult
        from libredgetpu_ros.ros.robotics import messages
        from std_msgs.msg import Header
    except ImportError:
        return ["", "(rclpy not importable here: node rows skipped; run inside tools/ros_sandbox.sh)"]

    class Options:
        gain, publish_markers, publish_annotated, marker_scale = 1.0, False, False, 0.01

    rgb = np.zeros((240, 320, 3), np.uint8)
    good = TrackResult(0.2, -0.1, (1, 2), 1, reason="ok", coverage=0.01, mass=0.98, measured=(0.2, -0.1))
    bad = good.invalidated("no_target", coverage=0.0, mass=0.0)
    header = Header(frame_id="cam")
    with_target = stats(lambda r: messages.tracker_messages(header, rgb, r, 64, 64, Options()), [good, bad])
    target_only = stats(lambda r: messages.target_msg(header, r, 320, 240, (10.0, 10.0)), [good, bad])
    return ["", "| tracker node messages per frame (no markers / annotated) | µs |", "|---|---:|",
            f"| offset + servo_error + target (valid and not, alternating) | {cell(with_target)} |",
            f"| of which the `target` Detection2DArray | {cell(target_only)} |"]


def main() -> int:
    lines = ["# Issue 31: CPU work added per frame (thread CPU µs, median (p10-p90))", "",
             f"Python {platform.python_version()}, {platform.machine()}, LiteRT 1 thread, {REPEATS} calls "
             f"a figure; a shared, loaded machine (2 cores, ~8 jobs): figures are from one run and their "
             f"spread is shown.", "",
             "| module | input | bare LiteRT invoke of the twin | LibrEdgeTPU mode, whole frame | checked "
             "mode, whole frame | added |", "|---|---|---:|---:|---:|---:|"]
    for size in ((64, 64), (320, 240)):
        scene = frames(size)
        lines += spot_rows(size, scene) + pattern_rows(size, scene) + looming_rows(size, scene)
    lines += node_rows()
    write_report(RESULTS, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
