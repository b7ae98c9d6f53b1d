"""What the scene kit (libredgetpu_ros/scenes) costs per rendered frame, at 64×64 and at 320×240.

Thread CPU time (``_timing``) of ``render_sequence`` through the presets the tests and benches use: a
textured wall the camera approaches (``motion_scene``, grey) and a red disc moving across a colour wall
(``spot_scene``), ``FRAMES`` frames a call, per frame; median and min–max of ``REPEATS`` calls after one
untimed call. Baseline, same run: the 64×64 frame of the same scene (``× 64×64``: 320×240 has 18.75× the
pixels). BLAS on one thread, so thread CPU time sees all the work. The machine is shared (2 cores, ~8 jobs):
the load average is recorded.

    .venv/bin/python bench/bench_scenes.py     # writes bench/results/scenes.md (about 10 s of CPU)
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()  # before NumPy loads BLAS: thread CPU time must see all the work

import os  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402

from _timing import thread_times_ns, write_report  # noqa: E402
from libredgetpu_ros.scenes import presets, textures  # noqa: E402

OUT = _common.RESULTS / "scenes.md"
FRAMES = 8
REPEATS = 5
SIZES = ((64, 64), (320, 240))


def main() -> None:
    load_start = os.getloadavg()[0]
    wall, colour_wall = textures.natural(4, 256), textures.natural(3, 256, color=True)
    scenes = {
        "`motion_scene(\"approach\")`, grey wall": lambda size: presets.motion_scene(
            "approach", wall, size=size, frames=FRAMES),
        "`spot_scene`, red disc on a colour wall": lambda size: presets.spot_scene(
            (230, 30, 30), 12 * size[0] / 320, colour_wall, size=size, velocity_px=(300, 0), frames=FRAMES),
    }
    rows = []
    for label, make in scenes.items():
        per_size = {}
        for size in SIZES:
            ms = [t / 1e6 / FRAMES for t in thread_times_ns(lambda s=size, m=make: m(s), REPEATS)]
            per_size[size] = (statistics.median(ms), min(ms), max(ms))
        base = per_size[SIZES[0]][0]
        for size, (med, lo, hi) in per_size.items():
            rows.append(f"| {label} | {size[0]}×{size[1]} | {med:.1f} ({lo:.1f}–{hi:.1f}) | "
                        f"{med / base:.1f}× |")
    lines = ["# Scene kit: CPU per rendered frame", "",
             f"{platform.machine()}, Python {platform.python_version()}; "
             "`.venv/bin/python bench/bench_scenes.py`. "
             f"Thread CPU ms per frame ({FRAMES} frames a call), median (min–max) of {REPEATS} calls; "
             "baseline: the same scene at 64×64, same run. Shared machine (2 cores, ~8 jobs): load average "
             f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.", "",
             "| scene | frame | ms per frame: median (min–max) | × 64×64 |", "|---|---|---|---:|", *rows]
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
