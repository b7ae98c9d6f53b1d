"""Validation and per-row int8 quantization of float weight matrices and bias vectors.

The scales are fixed by the template: the Edge TPU bakes ``input_scale * w_scale[r] / output_scale`` into the
compiled instructions and the parameter overhead, so new weights must use the template's per-row scales and
values outside ``[-128 * s_r, 127 * s_r]`` are clipped (and counted).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from libredgetpu_ros.errors import WeightsError

INT8_MIN, INT8_MAX = -128, 127
_NUMERIC_KINDS = "fiu"  # float, signed and unsigned integer; bool, complex, strings, objects are refused


@dataclass(frozen=True)
class QuantizedWeights:
    """int8 weights plus what quantizing them cost, in the weights' own (float) units."""

    values: np.ndarray  # int8 (rows, cols)
    clipped_count: int  # entries outside [-128 * s_r, 127 * s_r]
    max_quantization_error: float  # max |W - q * s_r| over entries that were not clipped
    max_clip_error: float  # max |W - q * s_r| over clipped entries (0.0 when none)
    row_error: np.ndarray  # float64 (rows,): max |W - q * s_r| per row, clipped entries included


def as_real_array(value: object, name: str) -> np.ndarray:
    """``value`` as a NumPy array of a real numeric dtype, else WeightsError naming ``name`` and the dtype."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged nested lists and the like
        raise WeightsError(f"{name} is not convertible to a numeric array: {exc}") from exc
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise WeightsError(f"{name} has dtype {array.dtype} ({array.dtype.kind!r}); expected float32/float64 "
                           f"or an integer type convertible to float")
    return array


def validate_matrix(value: object, rows: int, cols: int, name: str = "weights") -> np.ndarray:
    """Float32 copy-free view of a finite (rows, cols) real matrix, else WeightsError naming the problem."""
    array = as_real_array(value, name)
    if array.shape != (rows, cols):
        raise WeightsError(f"{name} has shape {array.shape}, this template needs ({rows}, {cols})")
    array = np.asarray(array, dtype=np.float32)
    if not np.isfinite(array).all():
        bad = np.argwhere(~np.isfinite(array))[0]
        raise WeightsError(f"{name} contains NaN/inf (first at row {bad[0]}, col {bad[1]}: "
                           f"{array[bad[0], bad[1]]})")
    return array


def validate_bias(value: object | None, rows: int) -> np.ndarray | None:
    """Float32 (rows,) finite bias, or None; WeightsError naming the problem otherwise."""
    if value is None:
        return None
    array = as_real_array(value, "bias")
    if array.shape != (rows,):
        raise WeightsError(f"bias has shape {array.shape}, this template needs ({rows},)")
    array = np.array(array, dtype=np.float32)  # own copy: the caller may mutate theirs after the swap
    if not np.isfinite(array).all():
        raise WeightsError(f"bias contains NaN/inf (first at index {int(np.argmax(~np.isfinite(array)))})")
    array.setflags(write=False)
    return array


def quantize_rows(weights: np.ndarray, scales: np.ndarray) -> QuantizedWeights:
    """Quantize float32 (rows, cols) ``weights`` with one scale per row (zero point 0), round half to even."""
    scales64 = np.asarray(scales, dtype=np.float64)
    inv = (1.0 / scales64).astype(np.float32)[:, None]
    scaled = np.multiply(weights, inv, dtype=np.float32)
    rounded = np.rint(scaled)
    np.clip(rounded, INT8_MIN, INT8_MAX, out=rounded)
    values = rounded.astype(np.int8)
    # In units of s_r an unclipped entry is off by at most 0.5, a clipped one by more: no mask pass is
    # needed unless some row actually clipped.
    np.subtract(scaled, rounded, out=scaled)
    np.abs(scaled, out=scaled)
    row_max = scaled.max(axis=1).astype(np.float64)
    row_error = row_max * scales64
    if row_max.max(initial=0.0) <= 0.5:
        return QuantizedWeights(values, 0, float(row_error.max(initial=0.0)), 0.0, row_error)
    clipped = scaled > 0.5
    clipped_count = int(np.count_nonzero(clipped))
    quant_rows = np.where(clipped, 0.0, scaled).max(axis=1) * scales64
    clip_rows = np.where(clipped, scaled, 0.0).max(axis=1) * scales64
    return QuantizedWeights(values, clipped_count, float(quant_rows.max()), float(clip_rows.max()), row_error)


def round_half_away(values: np.ndarray) -> np.ndarray:
    """Round to nearest, ties away from zero (``std::round``, what TFLite's reference Quantize does)."""
    return np.trunc(values + np.copysign(0.5, values))
