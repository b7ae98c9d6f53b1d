"""``libredgetpu-ros robotics MODULE``: run a robotics module (spot, pattern, looming, ...) on image files.

Each module registers one ``(name, help, add_arguments, run)`` entry in :data:`MODULES` (see
:func:`register`); the shared options (``--model``, ``--backend``, ``--device``, ``--no-resize``, ``--json``,
``IMAGE...`` or ``--bag BAG [--topic T]``) are added for every module, so a new module only declares its
own. Output: one result per image (``--json``: a JSON object with ``module``, ``template``, ``backend`` and
``results``). With ``--bag`` the images are the bag's camera frames, decoded as the nodes decode them
(``ros/bag_reader``), and ``args.stamps`` holds their header stamps: modules that integrate over time use
those instead of ``--fps``, so the results equal what the node publishes for the bag replayed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from libredgetpu_ros.backend_kinds import BACKEND_KINDS
from libredgetpu_ros.cli import robotics_learning
from libredgetpu_ros.cli.robotics_registry import MODULES, RoboticsCommand, register

HELP = "run a robotics module (spot, pattern, looming, ...) on image files: offsets, zones, tau, TTC"
EXAMPLES = (
    "libredgetpu-ros robotics spot --model color_red_64x64 frame1.png frame2.png --json",
    "libredgetpu-ros robotics looming --model looming_64x64_3x3 --fps 30 f1.png f2.png f3.png",
    "libredgetpu-ros robotics compass --model gabor_64x64_p4 --fov 60 f1.png f2.png --json",
    "libredgetpu-ros robotics looming --model looming_64x64_3x3 --bag cam_bag   # a bag's frames and stamps",
    "libredgetpu-ros robotics MODULE --help      # a module's options",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="module", metavar="MODULE", required=True)
    for command in MODULES.values():
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        if command.own_inputs:
            command.add_arguments(p)
            p.set_defaults(robotics_command=command)
            continue
        p.add_argument("--model", required=True,
                       help="template: a compiled *_edgetpu.tflite, its twin, its sidecar, or a name such as "
                            "color_red_64x64 (model cache first: models fetch NAME; then "
                            "$LIBREDGETPU_ROS_TEMPLATES, the fixtures)")
        p.add_argument("--backend", choices=BACKEND_KINDS, default="auto",
                       help="auto = the Edge TPU if one is attached, else the CPU twin (default)")
        p.add_argument("--device", help="which Edge TPU (index or USB bus path)")
        p.add_argument("--no-resize", action="store_true",
                       help="refuse images whose size differs from the template's instead of resizing them")
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
        command.add_arguments(p)
        p.add_argument("--bag", help="the frames of this rosbag2 (sqlite3 or mcap) instead of IMAGE files")
        p.add_argument("--topic", help="the bag's image topic (default: its only image topic)")
        p.add_argument("images", nargs="*", metavar="IMAGE",
                       help="image files (PNG, JPEG, BMP, TIFF, WebP, PNM; at most 4096x4096 pixels)")
        p.set_defaults(robotics_command=command)


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.errors import InputError
    from libredgetpu_ros.perception.images import load_image

    if args.robotics_command.own_inputs:
        return int(args.robotics_command.run(args, []))
    if args.bag and args.images:
        raise InputError("give IMAGE files or --bag, not both")
    if args.bag:
        images, names, args.stamps, skipped = _bag_frames(args.bag, args.topic)
    elif args.images:
        images = [load_image(path) for path in args.images]  # every file is read before any work starts
        names, args.stamps, skipped = list(args.images), None, {}
    else:
        raise InputError("no IMAGE given (or --bag BAG)")
    report = args.robotics_command.run(args, images)
    for i, (entry, name) in enumerate(zip(report["results"], names, strict=True)):
        entry["image"] = name
        if args.stamps is not None:
            entry["stamp"] = args.stamps[i]
    if skipped:
        report["skipped_frames"] = skipped
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"{report['module']} on {report['template']} ({report['backend']})")
        for entry in report["results"]:
            shown = {k: v for k, v in entry.items() if k not in ("image", "raw", "zones")}
            print(f"  {entry['image']}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in shown.items()))
    return 0


MAX_BAG_FRAMES = 100_000  # frames are held in memory for one run; a longer bag is refused up front


def _bag_frames(bag: str, topic: str | None) -> tuple[list[Any], list[str], list[float], dict[str, int]]:
    """(RGB frames, names, header stamps in s, skipped frames by cause) of a bag's image topic."""
    from pathlib import Path

    from libredgetpu_ros.bags.storage import IMAGE_TYPES, open_reader
    from libredgetpu_ros.errors import InputError
    from libredgetpu_ros.ros.bag_reader import FrameReader

    reader = open_reader(Path(bag))
    try:
        counts = {c.topic: c.msgcount for c in reader.connections if c.msgtype in IMAGE_TYPES}
    finally:
        reader.close()
    if topic is None:
        if len(counts) != 1:
            raise InputError(f"bag {bag}: {len(counts)} image topics ({', '.join(sorted(counts)) or 'none'})"
                             f"; name one with --topic")
        topic = next(iter(counts))
    if topic not in counts:
        raise InputError(f"bag {bag}: no image topic {topic!r} (image topics: {', '.join(sorted(counts))})")
    if counts[topic] > MAX_BAG_FRAMES:
        raise InputError(f"bag {bag}: {counts[topic]} frames on {topic}, more than {MAX_BAG_FRAMES} per run")
    images, names, stamps, skipped = [], [], [], {}
    with FrameReader(Path(bag), [topic]) as frames:
        for frame in frames:
            if frame.cause:
                skipped[frame.cause] = skipped.get(frame.cause, 0) + 1
                continue
            sec, nanosec, _ = frame.stamp
            images.append(frame.rgb)
            names.append(f"{topic}@{sec}.{nanosec:09d}")
            stamps.append(sec + nanosec * 1e-9)  # as the nodes read a header stamp
    return images, names, stamps, skipped


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _common(args: argparse.Namespace) -> dict[str, Any]:
    return {"backend": args.backend, "device": args.device, "resize": not args.no_resize}


