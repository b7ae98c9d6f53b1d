"""``libredgetpu-ros doctor``: what this machine needs before the nodes run well, each item with its fix.

Exit code: 0 when nothing FAILs (WARNs are advice), 1 when something does, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import re

from libredgetpu_ros.errors import InputError

HELP = "check this machine (libusb, accelerator, udev, USB speed, firmware, models, templates, ROS, DDS)"
EXAMPLES = (
    "libredgetpu-ros doctor",
    "libredgetpu-ros doctor --frame 1280x720 --frame 640x480x1 --json    # your cameras' frame sizes",
    "libredgetpu-ros doctor --require-accelerator                        # exit 1 without an Edge TPU",
)

_FRAME = re.compile(r"^(\d{1,5})x(\d{1,5})(?:x([1-4]))?$")
_MAX_SIDE = 16384


def frame_size(text: str) -> tuple[int, int, int]:
    """``WxH`` or ``WxHxC`` (C bytes per pixel, default 3 as in rgb8)."""
    match = _FRAME.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not WIDTHxHEIGHT[xBYTES_PER_PIXEL], "
                                         "e.g. 1920x1080")
    w, h, c = int(match[1]), int(match[2]), int(match[3] or 3)
    if not (0 < w <= _MAX_SIDE and 0 < h <= _MAX_SIDE):
        raise argparse.ArgumentTypeError(f"frame {w}x{h}: each side must be 1..{_MAX_SIDE}")
    return w, h, c


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.add_argument("--frame", type=frame_size, action="append", metavar="WxH[xC]",
                        help="camera frame size in use, for the DDS transport check (repeatable; "
                             "default 1920x1080 rgb8)")
    parser.add_argument("--require-accelerator", action="store_true",
                        help="a missing accelerator is a FAIL, not a WARN (for robots that need its speed)")


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.cli import doctor_checks as d

    frames = args.frame or [d.DEFAULT_FRAME]
    if len(frames) > 64:
        raise InputError("at most 64 --frame sizes")
    checks = d.run_checks(frame_sizes=frames, require_accelerator=args.require_accelerator)
    if args.json:
        print(json.dumps(d.to_json(checks), indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"[{c.status:<4}] {c.name:<{width}}  {c.detail}")
            if c.fix and c.status != d.OK:
                print(f"       {'':<{width}}  fix: {c.fix}")
        print(f"overall: {d.worst(checks)}")
    return 1 if d.worst(checks) == d.FAIL else 0
