"""TFLite's RESIZE_BILINEAR (the builtin uint8/float kernel's arithmetic) and a fused resize + ARG_MAX.

The kernel (``optimized_ops::ResizeBilinearGenericSmallChannel``) maps each output pixel to a float32 input
position, takes its 4 corners (lower = floor clamped at 0, upper = ceil clamped at n - 1) and computes
``a*s0 + b*s1 + c*s2 + d*s3 (+ 0.5 for integers)`` in float32 with weights ``s`` from the fractional parts,
then truncates. ``resize_bilinear`` evaluates exactly that for every pixel (the reference path).

``resize_bilinear_argmax`` gets the same class map without upsampling every channel: all output pixels whose
corners are the same 4 input pixels form a rectangular *cell*, and each interpolated (and rounded) value lies
between its corners' minimum and maximum. Where one class's smallest corner beats every other class's
largest corner, that class wins every pixel of the cell; only the remaining cells (object boundaries,
typically a few percent) are interpolated, with the kernel's arithmetic, and only for the classes that can
still win there. ``UpsampleArgmax`` does the same for one input size with the axes computed once, in one
compiled loop when numba is installed (``kernels.py``), else with ``resize_bilinear_argmax``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_F32 = np.float32


@dataclass(frozen=True, slots=True)
class _Axis:
    """One axis of the resize: per output index the lower/upper input index and the lerp weight."""

    lower: np.ndarray  # (n_out,) intp
    upper: np.ndarray  # (n_out,) intp
    frac: np.ndarray  # (n_out,) float32, position - lower (may be < 0 at a clamped half-pixel edge)

    @classmethod
    def of(cls, n_in: int, n_out: int, align_corners: bool, half_pixel_centers: bool) -> _Axis:
        aligned = align_corners and n_out > 1
        scale = _F32(n_in - aligned) / _F32(n_out - aligned)
        index = np.arange(n_out, dtype=_F32)
        position = (index + _F32(0.5)) * scale - _F32(0.5) if half_pixel_centers else index * scale
        lower = np.maximum(np.floor(position), _F32(0.0)).astype(np.intp)
        upper = np.minimum(np.ceil(position), _F32(n_in - 1)).astype(np.intp)
        return cls(lower, upper, (position - lower.astype(_F32)).astype(_F32))

    def cells(self, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Maximal runs of outputs that read the same two corners: (start, length, lower, upper) per run.

        An output exactly on a grid line (weight 0 on its upper corner) joins the run of the next interval:
        a zero-weight corner adds exactly 0, so the kernel's sum is unchanged. Clamped edge outputs keep
        their own runs (at a half-pixel top edge the kernel reads row 0 twice with a negative weight).
        """
        upper = np.where(self.frac != 0, self.upper, np.minimum(self.lower + 1, n_in - 1))
        start = np.flatnonzero(np.diff(self.lower, prepend=-1) | np.diff(upper, prepend=-1))
        length = np.diff(np.append(start, self.lower.size))
        return start, length, self.lower[start], upper[start]


def _interpolate(planes: np.ndarray, width: int, ys: _Axis, xs: _Axis, y: np.ndarray,
                 x: np.ndarray) -> np.ndarray:
    """The kernel's float32 value at output pixels (y, x) before the final cast: (C, P) from channel-first
    ``planes`` (C, H * W). Same operations and order as the C++ per element."""
    fy, fx = ys.frac[y], xs.frac[x]
    gy, gx = _F32(1.0) - fy, _F32(1.0) - fx
    row0, row1 = ys.lower[y] * width, ys.upper[y] * width
    x0, x1 = xs.lower[x], xs.upper[x]
    value = planes.take(row0 + x0, axis=1) * (gy * gx)
    value += planes.take(row0 + x1, axis=1) * (gy * fx)
    value += planes.take(row1 + x0, axis=1) * (fy * gx)
    value += planes.take(row1 + x1, axis=1) * (fy * fx)
    return value