def _report(module: Any, name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"module": name, "template": module.template.name, "backend": module.backend_name,
            "version": module.version, "results": results}


def warn_clipped(asked: Any, swap: Any) -> None:
    """Say on stderr that colour weights were clipped (text mode; --json carries ``clipped``)."""
    print(f"warning: colour {list(asked)} does not fit the template's filter scale {swap.scale:.6g}: "
          f"{swap.clipped} weight(s) clipped, the filter is now {[round(v, 4) for v in swap.color]} "
          f"(int8 {list(swap.weights)})", file=sys.stderr)


# -- spot ---------------------------------------------------------------------------------------------------
def _spot_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--color", nargs=3, type=float, metavar=("R", "G", "B"),
                        help="colour filter weights to swap in first (colour templates; e.g. 1 -0.5 -0.5)")
    parser.add_argument("--mode", choices=("checked", "libredgetpu"), default="checked",
                        help="checked: each result says whether it is valid (no offset without one compact "
                             "target); libredgetpu: its decode alone (default checked)")


def _spot_run(args: argparse.Namespace, images: list[Any]) -> dict[str, Any]:
    from libredgetpu_ros.robotics.spot import SpotTracker
    from libredgetpu_ros.robotics.template import load_template

    with SpotTracker(load_template(args.model), mode=args.mode, **_common(args)) as tracker:
        swap = tracker.set_color(args.color) if args.color else None
        results = [tracker.track(image).to_dict() for image in images]
        report = _report(tracker, "spot", results)
        if swap is not None:
            report["color"] = {"weights": list(swap.weights), "real": list(swap.color),
                               "clipped": swap.clipped}
            if swap.clipped and not args.json:
                warn_clipped(args.color, swap)
    return report


