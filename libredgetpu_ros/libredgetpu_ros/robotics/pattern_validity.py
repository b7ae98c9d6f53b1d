"""Is the pattern tracker's answer the patch's one clear place in the frame? Decided on the CPU.

The pattern template ends in ``SOFTMAX -> soft argmax``: the device returns a position, never its
correlation map, so it cannot say that a second place matched nearly as well or that it found a lookalike
while the patch itself lay elsewhere. Refining the device's answers by exact NCC (robotics/ncc.py) gives
their scores, not the scores of the places the device did not return; with an 8 x 8 patch (64 values, often
not unique in a 64 x 64 frame) a distractor scores 0.6-0.9, so a score threshold and a rival taken from the
device's own two answers passed 10-17 % of the misses as valid (docs/robotics.md).

:class:`PatternValidity` computes the exact NCC of the device's int8 filter against the normalised frame at
every position (``ncc.ncc_grid`` over the whole frame: OpenCV's TM_CCOEFF_NORMED, the same formula as the
refinement) and decides, in this order:

- ``low_score``: the frame's best NCC (``peak``) is below ``min_score``: the patch is not there (a flat
  patch scores -1 everywhere);
- ``ambiguous``: the place is not unique, by either of two tests measured from a perfect match. The
  ``rival`` (the best local maximum of the map farther than ``rival_radius`` pixels from the peak: a
  lookalike, a repeat) needs ``1 - rival >= min_ratio * u``, and the ``spread`` (the best score on the
  ring just outside that neighbourhood: a ridge along an edge, where the peak can slide) needs
  ``1 - spread >= min_spread_ratio * u``, with ``u = max(1 - peak, floor / k)`` for a k x k patch. The NCC
  of a true match falls with noise roughly in proportion to ``1 - peak``, so a ratio, unlike a fixed
  margin, neither refuses noisy true matches nor passes a lookalike beside a weak one; ``floor / k`` is the
  NCC's own sampling noise (one over the root of the k^2 pixels; colour channels, nearly alike, are not
  counted): an 8 x 8 lookalike scored 0.94 beside a 0.98 match;
- ``device_miss``: the device's refined answer is more than ``max_distance`` pixels from the peak: the
  device locked onto a lookalike and its position would be confidently wrong.

The limits were tuned on rendered scenes (test/robotics/_pattern_scenes.py: the tuning photos, and two
rounds of failure analysis on held-out-photo seeds 1000-1049 and 2000-2039) and are checked on seeds
from 3000 with the held-out photos (test/robotics/test_pattern_validity.py; docs/robotics.md). Cost: one
matchTemplate over the frame and a 3 x 3 dilation for the local maxima (bench/bench_pattern_validity.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.robotics import ncc

REASONS = ("ok", "low_score", "ambiguous", "device_miss")
_NEIGHBOURS = np.ones((3, 3), np.uint8)


@dataclass(frozen=True)
class PatternLimits:
    min_score: float = 0.6  # NCC below which the patch is not in the frame
    min_ratio: float = 3.0  # (1 - rival) / (1 - peak) at least this
    min_spread_ratio: float = 2.0  # (1 - best on the ring around the peak) / (1 - peak) at least this
    max_distance: float = 1.5  # pixels between the device's refined answer and the frame's NCC peak
    rival_radius: int = 2  # pixels (Chebyshev) around the peak that belong to it (the tolerance tested)
    floor: float = 0.4  # 1 - peak is taken as at least floor / kernel side (0.05 at 8 x 8, 0.0125 at 32 x 32)

    def __post_init__(self) -> None:
        if not (-1.0 <= self.min_score <= 1.0 and self.min_ratio >= 1.0 and self.min_spread_ratio >= 1.0
                and self.max_distance >= 0 and self.rival_radius >= 1 and 0 < self.floor < 4):
            raise ConfigError(f"pattern validity limits out of range: {self}")


@dataclass(frozen=True, slots=True)
class PatternEvidence:
    """What the CPU check found in one frame (see the module docstring)."""

    valid: bool
    reason: str
    peak: float  # the frame's best NCC
    rival: float  # the best local maximum outside the peak's neighbourhood (-1: none)
    spread: float  # the best score just outside the peak's neighbourhood (-1: none)
    distance: float  # pixels between the device's refined answer and the peak

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "reason": self.reason, "peak": self.peak, "rival": self.rival,
                "spread": self.spread, "distance": self.distance}


class PatternValidity:
    """The check (stateless apart from its limits); ``check`` takes the normalised frame, the device's int8
    filter and the device's refined top-left position."""

    def __init__(self, limits: PatternLimits | None = None) -> None:
        self.limits = limits or PatternLimits()

    def check(self, normal: np.ndarray, weights: np.ndarray, x: float, y: float) -> PatternEvidence:
        import cv2

        h, w = normal.shape[:2]
        scores, _, _ = ncc.ncc_grid(normal, weights, 0, 0, max(h, w))  # every position: the whole map
        row, col = np.unravel_index(int(np.argmax(scores)), scores.shape)
        peak = float(scores[row, col])
        distance = float(max(abs(x - col), abs(y - row)))
        limits = self.limits
        single = scores.astype(np.float32)  # dilate and compare in one precision
        maxima = single >= cv2.dilate(single, _NEIGHBOURS)
        r = limits.rival_radius
        near = np.zeros(scores.shape, bool)
        near[max(0, row - r - 1):row + r + 2, max(0, col - r - 1):col + r + 2] = True  # the peak and a ring
        near[max(0, row - r):row + r + 1, max(0, col - r):col + r + 1] = False  # ... the ring alone
        maxima[max(0, row - r):row + r + 1, max(0, col - r):col + r + 1] = False
        rival = float(scores[maxima].max()) if maxima.any() else -1.0
        spread = float(scores[near].max()) if near.any() else -1.0
        unit = max(1.0 - peak, limits.floor / np.sqrt(weights.shape[0] * weights.shape[1]))
        if peak < limits.min_score:
            reason = "low_score"
        elif 1.0 - rival < limits.min_ratio * unit or 1.0 - spread < limits.min_spread_ratio * unit:
            reason = "ambiguous"
        elif distance > limits.max_distance:
            reason = "device_miss"
        else:
            reason = "ok"
        return PatternEvidence(reason == "ok", reason, peak, rival, spread, distance)
