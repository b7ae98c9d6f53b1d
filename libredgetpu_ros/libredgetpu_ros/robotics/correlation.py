"""Global correlation of two feature maps over a grid of displacements, and the peak read from it.

Pure NumPy, no model: :mod:`robotics.flow` feeds it the Gabor feature maps the Edge TPU (or its CPU twin)
computes. Conventions (the ones LibrEdgeTPU's ``OpticalFlow`` uses, so its numbers and ours line up):

- a displacement ``(dx, dy)`` in grid steps means the content of frame *t* appears moved by ``(+dx, +dy)`` in
  frame *t+1* (``b[y, x] ≈ a[y - dy, x - dx]``); positive x is right, positive y is down;
- scores are laid out ``[dy + r, dx + r]`` for ``r = search_range``; flattened row-major that is LibrEdgeTPU's
  order of 81 candidates (``dy`` outer, ``dx`` inner).

Speed: the ``(2r+1)²`` dot products are one matrix product. For each ``dx`` the x-shifted copy of ``a`` is
multiplied with ``b`` row by row (``S[dx, ya, yb] = <a[ya, · - dx], b[yb, ·]>`` over x and channels), and each
``dy`` is then a sum along one diagonal of ``S``, gathered with precomputed indices. On 16×16×8 maps this is
2× faster than LibrEdgeTPU's strided einsum and exact for integer features (float64).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from libredgetpu_ros.errors import InputError

__all__ = ["CorrelationGrid", "Peak", "block_sum", "refine_offset", "refined_peak", "soft_argmax"]


def block_sum(features: np.ndarray, factor: int) -> np.ndarray:
    """Sum of each ``factor × factor`` block of an ``H×W×C`` uint8 map (rows/columns past the last whole
    block are dropped, as LibrEdgeTPU does). uint16 while the sum fits (``255·factor² < 65536``), else int32:
    four in-place adds per axis instead of a reduction, ~6× faster than ``reshape(...).sum()`` here."""
    if features.ndim != 3:
        raise InputError(f"feature map must be HxWxC, got shape {features.shape}")
    if factor < 1:
        raise InputError(f"pool factor must be >= 1, got {factor}")
    if factor == 1:
        return features.astype(np.int32)
    h, w, c = features.shape
    ph, pw = h // factor, w // factor
    if ph == 0 or pw == 0:
        raise InputError(f"feature map {h}x{w} is smaller than one {factor}x{factor} pooling block")
    dtype = np.uint16 if 255 * factor * factor < 65536 and features.dtype == np.uint8 else np.int32
    rows = features[: ph * factor, : pw * factor].reshape(ph, factor, pw * factor, c)
    acc = rows[:, 0].astype(dtype)
    for k in range(1, factor):
        acc += rows[:, k]
    cols = acc.reshape(ph, pw, factor, c)
    out = cols[:, :, 0].copy()
    for k in range(1, factor):
        out += cols[:, :, k]
    return out


class Peak(NamedTuple):  # made per frame or pair: a named tuple costs a third of a frozen class
    """The best displacement on the grid: ``dx``, ``dy`` in grid steps (sub-grid), the score there, how far
    it stands above the best score outside its 3×3 neighbourhood (``margin``: ≈ 0 when the scene repeats or
    has edges of one orientation only, the aperture problem), and whether the peak sits on the grid's edge
    (the motion may be larger than the grid: saturated)."""

    dx: float
    dy: float
    score: float
    margin: float
    saturated: bool


def soft_argmax(scores: np.ndarray, displacements: np.ndarray, temperature: float) -> tuple[float, float]:
    """LibrEdgeTPU's soft argmax: softmax of ``scores / temperature`` (max subtracted), weighted mean of the
    displacements. ``scores`` flat in grid order, ``displacements`` ``[n, 2]`` as ``(dx, dy)``."""
    shifted = scores - np.max(scores)
    weights = np.exp(shifted / max(float(temperature), 1e-6))
    total = float(np.sum(weights))
    if total < 1e-12:
        return 0.0, 0.0
    weights = weights / total
    return float(weights @ displacements[:, 0]), float(weights @ displacements[:, 1])


def refine_offset(lower: float, best: float, upper: float) -> float:
    """Sub-grid offset of a peak from its score and its two neighbours along one axis: the vertex of a
    Gaussian through them (a parabola through their logarithms) when all three are positive, else of a
    parabola through them; within ±0.5, 0 when the three do not make a maximum.

    Why a Gaussian: a parabola through correlation scores pulls the estimate towards whole grid steps
    ("peak locking": shifts of 0.25 / 0.75 step read 0.13 step short / long here on average), which a
    heading integrated over many frames accumulates; the Gaussian fit pulls less (mean −0.04 / +0.06 step
    at 0.25 / 0.75, docs/robotics.md) but still pulls: robotics.flow_refine finishes at the frame's
    resolution."""
    if lower > 0.0 and best > 0.0 and upper > 0.0:
        lower, best, upper = math.log(lower), math.log(best), math.log(upper)
    curvature = lower - 2.0 * best + upper
    if curvature >= 0.0:  # flat or not a maximum: no sub-grid information
        return 0.0
    return min(0.5, max(-0.5, 0.5 * (lower - upper) / curvature))


def refined_peak(scores: np.ndarray) -> Peak:
    """Argmax of a ``[2r+1, 2r+1]`` score grid refined along x and y separately (:func:`refine_offset`).
    On the grid's edge there is no outer neighbour: that axis keeps the whole step and the peak is
    ``saturated``."""
    side = scores.shape[0]
    r = side // 2
    j, i = np.unravel_index(int(np.argmax(scores)), scores.shape)
    best = float(scores[j, i])
    edge = False
    ox = oy = 0.0
    if 0 < i < side - 1:
        ox = refine_offset(float(scores[j, i - 1]), best, float(scores[j, i + 1]))
    else:
        edge = True
    if 0 < j < side - 1:
        oy = refine_offset(float(scores[j - 1, i]), best, float(scores[j + 1, i]))
    else:
        edge = True
    others = scores.copy()
    others[max(0, j - 1):j + 2, max(0, i - 1):i + 2] = -np.inf
    margin = best - float(others.max()) if side > 3 else float("inf")
    return Peak(dx=i - r + ox, dy=j - r + oy, score=best, margin=margin, saturated=edge)


class CorrelationGrid:
    """Everything that depends only on the map size and the search range, computed once: index tables of
    the diagonal gather, the overlap counts LibrEdgeTPU divides by, and the displacement list."""

    def __init__(self, height: int, width: int, channels: int, search_range: int) -> None:
        if search_range < 1:
            raise InputError(f"search_range must be >= 1, got {search_range}")
        if search_range >= min(height, width):
            raise InputError(f"search_range {search_range} must be smaller than the feature map "
                             f"({height}x{width} after pooling)")
        self.height, self.width, self.channels = int(height), int(width), int(channels)
        self.search_range = r = int(search_range)
        self.side = 2 * r + 1
        offsets = np.arange(-r, r + 1)
        dy, dx = np.meshgrid(offsets, offsets, indexing="ij")
        # (dx, dy) pairs in LibrEdgeTPU's order, float32 like its table
        self.displacements = np.stack([dx.ravel(), dy.ravel()], axis=1).astype(np.float32)
        self.overlap_counts = ((height - np.abs(dy)) * (width - np.abs(dx)) * channels).astype(np.float64)
        # diagonal gather: for dy, the pairs (ya = yb - dy, yb) inside the map
        yb = np.arange(height)
        ya = yb[None, :] - offsets[:, None]
        valid = (ya >= 0) & (ya < height)
        self._diag_index = np.where(valid, ya * height + yb[None, :], 0)
        self._diag_mask = valid.astype(np.float64)
        # overlap boxes for energies: rows/cols of b inside the overlap for each dy/dx (a's box is b's
        # box moved by -d); half-open [lo, hi) into a summed-area table padded with a zero row/column
        self._b_lo_y = np.maximum(0, offsets)
        self._b_hi_y = height + np.minimum(0, offsets)
        self._b_lo_x = np.maximum(0, offsets)
        self._b_hi_x = width + np.minimum(0, offsets)
        self._pad = np.zeros((height, width + 2 * r, channels), dtype=np.float64)

    def check(self, features: np.ndarray, what: str) -> None:
        expected = (self.height, self.width, self.channels)
        if features.shape != expected:
            raise InputError(f"{what}: feature map shape {features.shape}, the grid was built for {expected}")

    def correlate(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``[dy + r, dx + r] = Σ_{y,x,c} a[y - dy, x - dx, c] · b[y, x, c]`` over the overlap (float64)."""
        self.check(a, "frame t")
        self.check(b, "frame t+1")
        h, w, c, r, side = self.height, self.width, self.channels, self.search_range, self.side
        pad = self._pad
        pad[:, r:r + w] = a
        s = pad.strides
        # shifted[k] = a moved right by dx = k - r (column x reads a[:, x - dx]); a view, copied once below
        shifted = as_strided(pad[:, 2 * r:], shape=(side, h, w, c), strides=(-s[1], s[0], s[1], s[2]))
        rows = np.ascontiguousarray(shifted).reshape(side * h, w * c)
        products = (rows @ b.reshape(h, w * c).astype(np.float64, copy=False).T).reshape(side, h * h)
        gathered = products[:, self._diag_index]  # [dx, dy, yb]
        return np.einsum("kjy,jy->jk", gathered, self._diag_mask)

    @staticmethod
    def energy_table(energy: np.ndarray) -> np.ndarray:
        """Summed-area table (``(h+1)×(w+1)``, zero first row and column) of per-cell energies ``h×w``."""
        table = np.zeros((energy.shape[0] + 1, energy.shape[1] + 1), dtype=np.float64)
        np.cumsum(np.cumsum(energy, axis=0), axis=1, out=table[1:, 1:])
        return table

    def overlap_energies(self, table_a: np.ndarray, table_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Energy of a's part and of b's part of each displacement's overlap, ``[dy + r, dx + r]``, from
        the two frames' :meth:`energy_table` (per-cell energies, e.g. squared features summed over
        channels)."""
        return self._box_sums(table_a, shift=True), self._box_sums(table_b, shift=False)

    def _box_sums(self, table: np.ndarray, shift: bool) -> np.ndarray:
        offsets = np.arange(-self.search_range, self.search_range + 1)
        move = offsets if shift else np.zeros_like(offsets)
        y0 = (self._b_lo_y - move)[:, None]
        y1 = (self._b_hi_y - move)[:, None]
        x0 = (self._b_lo_x - move)[None, :]
        x1 = (self._b_hi_x - move)[None, :]
        return table[y1, x1] - table[y0, x1] - table[y1, x0] + table[y0, x0]