def _cast(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The kernel's ``static_cast<T>(v + rounding_offset)``: +0.5 then truncation for integer types."""
    if dtype.kind == "f":
        return value.astype(dtype)
    value += _F32(0.5)
    info = np.iinfo(dtype)
    return np.clip(np.trunc(value), info.min, info.max).astype(dtype)


def _planes(image: np.ndarray) -> np.ndarray:
    """(H, W, C) -> channel-first float32 (C, H * W)."""
    return np.ascontiguousarray(image.reshape(-1, image.shape[2]).T, dtype=_F32)


def resize_bilinear(image: np.ndarray, out_h: int, out_w: int, align_corners: bool,
                    half_pixel_centers: bool) -> np.ndarray:
    """(H, W, C) -> (out_h, out_w, C) with the TFLite kernel's arithmetic; 1x1 inputs are broadcast."""
    h, w, c = image.shape
    if (h, w) == (out_h, out_w):
        return image
    if (h, w) == (1, 1):
        return np.broadcast_to(image, (out_h, out_w, c))
    ys = _Axis.of(h, out_h, align_corners, half_pixel_centers)
    xs = _Axis.of(w, out_w, align_corners, half_pixel_centers)
    grid_y, grid_x = np.divmod(np.arange(out_h * out_w), out_w)
    value = _interpolate(_planes(image), w, ys, xs, grid_y, grid_x)
    return np.ascontiguousarray(_cast(value, image.dtype).T).reshape(out_h, out_w, c)


class UpsampleArgmax:
    """``resize_bilinear_argmax`` for inputs of one size, the axes and cells computed once; on uint8 inputs
    (up to 256 classes) it runs the compiled kernel (``kernels.resize_argmax``, the same cell algorithm in
    one loop) when numba is installed, else the NumPy function."""

    def __init__(self, in_h: int, in_w: int, out_h: int, out_w: int, align_corners: bool,
                 half_pixel_centers: bool) -> None:
        from libredgetpu_ros.postprocess import kernels

        self.in_shape, self.out_shape = (in_h, in_w), (out_h, out_w)
        self._options = (align_corners, half_pixel_centers)
        ys = _Axis.of(in_h, out_h, align_corners, half_pixel_centers)
        xs = _Axis.of(in_w, out_w, align_corners, half_pixel_centers)
        self._plan = (*ys.cells(in_h), ys.frac, *xs.cells(in_w), xs.frac)
        self._kernel = kernels.resize_argmax_kernel()

    @property
    def compiled(self) -> bool:
        return self._kernel is not None

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """(in_h, in_w, C) -> (out_h, out_w) class ids, a new array."""
        if image.shape[:2] != self.in_shape:
            raise ValueError(f"UpsampleArgmax for {self.in_shape} inputs got {image.shape[:2]}")
        if self._kernel is None or image.dtype != np.uint8 or image.shape[2] > 256:
            return resize_bilinear_argmax(image, *self.out_shape, *self._options)
        out = np.empty(self.out_shape, np.uint8)
        self._kernel(np.ascontiguousarray(image), *self._plan, out)
        return out


def resize_bilinear_argmax(image: np.ndarray, out_h: int, out_w: int, align_corners: bool,
                           half_pixel_centers: bool) -> np.ndarray:
    """``argmax(resize_bilinear(image, ...), axis=-1)`` (first maximum) as uint8 (intp beyond 256 classes),
    computed cell by cell for unsigned integer ``image``.

    The corner bound needs values that round back into the corners' range: true for round-half-up of
    non-negative values, not for float (no rounding) or signed (truncation toward zero) tensors, which take
    the full path.
    """
    h, w, c = image.shape
    out_dtype = np.uint8 if c <= 256 else np.intp
    if image.dtype.kind != "u":
        full = resize_bilinear(image, out_h, out_w, align_corners, half_pixel_centers)
        return np.argmax(full, axis=-1).astype(out_dtype)
    ys = _Axis.of(h, out_h, align_corners, half_pixel_centers)
    xs = _Axis.of(w, out_w, align_corners, half_pixel_centers)
    y_start, y_len, y_lo, y_hi = ys.cells(h)
    x_start, x_len, x_lo, x_hi = xs.cells(w)
    values = image.astype(np.int32)
    top, bottom = values[y_lo], values[y_hi]  # (cell rows, W, C)
    row_min, row_max = np.minimum(top, bottom), np.maximum(top, bottom)
    cell_min = np.minimum(row_min[:, x_lo], row_min[:, x_hi])  # (cell rows, cell cols, C)
    cell_max = np.maximum(row_max[:, x_lo], row_max[:, x_hi])
    best = np.argmax(cell_min, axis=-1).astype(out_dtype)
    floor = cell_min.max(axis=-1)  # the best class's guaranteed value
    rivals = np.where(np.arange(c) == best[..., None], np.iinfo(np.int32).min, cell_max).max(axis=-1)
    undecided = floor <= rivals
    cell_of_row = np.repeat(np.arange(y_len.size), y_len)
    cell_of_col = np.repeat(np.arange(x_len.size), x_len)
    classes = best[cell_of_row][:, cell_of_col]

    cy, cx = np.nonzero(undecided)
    if cy.size == 0:
        return classes
    # Classes that can still win a cell: their largest corner reaches the best guaranteed value.
    contenders = cell_max[cy, cx] >= floor[cy, cx][:, None]  # (U, C)
    used = np.flatnonzero(contenders.any(axis=0))
    planes = values[:, :, used].astype(_F32)  # (H, W, K)
    # Cells of one shape at a time (interior cells share one; the last row/column may differ).
    shapes = y_len[cy] * (x_len.max() + 1) + x_len[cx]
    for shape in np.unique(shapes):
        sel = shapes == shape
        u_y, u_x = cy[sel], cx[sel]
        rows = y_start[u_y][:, None] + np.arange(y_len[u_y[0]])  # (U, ny) output rows of each cell
        cols = x_start[u_x][:, None] + np.arange(x_len[u_x[0]])  # (U, nx)
        fy, fx = ys.frac[rows][:, :, None], xs.frac[cols][:, None, :]
        gy, gx = _F32(1.0) - fy, _F32(1.0) - fx
        corner = [planes[yx][:, :, None, None] for yx in (
            (y_lo[u_y], x_lo[u_x]), (y_lo[u_y], x_hi[u_x]), (y_hi[u_y], x_lo[u_x]), (y_hi[u_y], x_hi[u_x]))]
        # The kernel's sum, in its order; (U, K, ny, nx).
        value = corner[0] * (gy * gx)[:, None]
        value += corner[1] * (gy * fx)[:, None]
        value += corner[2] * (fy * gx)[:, None]
        value += corner[3] * (fy * fx)[:, None]
        rounded = _cast(value, np.dtype(np.int32))
        rounded[~contenders[sel][:, used]] = np.iinfo(np.int32).min
        # Running first maximum over the few contending classes (ascending ids: ties keep the lower id).
        winner = np.zeros(rounded[:, 0].shape, dtype=np.intp)
        top_value = rounded[:, 0]
        for k in range(1, used.size):
            winner[rounded[:, k] > top_value] = k
            top_value = np.maximum(top_value, rounded[:, k])
        classes[rows[:, :, None], cols[:, None, :]] = used[winner]
    return classes