# -- pattern ------------------------------------------------------------------------------------------------
def _pattern_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--template", metavar="PATCH", required=True,
                        help="image file of the reference patch, exactly the template's kernel size")
    parser.add_argument("--mode", choices=("normalized", "libredgetpu"), default="normalized",
                        help="normalized: locally normalised matching with a score and valid flag; "
                             "libredgetpu: raw correlation (default normalized)")


def _pattern_run(args: argparse.Namespace, images: list[Any]) -> dict[str, Any]:
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.robotics.pattern import PatternTracker
    from libredgetpu_ros.robotics.template import load_template

    patch = load_image(args.template)
    with PatternTracker(load_template(args.model), mode=args.mode, **_common(args)) as tracker:
        tracker.set_template(patch)
        return _report(tracker, "pattern", [tracker.track(image).to_dict() for image in images])


# -- looming ------------------------------------------------------------------------------------------------
def _looming_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fps", type=float,
                        help="the images are a sequence at this rate: report the time to contact (ttc_s)")
    parser.add_argument("--ttc-window", type=int, default=5, help="frames the TTC is estimated over (5)")
    parser.add_argument("--ttc-min-samples", type=int, default=3, help="frames before a TTC is given (3)")
    parser.add_argument("--contact-tau", type=float, default=2.0, help="tau taken as contact (2)")
    parser.add_argument("--ttc-mode", choices=("scale", "libredgetpu"), default="scale",
                        help="scale: TTC in seconds from the expansion of the image centre, with ttc_valid "
                             "and ttc_reason; libredgetpu: the tau formula (--ttc-window ...); default scale")
    parser.add_argument("--max-gap", type=float, default=0.5,
                        help="seconds between frames beyond which the TTC history restarts (0.5)")


def _looming_run(args: argparse.Namespace, images: list[Any]) -> dict[str, Any]:
    from libredgetpu_ros.robotics.looming import LoomingDetector
    from libredgetpu_ros.robotics.template import load_template

    _check_fps(args)
    if not args.max_gap > 0:
        from libredgetpu_ros.errors import ConfigError

        raise ConfigError(f"--max-gap must be > 0, got {args.max_gap}")
    with LoomingDetector(load_template(args.model), **_common(args), window=args.ttc_window,
                         min_samples=args.ttc_min_samples, contact_tau=args.contact_tau,
                         ttc_mode=args.ttc_mode, max_gap_s=args.max_gap) as detector:
        results = [detector.detect(image, _stamp(args, i)).to_dict() for i, image in enumerate(images)]
        return _report(detector, "looming", results)


register(RoboticsCommand("spot", "bright / colour spot: offset from the image centre, servo direction",
                         _spot_arguments, _spot_run))
register(RoboticsCommand("pattern", "where a reference patch lies in each image (correlation + soft argmax)",
                         _pattern_arguments, _pattern_run))
register(RoboticsCommand("looming", "zone edge densities, tau and (with --fps) time to contact",
                         _looming_arguments, _looming_run))


# -- flow and compass ---------------------------------------------------------------------------------------
def _flow_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=("normalized", "libredgetpu"), default="normalized",
                        help="normalized (default: contrast-normalised NCC, valid=false without texture) or "
                             "libredgetpu (its formulas exactly)")
    parser.add_argument("--search-range", type=int, default=4, help="grid half-width in grid steps (4)")
    parser.add_argument("--temperature", type=float, default=0.1,
                        help="soft argmax temperature (libredgetpu mode)")
    parser.add_argument("--pool-factor", type=int, default=4, help="CPU pooling of the standard template (4)")
    parser.add_argument("--min-texture", type=float, default=4.0,
                        help="grey-level standard deviation below which a frame has no estimate (4)")
    parser.add_argument("--min-confidence", type=float, default=0.3,
                        help="normalised correlation below which a pair has no estimate (0.3)")
    parser.add_argument("--no-refine", action="store_true",
                        help="the device's grid only (no refinement at the images' resolution)")
    parser.add_argument("--min-match", type=float, default=0.9,
                        help="refined pairs: the images' correlation at the motion below which there is no "
                             "estimate (0.9)")
    parser.add_argument("--fps", type=float,
                        help="the images are a sequence at this rate: also report rates (per second)")


