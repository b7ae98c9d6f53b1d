"""Bilinear sampling of the PoseNet decoder's grid tensors, as Google's ``PosenetDecoderOp`` samples them
(google-coral/edgetpu ``src/cpp/posenet/posenet_decoder.cc``), and the padded float32 buffers it reads.

Split from ``posenet.py`` (the decoding itself): this is where the decoder spends its time, tuned for NumPy
call overhead (see docs/postprocessing.md); the decoder only moves points through it.
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.postprocess.graph import TensorSpec


def padded_buffer(h: int, w: int, c: int) -> tuple[np.ndarray, np.ndarray]:
    """An (H + 1, W + 1, C) float32 buffer and its [:H, :W] view, where the tensor goes (see ``Sampler``)."""
    padded = np.empty((h + 1, w + 1, c), dtype=np.float32)
    return padded, padded[:h, :w]


def padded_copy(tensor: np.ndarray) -> np.ndarray:
    """``tensor`` (H, W, C) copied into a padded buffer (``padded_buffer``)."""
    padded, inner = padded_buffer(*tensor.shape)
    inner[...] = tensor
    return padded


def dequantized_padded(spec: TensorSpec, raw: np.ndarray, extra_scale: float = 1.0) -> np.ndarray:
    """``raw`` (H, W, C) dequantized straight into a padded buffer (no intermediate array)."""
    padded, inner = padded_buffer(*raw.shape)
    spec.dequantize(raw, extra_scale, out=inner)
    return padded


class Sampler:
    """Bilinear sampling of an (H, W, C) float32 tensor at per-row points and channels, as the C++ does it.

    Points are always inside the grid (every position the decoder produces is clamped). The C++ reads the
    ceil corner, which equals the floor corner on a grid line; we instead always read floor + 1 from a
    copy padded by one edge row/column. Where they differ the lerp weight of that corner is exactly 0, so
    every result is bit-identical and the corner offsets become constants.
    """

    def __init__(self, padded: np.ndarray) -> None:
        """``padded``: (H + 1, W + 1, C) float32, the tensor in [:H, :W]; the edge row and column are filled
        here."""
        h, w, c = padded.shape[0] - 1, padded.shape[1] - 1, padded.shape[2]
        padded[h, :w] = padded[h - 1, :w]
        padded[:, w] = padded[:, w - 1]
        self.tensor = padded[:h, :w]
        self.flat = padded.reshape(-1)
        self.strides = np.array([(w + 1) * c, c], dtype=np.float32)  # float32 matmul: exact below 2^24
        # Corner offsets indexed [x corner, y corner]: each lerp then reads contiguous blocks.
        self.corners = np.array([[0, (w + 1) * c], [c, (w + 1) * c + c]], dtype=np.intp)[:, :, None, None]

    def offsets(self, channels: np.ndarray) -> np.ndarray:
        """Flat offsets of the 4 corners x ``channels`` (k, B) from a cell's origin: (2, 2, k, B). Computed
        once per set of points and reused while the points move."""
        return self.corners + channels

    def __call__(self, points: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """``points``: (2, B) y/x rows in the grid (>= 0); returns (k, B) float32, k from ``offsets``.

        Points along the last axis keep every elementwise op on contiguous rows (small trailing axes make
        NumPy's broadcasting loops several times slower). Same products and sums as the C++:
        (1 - ly) * ((1 - lx) * tl + lx * tr) + ly * ((1 - lx) * bl + lx * br), with the (1 - l, l) weight
        pairs stacked so that each lerp is one multiply and one add (NumPy calls, not flops, are the cost).
        """
        lerp, low = np.modf(points)  # exact for points >= 0
        weights = np.stack([1.0 - lerp, lerp])  # [1 - l, l] x [y, x]
        v = self.flat.take(offsets + (self.strides @ low).astype(np.intp))  # (2, 2, k, B): [x, y corner]
        v *= weights[:, 1, None, None]
        rows = v[0] + v[1]  # along x, for the top and bottom rows
        rows *= weights[:, 0, None]
        return rows[0] + rows[1]

    def step(self, points: np.ndarray, offsets: np.ndarray, ws: Workspace) -> None:
        """``points = clamp(points + sample(points), 0, high)`` in place, for the k=2 (y, x) channels in
        ``offsets``: the arithmetic of ``__call__``, tuned for the 48 steps of a walk (this is where the
        decoder spends its time, in NumPy call overhead rather than flops). Every intermediate goes to a
        buffer of ``ws``, made once per depth level, and operands have equal shapes wherever possible: a
        broadcast (even against a scalar) costs NumPy about 1 us per call, a same-shape op about 0.3 us."""
        low = np.floor(points, out=ws.low)
        np.subtract(points, low, out=ws.frac)  # exact, as np.modf
        np.subtract(ws.one, ws.frac, out=ws.rest)
        np.add(offsets, (self.strides @ low).astype(np.intp), out=ws.index)
        # mode="clip": "raise" would copy through a buffer when given ``out``, and every index is in range
        # anyway (points are clamped to the grid, the tensor padded by one row and column). Not "wrap": it
        # loops on a huge negative index (a NaN point from NaN float tensors) instead of failing fast.
        self.flat.take(ws.index, out=ws.corners, mode="clip")
        ws.corners *= ws.x_weights
        np.add(ws.left, ws.right, out=ws.rows)
        ws.rows *= ws.y_weights
        np.add(ws.top, ws.bottom, out=ws.shift)
        points += ws.shift
        np.minimum(points, ws.high, out=points)
        np.maximum(points, ws.zero, out=points)


class Workspace:
    """Buffers, and views into them, for ``Sampler.step`` on B points with 2 channels in a (2, H, W) grid
    (``high``: (2, 1) last row and column)."""

    __slots__ = ("bottom", "corners", "frac", "high", "index", "left", "low", "one", "rest", "right", "rows",
                 "shift", "top", "x_weights", "y_weights", "zero")

    def __init__(self, b: int, high: np.ndarray) -> None:
        self.low = np.empty((2, b), dtype=np.float32)
        weights = np.empty((2, 2, b), dtype=np.float32)  # [1 - l, l] x [y, x]
        self.rest, self.frac = weights
        self.one = np.ones((2, b), dtype=np.float32)
        self.x_weights, self.y_weights = weights[:, 1, None, None], weights[:, 0, None]
        self.index = np.empty((2, 2, 2, b), dtype=np.intp)
        self.corners = np.empty((2, 2, 2, b), dtype=np.float32)  # [x corner, y corner, channel, point]
        self.left, self.right = self.corners
        self.rows = np.empty((2, 2, b), dtype=np.float32)  # [y corner, channel, point]
        self.top, self.bottom = self.rows
        self.shift = np.empty((2, b), dtype=np.float32)
        self.high = np.empty((2, b), dtype=np.float32)
        self.high[...] = high
        self.zero = np.zeros((2, b), dtype=np.float32)
