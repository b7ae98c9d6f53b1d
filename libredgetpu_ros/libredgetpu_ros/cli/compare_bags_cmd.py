"""``libredgetpu-ros compare-bags BASELINE CANDIDATE [--json] [--report R.html] [tolerances]``: what
changed between two runs of process-bag(s) (``compare/``), for a reviewer and for CI.

Exit codes: 0 when nothing exceeds the tolerances, 1 when something does (listed on stdout, or in the
JSON's ``listed``), 2 for bad input (a missing or unreadable bag, a bad tolerance). Crops of the worst
differences in the report are cut from the input bags named in the runs' ``summary.json``
(process-bags); the input frames are decoded as the node decodes them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from libredgetpu_ros.cli.output import add_json, print_json, say

HELP = "compare two runs of process-bag(s) (result bags or output folders): per topic and message, what " \
       "changed beyond tolerances; exit 1 when something did; optional self-contained HTML report"
EXAMPLES = (
    "libredgetpu-ros compare-bags accepted_run/ new_run/                     # exit 0: same, 1: changed",
    "libredgetpu-ros compare-bags accepted_run/ new_run/ --report changes.html --score-tol 0.02",
    "libredgetpu-ros compare-bags results_a results_b --json",
)
CROPS = 12  # worst differences shown as image crops
CROP_MARGIN = 0.25  # of the box's size, around it


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not within 0..1")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"{text} is not a non-negative number")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from libredgetpu_ros.compare.messages import Tolerances

    t = Tolerances()
    parser.add_argument("baseline", help="the accepted run: a result bag or a process-bags output folder")
    parser.add_argument("candidate", help="the run to check, of the same kind")
    add_json(parser, "print the comparison (per bag, totals, the differences over tolerance) as JSON")
    parser.add_argument("--report", default=None, metavar="HTML",
                        help="write a self-contained HTML report (plots, crops of the worst differences)")
    parser.add_argument("--iou-match", type=_fraction, default=t.iou_match,
                        help="detections with at least this box IoU are the same object "
                             "(default %(default)s)")
    parser.add_argument("--score-tol", type=_non_negative, default=t.score_tol,
                        help="largest score change that is not a difference (default %(default)s)")
    parser.add_argument("--box-iou-min", type=_fraction, default=t.box_iou_min,
                        help="a matched box under this IoU moved (default %(default)s)")
    parser.add_argument("--keypoint-tol", type=_non_negative, default=t.keypoint_tol,
                        help="largest keypoint move in pixels (default %(default)s)")
    parser.add_argument("--oks-min", type=_fraction, default=t.oks_min,
                        help="smallest OKS of a matched person (default %(default)s)")
    parser.add_argument("--mask-agreement-min", type=_fraction, default=t.mask_agreement_min,
                        help="smallest fraction of mask pixels with the same label (default %(default)s)")
    parser.add_argument("--field-tol", type=_non_negative, default=t.field_tol,
                        help="largest change of any other numeric field (tracker, looming, flow; default "
                             "%(default)s)")
    parser.add_argument("--max-listed", type=int, default=200, metavar="N",
                        help="differences listed in the output and report (default %(default)s)")


def _crop(rgb: Any, box: tuple[float, float, float, float] | None) -> Any:
    import cv2
    import numpy as np

    height, width = rgb.shape[:2]
    image = np.ascontiguousarray(rgb).copy()
    if box is not None:
        x0, y0, x1, y1 = box
        cv2.rectangle(image, (int(x0), int(y0)), (int(x1), int(y1)), (255, 0, 0), 2)
        mx, my = (x1 - x0) * CROP_MARGIN + 16, (y1 - y0) * CROP_MARGIN + 16
        left, top = max(0, int(x0 - mx)), max(0, int(y0 - my))
        right, bottom = min(width, int(x1 + mx) + 1), min(height, int(y1 + my) + 1)
        if right > left and bottom > top:
            image = image[top:bottom, left:right]
    scale = min(1.0, 256 / max(image.shape[:2]))
    if scale < 1.0:
        image = cv2.resize(image, (max(1, int(image.shape[1] * scale)), max(1, int(image.shape[0] * scale))),
                           interpolation=cv2.INTER_AREA)
    return image


def crops(comparison: Any, n: int = CROPS) -> list[Any]:
    """The worst differences' crops, from the input frames at their timestamps (bags without a known or
    readable input are left out, said on stderr)."""
    from libredgetpu_ros.bags.storage import IMAGE_TYPES, open_reader, topics_of
    from libredgetpu_ros.compare.report import Crop, worst
    from libredgetpu_ros.errors import InputError
    from libredgetpu_ros.ros.bag_reader import FrameReader

    inputs = {b.name: b.input for b in comparison.bags}
    wanted: dict[str, list[Any]] = {}
    for d in worst(comparison.exceeding(), n):
        if inputs.get(d.bag):
            wanted.setdefault(d.bag, []).append(d)
    out = []
    for name, diffs in wanted.items():
        bag = Path(inputs[name])
        try:
            reader = open_reader(bag)
            try:
                topics = list(topics_of(reader, IMAGE_TYPES))
            finally:
                reader.close()
            stamps = {d.timestamp for d in diffs}
            with FrameReader(bag, topics) as frames:
                for frame in frames:
                    if frame.timestamp in stamps and frame.rgb is not None:
                        out += [Crop(d, _crop(frame.rgb, d.box)) for d in diffs
                                if d.timestamp == frame.timestamp]
                        stamps.discard(frame.timestamp)
                        if not stamps:
                            break
        except InputError as exc:
            say(f"warning: no crops from {bag}: {exc}")
    return out


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.atomicio import atomic_write_text
    from libredgetpu_ros.compare.messages import Tolerances
    from libredgetpu_ros.compare.runs import compare_runs

    tol = Tolerances(iou_match=args.iou_match, score_tol=args.score_tol, box_iou_min=args.box_iou_min,
                     keypoint_tol=args.keypoint_tol, oks_min=args.oks_min,
                     mask_agreement_min=args.mask_agreement_min, field_tol=args.field_tol)
    comparison = compare_runs(args.baseline, args.candidate, tol)
    if args.report:
        from libredgetpu_ros.compare.report import render
        from libredgetpu_ros.ros.environment import ensure_log_dir

        ensure_log_dir()
        atomic_write_text(args.report, render(comparison, crops(comparison), args.max_listed))
    doc = comparison.as_dict(args.max_listed)
    if args.json:
        print_json(doc)
    else:
        for b in doc["bags"]:
            changes = ", ".join(f"{k}: {n}" for k, n in b["exceeding"].items()) or "no change over tolerance"
            print(f"{b['bag']}: {b['status']} ({b['messages']['compared']} messages compared; {changes})")
        for d in doc["listed"]:
            print(f"  {d['bag']} {d['topic']} t={d['timestamp']}: {d['kind']} {d['detail']}")
        if doc["listed_of"] > len(doc["listed"]):
            print(f"  ... {doc['listed_of'] - len(doc['listed'])} more (--max-listed)")
        t = doc["totals"]
        print(f"{doc['verdict']}: {t['changed_bags']} of {t['bags']} bags changed, {t['exceeding']} "
              f"differences over tolerance" + (f"; report: {args.report}" if args.report else ""))
    return 1 if comparison.changed else 0