def _flow_options(args: argparse.Namespace) -> dict[str, Any]:
    """``OpticalFlow.from_template``'s keyword arguments from the flow options (the model aside)."""
    _check_fps(args)
    return dict(backend=args.backend, device=args.device, resize=not args.no_resize, mode=args.mode,
                search_range=args.search_range, temperature=args.temperature, pool_factor=args.pool_factor,
                min_texture=args.min_texture, min_confidence=args.min_confidence,
                refine=not args.no_refine, min_match=args.min_match)


def _check_fps(args: argparse.Namespace) -> None:
    """``--fps`` (looming, flow, compass), when given, is a positive rate."""
    from libredgetpu_ros.errors import InputError

    if args.fps is not None and not 0 < args.fps < 1e6:
        raise InputError(f"--fps must be a positive rate, got {args.fps}")


def _stamp(args: argparse.Namespace, i: int) -> float | None:
    """Frame ``i``'s time: its header stamp (``--bag``), else ``i / --fps``, else None."""
    if getattr(args, "stamps", None) is not None:
        return args.stamps[i]
    return None if args.fps is None else i / args.fps


def _flow_run(args: argparse.Namespace, images: list[Any]) -> dict[str, Any]:
    """One entry per image: the motion since the previous image (the first has ``first_frame``)."""
    from libredgetpu_ros.robotics.flow import OpticalFlow, flow_to_direction

    with OpticalFlow.from_template(args.model, **_flow_options(args)) as flow:
        results = []
        for i, image in enumerate(images):
            result = flow.step(image, _stamp(args, i))
            entry = result.to_dict()
            # LibrEdgeTPU's direction words, its threshold (0.3) in grid steps
            entry["direction"] = flow_to_direction(result.vx_grid, result.vy_grid) if result.valid else ""
            if args.fps is not None:
                entry["vx_per_s"], entry["vy_per_s"] = result.rate()
            results.append(entry)
        report = _report(flow, "flow", results)
        report["grid_step_px"] = flow.grid_step
    return report


def _compass_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fov", type=float, required=True, help="horizontal field of view in degrees")
    parser.add_argument("--projection", choices=("pinhole", "linear"), default="pinhole",
                        help="pinhole (default: frames remapped to equal angles) or linear (LibrEdgeTPU's "
                             "fov/width)")
    _flow_arguments(parser)


def _compass_run(args: argparse.Namespace, images: list[Any]) -> dict[str, Any]:
    """One entry per image: yaw since the previous image and the integrated heading (REP 103: positive =
    turned left)."""
    from libredgetpu_ros.robotics.compass import VisualCompass

    with VisualCompass.from_template(args.model, args.fov, args.projection, **_flow_options(args)) as compass:
        results = [compass.step(image, _stamp(args, i)).to_dict() for i, image in enumerate(images)]
        report = _report(compass.flow, "compass", results)
        report.update(fov_deg=compass.fov_deg, projection=compass.projection, heading_deg=compass.heading_deg)
    return report


register(RoboticsCommand("flow", "global optical flow between consecutive images: vx, vy in pixels, valid",
                         _flow_arguments, _flow_run))
register(RoboticsCommand("compass", "yaw between consecutive images from the horizontal flow and --fov, "
                                    "integrated heading",
                         _compass_arguments, _compass_run))

# -- embed, reservoir (their own inputs: cli/robotics_learning.py) ------------------------------------------
for _command in robotics_learning.commands():
    register(_command)
