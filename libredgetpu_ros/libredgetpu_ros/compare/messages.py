"""What changed between two results of one frame: per message type, the differences a reviewer of a
model or parameter change asks about (messages decoded by rosbags, no rclpy).

- ``vision_msgs/msg/Detection2DArray``: detections matched one to one by box IoU (greedy, best pair first,
  at least ``iou_match``); unmatched ones are ``detection_added`` / ``detection_lost``, a matched pair can
  have ``class_changed``, a ``score_delta`` and ``box_moved`` (IoU under ``box_iou_min``).
- ``vision_msgs/msg/Classification``: ``top1_changed``; per class of either result list ``class_added`` /
  ``class_lost`` or its ``score_delta``.
- ``libredgetpu_ros_interfaces/msg/PersonPoseArray``: people matched by OKS (COCO's keypoint similarity,
  its per-keypoint sigmas, the person's keypoint box as scale); ``pose_added`` / ``pose_lost``, and per
  matched pair ``keypoint_distance`` (the largest, pixels) and ``oks`` (under ``oks_min``).
- label images (``mono8``/``8UC1``/``mono16``/``16UC1`` Image: segmentation masks): ``mask_agreement``
  (fraction of pixels with the same label) and the per-class IoU.
- anything else (tracker, looming, flow, recognition messages): every field compared, numbers with
  ``field_tol`` (``field_delta``, the field named), the rest exactly (``field_changed``).

Drawings of the results (``visualization_msgs/msg/MarkerArray``, colour images: annotated frames and
overlays) are not compared: the results they draw are.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

LABEL_ENCODINGS = {"mono8": np.uint8, "8UC1": np.uint8, "mono16": np.uint16, "16UC1": np.uint16}
DRAWING_TYPES = ("visualization_msgs/msg/MarkerArray",)
# COCO keypoint sigmas (pycocotools), in PoseNet's keypoint order
COCO_SIGMAS = np.array([.26, .25, .25, .35, .35, .79, .79, .72, .72, .62, .62, 1.07, 1.07, .87, .87, .89,
                        .89]) / 10.0
# Differences that exceed whatever the tolerances: something appeared, vanished or changed its meaning.
ALWAYS = frozenset({"detection_added", "detection_lost", "class_changed", "top1_changed", "class_added",
                    "class_lost", "pose_added",
                    "pose_lost", "field_changed", "message_added", "message_lost", "bag_added", "bag_lost"})


@dataclass(frozen=True)
class Tolerances:
    iou_match: float = 0.5  # detections with at least this IoU are the same object
    score_tol: float = 0.05  # |score delta| above this is a difference
    box_iou_min: float = 0.9  # a matched box moved when its IoU is under this
    keypoint_tol: float = 3.0  # pixels
    oks_min: float = 0.9
    mask_agreement_min: float = 0.99
    field_tol: float = 1e-6  # any other numeric field, absolute


@dataclass
class Difference:
    kind: str
    value: float  # the measure (a delta, a distance, an agreement); 1.0 for added/lost/changed
    exceeds: bool
    detail: str = ""
    box: tuple[float, float, float, float] | None = None  # x0, y0, x1, y1 in the input image, for crops
    topic: str = ""
    timestamp: int = 0
    bag: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class FrameDiff:
    differences: list[Difference] = field(default_factory=list)
    score_deltas: list[float] = field(default_factory=list)  # every matched pair's, within tolerance too

    def add(self, kind: str, value: float, exceeds: bool, detail: str = "",
            box: tuple[float, float, float, float] | None = None) -> None:
        self.differences.append(Difference(kind, float(value), exceeds or kind in ALWAYS, detail, box))


def _box(det: Any) -> tuple[float, float, float, float]:
    c, sx, sy = det.bbox.center.position, det.bbox.size_x, det.bbox.size_y
    return (c.x - sx / 2, c.y - sy / 2, c.x + sx / 2, c.y + sy / 2)


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else float(a == b)


def _top(results: Any) -> tuple[str, float]:
    """(class, score) of a detection's / classification's best hypothesis ("" and 0 without one)."""
    best = max(results, key=lambda r: _hyp(r)[1], default=None)
    return _hyp(best) if best is not None else ("", 0.0)


def _hyp(result: Any) -> tuple[str, float]:
    hyp = getattr(result, "hypothesis", result)  # ObjectHypothesisWithPose or ObjectHypothesis
    return str(hyp.class_id), float(hyp.score)


def _greedy(scores: np.ndarray, minimum: float) -> list[tuple[int, int]]:
    """One-to-one pairs (i, j), best score first, each at least ``minimum``."""
    pairs: list[tuple[int, int]] = []
    if scores.size == 0:
        return pairs
    order = np.dstack(np.unravel_index(np.argsort(-scores, axis=None), scores.shape))[0]
    used_i: set[int] = set()
    used_j: set[int] = set()
    for i, j in order:
        if scores[i, j] < minimum:
            break
        if i not in used_i and j not in used_j:
            pairs.append((int(i), int(j)))
            used_i.add(int(i))
            used_j.add(int(j))
    return pairs


def detections(base: Any, cand: Any, tol: Tolerances, out: FrameDiff) -> None:
    bb = [_box(d) for d in base.detections]
    cb = [_box(d) for d in cand.detections]
    ious = np.array([[_iou(a, b) for b in cb] for a in bb]).reshape(len(bb), len(cb))
    pairs = _greedy(ious, tol.iou_match)
    for i, j in pairs:
        (bc, bs), (cc, cs) = _top(base.detections[i].results), _top(cand.detections[j].results)
        if bc != cc:
            out.add("class_changed", 1.0, True, f"{bc} -> {cc}", cb[j])
        delta = cs - bs
        out.score_deltas.append(delta)
        if abs(delta) > tol.score_tol:
            out.add("score_delta", delta, True, f"{bc}: {bs:.3f} -> {cs:.3f}", cb[j])
        if ious[i, j] < tol.box_iou_min:
            out.add("box_moved", 1.0 - ious[i, j], True, f"{bc}: IoU {ious[i, j]:.3f}", cb[j])
    matched_b, matched_c = {i for i, _ in pairs}, {j for _, j in pairs}
    for i in sorted(set(range(len(bb))) - matched_b):
        cls, score = _top(base.detections[i].results)
        out.add("detection_lost", 1.0, True, f"{cls} ({score:.3f})", bb[i])
    for j in sorted(set(range(len(cb))) - matched_c):
        cls, score = _top(cand.detections[j].results)
        out.add("detection_added", 1.0, True, f"{cls} ({score:.3f})", cb[j])


def classification(base: Any, cand: Any, tol: Tolerances, out: FrameDiff) -> None:
    (bc, _bs), (cc, _cs) = _top(base.results), _top(cand.results)
    if bc != cc:
        out.add("top1_changed", 1.0, True, f"{bc or '(none)'} -> {cc or '(none)'}")
    before = {str(r.class_id): float(r.score) for r in base.results}
    after = {str(r.class_id): float(r.score) for r in cand.results}
    for cls, score in before.items():
        if cls not in after:
            out.add("class_lost", score, True, f"{cls} ({score:.3f})")
            continue
        delta = after[cls] - score
        out.score_deltas.append(delta)
        if abs(delta) > tol.score_tol:
            out.add("score_delta", delta, True, f"{cls}: {score:.3f} -> {after[cls]:.3f}")
    for cls, score in after.items():
        if cls not in before:
            out.add("class_added", score, True, f"{cls} ({score:.3f})")


def _keypoints(pose: Any) -> np.ndarray:
    return np.array([[k.x, k.y, k.score] for k in pose.keypoints], np.float64).reshape(-1, 3)


def _oks(a: np.ndarray, b: np.ndarray) -> float:
    """COCO's object keypoint similarity of two people (area: the baseline's keypoint box)."""
    n = min(len(a), len(b), len(COCO_SIGMAS))
    if n == 0:
        return 0.0
    a, b = a[:n], b[:n]
    area = max(np.ptp(a[:, 0]) * np.ptp(a[:, 1]), 1.0)
    d2 = ((a[:, :2] - b[:, :2]) ** 2).sum(axis=1)
    return float(np.mean(np.exp(-d2 / (2 * area * (2 * COCO_SIGMAS[:n]) ** 2))))


def poses(base: Any, cand: Any, tol: Tolerances, out: FrameDiff) -> None:
    bk, ck = [_keypoints(p) for p in base.poses], [_keypoints(p) for p in cand.poses]
    oks = np.array([[_oks(a, b) for b in ck] for a in bk]).reshape(len(bk), len(ck))
    pairs = _greedy(oks, 0.1)
    for i, j in pairs:
        a, b = bk[i], ck[j]
        n = min(len(a), len(b))
        dist = float(np.max(np.hypot(*(a[:n, :2] - b[:n, :2]).T))) if n else 0.0
        box = (float(b[:, 0].min()), float(b[:, 1].min()), float(b[:, 0].max()), float(b[:, 1].max())) \
            if len(b) else None
        out.score_deltas.append(float(cand.poses[j].score) - float(base.poses[i].score))
        if dist > tol.keypoint_tol:
            out.add("keypoint_distance", dist, True, f"person {i}: {dist:.1f} px", box)
        if oks[i, j] < tol.oks_min:
            out.add("oks", oks[i, j], True, f"person {i}: OKS {oks[i, j]:.3f}", box)
    for i in sorted(set(range(len(bk))) - {i for i, _ in pairs}):
        out.add("pose_lost", 1.0, True, f"person {i} (score {float(base.poses[i].score):.3f})")
    for j in sorted(set(range(len(ck))) - {j for _, j in pairs}):
        out.add("pose_added", 1.0, True, f"person {j} (score {float(cand.poses[j].score):.3f})")


def _label_image(msg: Any) -> np.ndarray:
    dtype = np.dtype(LABEL_ENCODINGS[msg.encoding]).newbyteorder(">" if msg.is_bigendian else "<")
    data = np.asarray(msg.data, np.uint8)
    if msg.step < msg.width * dtype.itemsize or data.size < msg.height * msg.step:
        raise ValueError(f"label image {msg.width}x{msg.height} step {msg.step} with {data.size} bytes")
    rows = data[: msg.height * msg.step].reshape(msg.height, msg.step)
    return rows[:, : msg.width * dtype.itemsize].copy().view(dtype).reshape(msg.height, msg.width)


def mask(base: Any, cand: Any, tol: Tolerances, out: FrameDiff) -> None:
    a, b = _label_image(base), _label_image(cand)
    if a.shape != b.shape:
        out.add("field_changed", 1.0, True, f"mask size {a.shape} -> {b.shape}")
        return
    agreement = float(np.mean(a == b)) if a.size else 1.0
    ious = []
    for label in np.union1d(np.unique(a), np.unique(b)):
        inter = np.count_nonzero((a == label) & (b == label))
        union = np.count_nonzero((a == label) | (b == label))
        ious.append(f"{int(label)}: {inter / union:.3f}")
    if agreement < 1.0:
        ys, xs = np.nonzero(a != b)
        box = (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
        out.add("mask_agreement", agreement, agreement < tol.mask_agreement_min,
                f"{agreement:.4f} of pixels agree; IoU per class {', '.join(ious)}", box)


def fields(base: Any, cand: Any, tol: Tolerances, out: FrameDiff, path: str = "") -> None:
    """Every field of two messages of one type: numbers within ``field_tol``, the rest equal."""
    if dataclasses.is_dataclass(base):
        for f in dataclasses.fields(base):
            if f.name != "__msgtype__" and not f.name.isupper():
                fields(getattr(base, f.name), getattr(cand, f.name), tol, out, f"{path}.{f.name}".lstrip("."))
    elif isinstance(base, np.ndarray | list | tuple):
        a, b = list(base), list(cand)
        if len(a) != len(b):
            out.add("field_changed", 1.0, True, f"{path}: {len(a)} -> {len(b)} elements")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            fields(x, y, tol, out, f"{path}[{i}]")
    elif isinstance(base, float | np.floating) or isinstance(cand, float | np.floating):
        x, y = float(base), float(cand)
        if math.isnan(x) and math.isnan(y):
            return
        delta = y - x
        if not abs(delta) <= tol.field_tol:
            out.add("field_delta", delta, True, f"{path}: {x:.6g} -> {y:.6g}")
    elif bool(base != cand):
        out.add("field_changed", 1.0, True, f"{path}: {base!r} -> {cand!r}")


def diff_messages(msgtype: str, base: Any, cand: Any, tol: Tolerances) -> FrameDiff | None:
    """The differences of one pair of messages of ``msgtype``; None for a type that is not compared."""
    out = FrameDiff()
    if msgtype in DRAWING_TYPES:
        return None
    if msgtype == "vision_msgs/msg/Detection2DArray":
        detections(base, cand, tol, out)
    elif msgtype == "vision_msgs/msg/Classification":
        classification(base, cand, tol, out)
    elif msgtype.endswith("/msg/PersonPoseArray"):
        poses(base, cand, tol, out)
    elif msgtype == "sensor_msgs/msg/Image":
        if base.encoding not in LABEL_ENCODINGS or cand.encoding != base.encoding:
            return None  # a drawing (annotated frame, overlay)
        mask(base, cand, tol, out)
    else:
        fields(base, cand, tol, out)
    return out

