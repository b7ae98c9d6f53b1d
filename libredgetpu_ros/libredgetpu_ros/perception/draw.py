"""Draw a PerceptionResult onto its image: skeletons, boxes, a class-colour overlay, top classes."""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.perception.results import PerceptionResult

# The 16 limbs drawn between COCO keypoints (ids: 0 nose, 1/2 eyes, 3/4 ears, 5/6 shoulders, 7/8 elbows,
# 9/10 wrists, 11/12 hips, 13/14 knees, 15/16 ankles; odd = left).
POSE_EDGES: tuple[tuple[int, int], ...] = (
    (0, 1), (0, 2), (1, 3), (2, 4),
    (5, 6), (5, 7), (7, 9), (6, 8), (8, 10),
    (5, 11), (6, 12), (11, 12), (11, 13), (13, 15), (12, 14), (14, 16),
)
KEYPOINT_MIN_SCORE = 0.2
MASK_ALPHA = 0.5


def pascal_palette(n: int = 256) -> np.ndarray:
    """The PASCAL VOC colour map (``n x 3`` uint8, RGB): bits of the class id spread over R, G, B."""
    ids = np.arange(n, dtype=np.int64)
    palette = np.zeros((n, 3), dtype=np.int64)
    for shift in range(7, -1, -1):
        for channel in range(3):
            palette[:, channel] |= ((ids >> channel) & 1) << shift
        ids >>= 3
    return palette.astype(np.uint8)


_PALETTE = pascal_palette()


def colorize_mask(mask: np.ndarray) -> np.ndarray:
    """``HxW`` class ids -> ``HxWx3`` RGB in the PASCAL VOC palette (one table lookup)."""
    return _PALETTE[mask]


def _scale(image_size: tuple[int, int]) -> tuple[int, float]:
    """Line thickness and font scale for an image of this size."""
    short = min(image_size)
    return max(1, round(short / 320)), max(0.4, short / 900)


def annotate(rgb: np.ndarray, result: PerceptionResult, labels: dict[int, str] | None = None) -> np.ndarray:
    """A copy of ``rgb`` with ``result`` drawn on it."""
    import cv2

    out = rgb.copy()
    thickness, font_scale = _scale(result.image_size)
    labels = labels or {}

    if result.mask is not None:
        _draw_mask(out, result.mask, labels, thickness, font_scale)

    for pose in result.poses:
        xy = np.array([(k.x, k.y) for k in pose.keypoints], dtype=np.float32)
        visible = np.array([k.score >= KEYPOINT_MIN_SCORE for k in pose.keypoints])
        pts = np.rint(xy).astype(np.int32)
        for a, b in POSE_EDGES:
            if a < len(pts) and b < len(pts) and visible[a] and visible[b]:
                cv2.line(out, tuple(int(v) for v in pts[a]), tuple(int(v) for v in pts[b]), (0, 255, 255),
                         thickness + 1, cv2.LINE_AA)
        for (x, y), seen in zip(pts, visible, strict=True):
            if seen:
                cv2.circle(out, (int(x), int(y)), thickness + 2, (255, 0, 0), -1, cv2.LINE_AA)

    for det in result.detections:
        x0, y0, x1, y1 = (round(v) for v in det.box)
        colour = tuple(int(c) for c in _PALETTE[(det.class_id % 254) + 1])
        cv2.rectangle(out, (x0, y0), (x1, y1), colour, thickness + 1)
        _label(out, f"{det.label or det.class_id} {det.score:.2f}", (x0, max(y0, 0)), colour, font_scale,
               thickness)

    for row, cls in enumerate(result.classes):
        text = f"{cls.label or labels.get(cls.class_id, cls.class_id)} {cls.score:.2f}"
        y = int((row + 1) * 30 * font_scale * 1.4)
        _label(out, text, (5, y), (255, 255, 255), font_scale, thickness)
    return out


def _draw_mask(out: np.ndarray, mask: np.ndarray, labels: dict[int, str], thickness: int,
               font_scale: float) -> None:
    """Tint each class, outline its regions and list the classes present (background left untouched)."""
    import cv2

    colours = colorize_mask(mask)
    drawn = mask != 0
    blended = cv2.addWeighted(out, 1.0 - MASK_ALPHA, colours, MASK_ALPHA, 0.0)
    out[drawn] = blended[drawn]
    present = [int(c) for c in np.unique(mask) if c != 0]
    for row, class_id in enumerate(present):
        colour = tuple(int(v) for v in _PALETTE[class_id])
        contours, _ = cv2.findContours((mask == class_id).astype(np.uint8), cv2.RETR_EXTERNAL,
                                       cv2.CHAIN_APPROX_SIMPLE)
        cv2.drawContours(out, contours, -1, colour, thickness + 1, cv2.LINE_AA)
        y = int((row + 1) * 30 * font_scale * 1.4)
        _label(out, str(labels.get(class_id, class_id)), (5, y), colour, font_scale, thickness)


def _label(img: np.ndarray, text: str, origin: tuple[int, int], colour: tuple[int, ...], font_scale: float,
           thickness: int) -> None:
    """Text on a filled box so it stays readable on any background."""
    import cv2

    font = cv2.FONT_HERSHEY_SIMPLEX
    (w, h), base = cv2.getTextSize(text, font, font_scale, thickness)
    x, y = origin
    y = max(y, h + base)
    cv2.rectangle(img, (x, y - h - base), (x + w, y), colour, -1)
    luma = 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2]
    ink = (0, 0, 0) if luma > 110 else (255, 255, 255)  # readable on dark palette entries (cat = 64,0,0)
    cv2.putText(img, text, (x, y - base), font, font_scale, ink, thickness, cv2.LINE_AA)
