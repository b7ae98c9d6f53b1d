"""What one processed frame yields, in pixels of the original image."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from libredgetpu_ros.postprocess.results import ClassScore, Detection, Keypoint, Pose

__all__ = ["ClassScore", "Detection", "Keypoint", "PerceptionResult", "Pose"]


@dataclass(slots=True)
class PerceptionResult:
    """Results of one frame.

    ``poses``: keypoints in image pixels. ``detections``: ``box`` in image pixels (xmin, ymin, xmax, ymax).
    ``mask``: ``HxW`` uint8 class ids at the image's resolution (segmentation only). ``timings``: ms per
    stage (preprocess, inference, postprocess, total).
    """

    task: str
    image_size: tuple[int, int]
    backend: str
    poses: list[Pose] = field(default_factory=list)
    detections: list[Detection] = field(default_factory=list)
    classes: list[ClassScore] = field(default_factory=list)
    mask: np.ndarray | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def mask_histogram(self, labels: dict[int, str] | None = None) -> dict[str, int]:
        """Pixel count per class present in the mask, keyed by label (or class id), largest first."""
        if self.mask is None:
            return {}
        counts = np.bincount(self.mask.ravel(), minlength=1)
        ids = np.flatnonzero(counts)
        ids = ids[np.argsort(-counts[ids], kind="stable")]
        labels = labels or {}
        return {labels.get(int(i), str(int(i))): int(counts[i]) for i in ids}

    def to_dict(self, labels: dict[int, str] | None = None) -> dict[str, Any]:
        """JSON-ready dict (no mask pixels: the class histogram stands for them)."""
        out: dict[str, Any] = {
            "task": self.task,
            "backend": self.backend,
            "image_size": {"width": self.image_size[0], "height": self.image_size[1]},
            "timings_ms": {k: round(v, 3) for k, v in self.timings.items()},
        }
        if self.task == "pose":
            out["poses"] = [{"score": round(p.score, 5),
                             "keypoints": {k.name: {"x": round(k.x, 2), "y": round(k.y, 2),
                                                    "score": round(k.score, 5)} for k in p.keypoints}}
                            for p in self.poses]
        if self.task == "detect":
            out["detections"] = [{"class_id": d.class_id, "label": d.label, "score": round(d.score, 5),
                                  "box": {"xmin": round(d.box[0], 2), "ymin": round(d.box[1], 2),
                                          "xmax": round(d.box[2], 2), "ymax": round(d.box[3], 2)}}
                                 for d in self.detections]
        if self.task == "classify":
            out["classes"] = [{"class_id": c.class_id, "label": c.label, "score": round(c.score, 5)}
                              for c in self.classes]
        if self.task == "segment":
            out["segmentation"] = {"histogram": self.mask_histogram(labels)}
        return out
