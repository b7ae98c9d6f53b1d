"""Result types every post-processor returns (coordinates are in the model input's frame)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Keypoint:
    """One body keypoint; ``x``/``y`` in pixels of the model input, ``score`` in 0..1."""

    name: str
    id: int
    x: float
    y: float
    score: float


@dataclass(frozen=True, slots=True)
class Pose:
    """One person: 17 COCO keypoints in id order and the instance score (0..1)."""

    keypoints: list[Keypoint]
    score: float

    def xy(self) -> np.ndarray:
        """Keypoint positions as a (17, 2) float32 array of (x, y)."""
        return np.array([(k.x, k.y) for k in self.keypoints], dtype=np.float32).reshape(-1, 2)

    def scores(self) -> np.ndarray:
        """Keypoint scores as a (17,) float32 array."""
        return np.array([k.score for k in self.keypoints], dtype=np.float32)


@dataclass(frozen=True, slots=True)
class Detection:
    """One detected object; ``box`` is (xmin, ymin, xmax, ymax) normalised 0..1 of the model input."""

    class_id: int
    label: str
    score: float
    box: tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class ClassScore:
    """One classification result."""

    class_id: int
    label: str
    score: float
