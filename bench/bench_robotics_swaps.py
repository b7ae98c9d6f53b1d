"""Robotics swaps and frames: colour / template swaps side by side with LibrEdgeTPU's own code, CPU-twin
frames, and what the tracker / looming nodes add per frame.

All figures are thread CPU time (best of N unless said; LiteRT on one thread), measured in this run:

- colour swap: our ``SpotTracker.set_color`` (quantize, blob patch, atomic publish) on a template opened
  with ``backend="none"`` (no device, no twin rebuild: the work a swap does before an upload), against
  LibrEdgeTPU's ``SpotTracker.set_color`` (quantize, patch, flag the re-upload) on the same compiled file.
  Then the CPU backend's extra step (LiteRT rebuilt on the patched twin, once per swap).
- template swap: our ``PatternTracker.set_template_raw`` (16×16 and 8×8) on a stand-in blob (no compiled
  pattern template exists) against LibrEdgeTPU's blob patcher ``_patch_conv2d_blob`` on the same blob and
  offsets (its ``set_template`` needs a compiled file); and ``set_template`` from a patch (zero mean, gain).
- CPU-twin frames: ``SpotTracker.track`` and ``LoomingDetector.detect`` on 64×64 frames (fit + LiteRT +
  decode), and LibrEdgeTPU's decoders on the same raw outputs.
- node overhead: ``TrackerNode.process`` / ``LoomingNode.process`` (publish offset + servo error / the
  Looming message, no subscribers to markers) minus the module call they wrap, in-process (rclpy, inside
  tools/ros_sandbox.sh), plus the base's frame conversion ``to_rgb``.

LibrEdgeTPU is imported from a checkout at bench time (``$LIBREDGETPU_SRC``, default /work/ext/LibrEdgeTPU;
nothing of it is in this repository; its package imports pyusb, for which an empty module stands in when
pyusb is absent: nothing here talks to a device). Without a checkout its columns say "absent".

    tools/ros_sandbox.sh .venv/bin/python bench/bench_robotics_swaps.py   # writes bench/results/robotics.md
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()  # before NumPy loads BLAS: thread CPU time must see all the work

import functools  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _libredgetpu import import_package  # noqa: E402
from _timing import best_ns, median_ns, ratio, write_report  # noqa: E402
from libredgetpu_ros.robotics.looming import LoomingDetector, compute_tau  # noqa: E402
from libredgetpu_ros.robotics.pattern import PatternTracker  # noqa: E402
from libredgetpu_ros.robotics.spot import COLOR_PRESETS, SpotTracker  # noqa: E402
from libredgetpu_ros.robotics.template import load_template  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "robotics.md"
REPEATS = 2000
FRAME_REPEATS = 500


def cycled_best(fn, items: list, repeats: int = REPEATS) -> int:
    """Best thread time of ``fn(item)`` over ``items`` taken in turn."""
    it = iter(items * (2 * repeats // max(1, len(items)) + 2))
    return best_ns(lambda: fn(next(it)), repeats)


def us(ns: float) -> str:
    return f"{ns / 1e3:.2f}"


def bench_colour(lib) -> list[str]:
    template = load_template("color_red_64x64")
    ours = SpotTracker(template, backend="none")
    colours = [COLOR_PRESETS[c] for c in ("green", "blue", "red")]
    ours_ns = cycled_best(ours.set_color, colours)
    theirs_ns = None
    if lib is not None:
        from libredgetpu.spot_tracker import SpotTracker as TheirTracker

        theirs = TheirTracker(str(template.compiled_path))
        theirs_ns = cycled_best(theirs.set_color, [list(c) for c in colours])
    cpu = SpotTracker(template, backend="cpu")
    cycle = iter(colours * 200)
    rebuild_ns = median_ns(lambda: cpu.set_color(next(cycle)), 100)
    cpu.close()
    lines = ["## Colour swap (64×64 colour template, PARAMETER_CACHING blob 132,416 B)", "",
             "| | µs | vs LibrEdgeTPU |", "|---|---:|---:|",
             f"| LibrEdgeTPU `set_color` | {'absent' if theirs_ns is None else us(theirs_ns)} | 1.0x |",
             f"| ours `set_color` (quantize, patch, publish) | {us(ours_ns)} | "
             f"{ratio(theirs_ns or 0, ours_ns)} faster |",
             f"| ours on the CPU backend (+ LiteRT rebuilt on the patched twin; median) | {us(rebuild_ns)} "
             f"| |"]
    met = ours_ns <= 5000 and (theirs_ns is None or ours_ns < theirs_ns)
    return [*lines, "", f"Target: ≤ 5 µs and faster than LibrEdgeTPU: **{'met' if met else 'NOT met'}**.", ""]


def _pattern_blob(template, size: int) -> dict[str, np.ndarray]:
    """Stand-in for the missing compiled blob (``size`` bytes): the twin's filter at the sidecar's offsets."""
    offsets = np.asarray(template.sidecar["conv_weight_offsets"])
    blob = np.zeros(max(int(offsets.max()) + 1, size), np.uint8)
    blob[offsets] = template.twin.buffer_data(template.conv_weights()).reshape(-1).view(np.uint8) ^ 0x80
    kind = {"pc_params": "pc", "eo_params": "eo"}[template.sidecar["conv_weight_blob"]]
    return {kind: blob}


def _blob_sizes(template, tracker) -> dict[str, int]:
    """Two stand-in sizes: all the twin's constants (a lower bound: a compiled blob holds at least those) and
    the compiled spot trackers' bytes per soft-argmax position times this grid (same layer structure:
    bright_64x64 keeps 131,264 B for 4,096 positions)."""
    twin = template.twin
    constants = sum(twin.buffer_data(t).nbytes for t in twin.tensors if twin.buffer_data(t) is not None)
    bright = load_template("bright_64x64").blobs()["pc"].size / 4096
    return {"twin constants": constants,
            "scaled from the spot trackers": round(bright * tracker.grid_width * tracker.grid_height)}


def bench_template(lib) -> list[str]:
    lines = ["## Template swap (PatternTracker; no compiled pattern template exists: stand-in blobs)", "",
             "LibrEdgeTPU's `set_template_raw` is its own code run on an object holding what its constructor "
             "would read from a compiled file (the sidecar's offsets, the stand-in blob); it copies the blob "
             "twice per swap, ours writes only the patched values (the full blob is built once, at upload) "
             "and also versions the swap and updates the CPU twin.", "",
                      "| template | stand-in blob | bytes | LibrEdgeTPU `set_template_raw` µs | ours "
             "`set_template_raw` µs | vs LibrEdgeTPU | ours `set_template(patch)` µs |",
             "|---|---|---:|---:|---:|---:|---:|"]
    verdicts: dict[str, list[bool]] = {}
    for name in ("pattern_64x64_16x16_1ch", "pattern_128x128_16x16_1ch", "pattern_64x64_8x8_3ch"):
        template = load_template(name)
        probe = PatternTracker(template, backend="none")
        for label, size in _blob_sizes(template, probe).items():
            blobs = _pattern_blob(template, size)
            ours = PatternTracker(template, backend="none", blobs=blobs)
            rng = np.random.default_rng(0)
            values = [rng.integers(-128, 128, ours.patch_shape(), dtype=np.int8) for _ in range(4)]
            patches = [rng.integers(0, 256, ours.patch_shape(), dtype=np.uint8) for _ in range(4)]
            ours_ns = cycled_best(ours.set_template_raw, values)
            patch_ns = cycled_best(ours.set_template, patches)
            theirs_ns = None
            if lib is not None:
                from libredgetpu.pattern_tracker import PatternTracker as TheirTracker

                blob = bytes(next(iter(blobs.values())))
                theirs = types.SimpleNamespace(
                    _conv_weight_count=ours.kernel_height * ours.kernel_width * ours.channels,
                    _conv_weight_offsets=np.asarray(template.sidecar["conv_weight_offsets"], dtype=np.intp),
                    _conv_weight_blob=template.sidecar["conv_weight_blob"], _original_pc_params=blob,
                    _original_eo_params=blob, _pc_params=blob, _eo_params=blob, _driver=None,
                    _uncompiled_tflite_path=None)
                theirs_ns = cycled_best(functools.partial(TheirTracker.set_template_raw, theirs), values)
            if ours.kernel_width == 16:
                verdicts.setdefault(label, []).append(
                    ours_ns <= 50_000 and (theirs_ns is None or ours_ns < theirs_ns))
            lines.append(f"| {name} | {label} | {next(iter(blobs.values())).size} | "
                         f"{'absent' if theirs_ns is None else us(theirs_ns)} | {us(ours_ns)} | "
                         f"{ratio(theirs_ns or 0, ours_ns)} | {us(patch_ns)} |")
    lines.append("")
    for label, ok in verdicts.items():
        lines.append(f"Target (16×16, {label}): ≤ 50 µs and faster than LibrEdgeTPU: "
                     f"**{'met' if all(ok) else 'NOT met'}**.")
    lines.append("")
    return lines


def bench_frames(lib) -> list[str]:
    rng = np.random.default_rng(1)
    spot = SpotTracker.from_template(64, "red", backend="cpu")
    looming = LoomingDetector.from_template(64, backend="cpu")
    rgb = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (64, 64), dtype=np.uint8)
    spot_ns = median_ns(lambda: spot.track(rgb), FRAME_REPEATS)
    loom_ns = median_ns(lambda: looming.detect(gray, 1.0), FRAME_REPEATS)
    raw = spot.runner.run([spot.model_input(rgb)])[0][spot.template.output.name]
    zones_raw = looming.runner.run([looming.model_input(gray)])[0][looming.template.output.name]
    ours_decode = best_ns(lambda: spot.decoder.decode(raw), REPEATS)
    ours_tau = best_ns(lambda: compute_tau(looming.decode(zones_raw)), REPEATS)
    theirs_decode = theirs_tau = None
    if lib is not None:
        from libredgetpu.looming_detector import LoomingDetector as TheirLooming
        from libredgetpu.spot_tracker import SpotTracker as TheirTracker

        theirs = TheirTracker(str(spot.template.compiled_path))
        device_bytes = (raw.reshape(-1).view(np.uint8) ^ 0x80).tobytes()
        theirs_decode = best_ns(lambda: theirs._decode_tracker_output(device_bytes, theirs._y_offset,
                                                                       theirs._temperature), REPEATS)
        their_loom = TheirLooming(str(looming.template.compiled_path))
        out = their_loom._output_info

        def their_zones_tau():
            from libredgetpu._quantize import dequantize

            zones = dequantize(np.frombuffer(zones_raw.tobytes(), np.uint8)[:9], out.scale, out.zero_point)
            return TheirLooming.compute_tau(zones)

        theirs_tau = best_ns(their_zones_tau, REPEATS)
    spot.close()
    looming.close()
    return ["## CPU-twin frames (64×64) and decoders", "",
            "| | ours µs | LibrEdgeTPU µs | vs LibrEdgeTPU |", "|---|---:|---:|---:|",
            f"| spot frame: fit + LiteRT + decode (median) | {us(spot_ns)} | | |",
            f"| looming frame: fit + LiteRT + zones + tau + TTC (median) | {us(loom_ns)} | | |",
            f"| tracker decode (2 int8 -> offsets) | {us(ours_decode)} | "
            f"{'absent' if theirs_decode is None else us(theirs_decode)} | "
            f"{ratio(theirs_decode or 0, ours_decode)} |",
            f"| looming dequantize + tau | {us(ours_tau)} | "
            f"{'absent' if theirs_tau is None else us(theirs_tau)} | {ratio(theirs_tau or 0, ours_tau)} |",
            "", f"Target: a 64×64 spot / looming frame ≤ 1 ms: "
            f"**{'met' if max(spot_ns, loom_ns) <= 1e6 else 'NOT met'}**.", ""]


def _process(node, rgb, header, stamps) -> None:
    header.stamp.sec = next(stamps)  # increasing stamps (the TTC history wants them)
    node.process(rgb, header, None)


def bench_nodes() -> list[str]:
    """In-process: the nodes' process() minus the module call it wraps; plus the base's to_rgb."""
    import rclpy
    from libredgetpu_ros.ros.image_msgs import to_rgb
    from libredgetpu_ros.ros.robotics.looming_node import LoomingNode
    from libredgetpu_ros.ros.robotics.tracker_node import TrackerNode
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header

    rclpy.init()
    rows = []
    try:
        rng = np.random.default_rng(2)
        rgb = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
        msg = Image(height=64, width=64, encoding="rgb8", step=192, data=rgb.tobytes())
        header = Header(frame_id="camera")
        for cls, template, attribute in ((TrackerNode, "color_red_64x64", "_tracker"),
                                         (LoomingNode, "looming_64x64_3x3", "_detector")):
            node = cls(parameter_overrides=[Parameter("template", value=template),
                                            Parameter("backend", value="cpu")])
            node.trigger_configure()
            node.trigger_activate()
            module = getattr(node, attribute)
            module_call = functools.partial(module.track, rgb) if attribute == "_tracker" else \
                functools.partial(module.detect, rgb, 1.0)
            process = functools.partial(_process, node, rgb, header, iter(range(10**9)))
            node_ns = median_ns(process, FRAME_REPEATS)
            module_ns = median_ns(module_call, FRAME_REPEATS)
            convert_ns = median_ns(lambda: to_rgb(msg, 1 << 24), FRAME_REPEATS)
            rows.append((cls.__name__, node_ns, module_ns, convert_ns))
            node.teardown()
            node.destroy_node()
    finally:
        rclpy.try_shutdown()
    lines = ["## Node overhead per frame (in-process, 64×64 rgb8, medians)", "",
             "| node | process() µs | module call µs | node adds µs | + to_rgb µs |",
             "|---|---:|---:|---:|---:|"]
    worst = 0.0
    for name, node_ns, module_ns, convert_ns in rows:
        adds = node_ns - module_ns + convert_ns
        worst = max(worst, adds)
        lines.append(f"| {name} | {us(node_ns)} | {us(module_ns)} | {us(node_ns - module_ns)} | "
                     f"{us(convert_ns)} |")
    lines += ["", f"Target: the node adds ≤ 1 ms per frame (publish + conversion): "
              f"**{'met' if worst <= 1e6 else 'NOT met'}** (worst {us(worst)} µs).", ""]
    return lines


def main() -> int:
    lib = import_package("spot_tracker.py")
    lines = ["# Robotics swaps and frames", "",
             f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; thread CPU "
             f"time. "
             f"LibrEdgeTPU: {'absent' if lib is None else Path(lib.__file__).parent.parent}. "
             "Made by `bench/bench_robotics_swaps.py`.", ""]
    lines += bench_colour(lib)
    lines += bench_template(lib)
    lines += bench_frames(lib)
    lines += bench_nodes()
    write_report(RESULTS, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
