"""``libredgetpu-ros plan MODEL``: the USB transfer schedule of one inference (dry run, no device)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "print the USB transfers the Edge TPU driver would make for one inference of MODEL (no device needed)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path, help="compiled *_edgetpu.tflite")
    parser.add_argument(
        "--cached",
        action="store_true",
        help="assume the parameters are already cached on the chip (skip PARAMETER_CACHING)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.edgetpu.plan import format_plan, plan_model
    from libredgetpu_ros.paths import check_regular

    check_regular(args.model, "model file")
    plan = plan_model(args.model, cached=args.cached)
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0
