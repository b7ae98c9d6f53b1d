"""CPU twin of a quantized Dense layer: the integer arithmetic of TFLite's int8 FULLY_CONNECTED, vectorised.

The templates are ``uint8 -> QUANTIZE -> int8 FULLY_CONNECTED (per-row weight scales) -> QUANTIZE -> uint8``.
Both QUANTIZE ops only shift the zero point by 128 (same scale), so the whole graph is, per output row r::

    acc_r = sum_c q[r, c] * (xq[c] - input_zero_point)                      (exact integer)
    yq_r  = clamp(output_zero_point + requant(acc_r, M_r), 0, 255)           M_r = s_in * s_w[r] / s_out

with ``requant(acc, M) = round_half_even(float32(acc) * float32(M))``: the float32 requantization of LiteRT's
default (XNNPACK) kernels, and the form the Edge TPU stores (the parameter overhead holds float32 ``M_r``).
The tests check it bit for bit against LiteRT running the uncompiled template; TFLite's builtin fixed-point
kernel (Q31 multipliers) differs from it by 1 LSB on a few outputs in ten thousand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.matmul import fastpath
from libredgetpu_ros.matmul.quantize import round_half_away

UINT8_MIN, UINT8_MAX = 0, 255


@dataclass(frozen=True)
class DenseQuantization:
    """Quantization of one Dense template at its uint8 boundary (what the host sends and receives)."""

    input_scale: float
    input_zero_point: int
    output_scale: float
    output_zero_point: int
    weight_scales: np.ndarray  # float32 (rows,), zero point 0

    @property
    def rows(self) -> int:
        return int(self.weight_scales.shape[0])

    def multipliers(self) -> np.ndarray:
        """Per-row float32 requantization multipliers ``s_in * s_w[r] / s_out`` (float32 arithmetic)."""
        return (np.float32(self.input_scale) * self.weight_scales.astype(np.float32)
                / np.float32(self.output_scale)).astype(np.float32)

    def input_range(self) -> tuple[float, float]:
        """The float interval the uint8 input can represent."""
        return ((UINT8_MIN - self.input_zero_point) * self.input_scale,
                (UINT8_MAX - self.input_zero_point) * self.input_scale)

    def output_range(self) -> tuple[float, float]:
        """The float interval the uint8 output can represent (results beyond it saturate)."""
        return ((UINT8_MIN - self.output_zero_point) * self.output_scale,
                (UINT8_MAX - self.output_zero_point) * self.output_scale)


def quantize_input(x: np.ndarray, quant: DenseQuantization) -> np.ndarray:
    """Float inputs -> uint8 with the template's input scale and zero point (ties away from zero, clamped)."""
    scaled = round_half_away(np.asarray(x, dtype=np.float64) / quant.input_scale) + quant.input_zero_point
    return np.clip(scaled, UINT8_MIN, UINT8_MAX).astype(np.uint8)


def dequantize(values: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """uint8 -> float32."""
    return ((values.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)).astype(np.float32)


def exact_float_dtype(cols: int, input_zero_point: int) -> type[np.floating]:
    """float32 when float32 BLAS sums ``cols`` int8 x (uint8 - zero point) products exactly, else float64.

    Every partial sum is an integer of magnitude <= cols * 128 * max(zp, 255 - zp); float32 holds every
    integer up to 2**24 (cols <= 1024 for the templates' zero points 127/128), float64 up to 2**53.
    """
    largest = cols * 128 * max(input_zero_point, UINT8_MAX - input_zero_point)
    return np.float32 if largest <= 2**24 else np.float64


def dense_uint8(weights: np.ndarray, xq: np.ndarray, quant: DenseQuantization,
                multipliers: np.ndarray | None = None) -> np.ndarray:
    """uint8 outputs (k, rows) of the quantized Dense layer for uint8 inputs ``xq`` (k, cols).

    ``weights`` may be the int8 matrix or the same values as float64, or as float32 where
    :func:`exact_float_dtype` allows it: BLAS is then exact because every partial sum is an integer the
    float type holds (float32 is ~2x less memory traffic than float64; at N=1024 on this machine's OpenBLAS
    its gemv is far faster still); ``multipliers`` defaults to ``quant.multipliers()``.
    """
    exact = exact_float_dtype(weights.shape[1], quant.input_zero_point)
    m = quant.multipliers() if multipliers is None else multipliers
    if weights.dtype == np.int8 and exact is np.float32:  # the compiled kernel: int8 read once, no copy
        out = fastpath.dense_uint8(weights, xq, quant.input_zero_point, m, quant.output_zero_point)
        if out is not None:
            return out
    if weights.dtype != np.float64 and not (weights.dtype == np.float32 and exact is np.float32):
        weights = weights.astype(exact)
    centred = xq.astype(weights.dtype) - weights.dtype.type(quant.input_zero_point)
    acc = (centred @ weights.T).astype(np.float32)  # like (float)int32 in the kernels: rounds beyond 2**24
    scaled = np.rint(acc * m)
    scaled += quant.output_zero_point
    return np.clip(scaled, UINT8_MIN, UINT8_MAX).astype(np.uint8)


class TwinRunner:
    """The ``cpu`` MatMul runner (``matmul/runners.py``): :func:`dense_uint8` on the weights a parameter set
    carries in its payload (the engine's: ``weights`` int8 (rows, cols) and ``dense_float(zero_point)``,
    the float copy BLAS sums exactly); nothing to stage. The engine fuses quantize + Dense + dequantize
    into one compiled call instead when ``fastpath`` can (``MatMulEngine.matmul_versioned``)."""

    name = "cpu"
    choice = ""  # set by backends.choose
    fallback = ""

    def __init__(self, quant: DenseQuantization) -> None:
        self._quant = quant
        self._multipliers = quant.multipliers()

    def stage(self, parameters: Any) -> None:
        """Nothing to upload: the twin reads the set's payload when it runs."""

    def run(self, xq: np.ndarray, parameters: Any) -> np.ndarray:
        """uint8 outputs (k, rows) for uint8 inputs (k, cols) with the set's weights."""
        state = parameters.payload
        # int8 as is for the compiled kernel, else the float copy BLAS sums exactly.
        weights = state.weights if fastpath.available() else state.dense_float(self._quant.input_zero_point)
        return dense_uint8(weights, xq, self._quant, self._multipliers)

    def close(self) -> None:
        """Nothing held."""
