"""TFLite's quantized kernels for the few small ops between the Edge TPU boundary and a post-processing op,
with the reference kernels' arithmetic (float32 intermediate values, round half away from zero)."""

from __future__ import annotations

from typing import Any

import numpy as np

from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.postprocess.graph import model_label, per_tensor_quant


def round_half_away(x: np.ndarray) -> np.ndarray:
    """``std::round``: halves go away from zero (NumPy's rint rounds them to even)."""
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def _quant(model: Any, index: int) -> tuple[np.float32, int]:
    scale, zero_point = per_tensor_quant(model, model.tensors[index])
    return np.float32(scale), zero_point


def _requantize_float(q: np.ndarray, in_q: tuple[np.float32, int], out_q: tuple[np.float32, int],
                      dtype: np.dtype) -> np.ndarray:
    """ConcatenationWithScaling's per-input rescale: round(q * s_in/s_out - zp_in * s_in/s_out) + zp_out."""
    if in_q == out_q:
        return q
    scale = in_q[0] * (np.float32(1.0) / out_q[0])
    bias = np.float32(-in_q[1]) * scale
    info = np.iinfo(dtype)
    value = round_half_away(q.astype(np.float32) * scale + bias).astype(np.int32) + out_q[1]
    return np.clip(value, info.min, info.max).astype(dtype)


def logistic_table(model: Any, op: Any) -> np.ndarray:
    """LiteRT's 256-entry lookup table for a quantized LOGISTIC (dequantize, sigmoid, requantize)."""
    in_scale, in_zp = _quant(model, op.inputs[0])
    out_scale, out_zp = _quant(model, op.outputs[0])
    dtype = np.dtype(model.tensors[op.inputs[0]].dtype)
    info = np.iinfo(dtype)
    q = np.arange(info.min, info.max + 1, dtype=np.int32)
    real = in_scale * (q - in_zp).astype(np.float32)
    sig = np.float32(1.0) / (np.float32(1.0) + np.exp(-real))
    out = round_half_away(sig * (np.float32(1.0) / out_scale)).astype(np.int32) + out_zp
    return np.clip(out, info.min, info.max).astype(dtype)


def concat_parts(model: Any, op: Any, args: list[np.ndarray]) -> list[np.ndarray]:
    """A CONCATENATION's inputs rescaled to its output quantization, not yet joined. Inputs broadcast from
    one value along some axes (stride 0, e.g. an image-pooling tile) are rescaled once and stay broadcast."""
    out_tensor = model.tensors[op.outputs[0]]
    if op.builtin_options.get("fused_activation_function", "NONE") != "NONE":
        raise ModelFormatError(f"{model_label(model)}: fused activation on CONCATENATION not supported")
    if out_tensor.dtype.kind == "f":
        return list(args)
    out_q = _quant(model, op.outputs[0])
    parts = []
    for a, i in zip(args, op.inputs, strict=True):
        tile = tuple(slice(0, 1) if step == 0 else slice(None) for step in a.strides)
        parts.append(np.broadcast_to(_requantize_float(a[tile], _quant(model, i), out_q, out_tensor.dtype),
                                     a.shape))
    return parts


def run_op(model: Any, op: Any, args: list[np.ndarray]) -> np.ndarray:
    """Evaluate one small quantized op (RESHAPE, CONCATENATION, LOGISTIC, DEQUANTIZE, QUANTIZE)."""
    out_tensor = model.tensors[op.outputs[0]]
    name = op.opcode_name
    if name in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
        return args[0].reshape(out_tensor.shape)
    if name == "CONCATENATION":
        parts = concat_parts(model, op, args)
        return np.concatenate(parts, axis=int(op.builtin_options.get("axis", 0)) % len(out_tensor.shape))
    if name == "LOGISTIC":
        if out_tensor.dtype.kind == "f":
            return np.float32(1.0) / (np.float32(1.0) + np.exp(-args[0]))
        table = logistic_table(model, op)
        return table[args[0].astype(np.int32) - np.iinfo(args[0].dtype).min]
    if name == "DEQUANTIZE":
        scale, zero_point = _quant(model, op.inputs[0])
        return (args[0].astype(np.float32) - np.float32(zero_point)) * scale
    if name == "QUANTIZE" and out_tensor.dtype.kind != "f" and args[0].dtype.kind != "f":
        in_q, out_q = _quant(model, op.inputs[0]), _quant(model, op.outputs[0])
        return requantize(args[0], in_q, out_q, out_tensor.dtype)
    raise ModelFormatError(f"{model_label(model)}: op {op.index} {name} is not supported between the "
                           "boundary and the post-processing op")


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: real = m * 2^(shift - 31) with m a Q31 int32."""
    if real == 0.0:
        return 0, 0
    mantissa, shift = np.frexp(real)
    q = int(round_half_away(np.float64(mantissa) * (1 << 31)))
    if q == 1 << 31:
        q //= 2
        shift += 1
    return q, int(shift)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: np.ndarray | int,
                                     shift: np.ndarray | int, half_up: bool = False) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier on int64 arrays (``multiplier``/``shift`` scalars or broadcast
    per output channel), for |x << left shift| < 2^31.

    SaturatingRoundingDoublingHighMul(a, m) is round-half-up of a*m / 2^31 (its nudge of 1 - 2^30 for
    negative products plus C++'s truncating division is a floor of p + 2^30); RoundingDivideByPOT rounds
    halves away from zero, i.e. up for positives and down for negatives. Both as floor shifts on int64.
    ``half_up``: the right shift rounds halves up for negatives too, as ruy's requantization (LiteRT's
    CONV_2D / FULLY_CONNECTED GEMMs) does: it differs from gemmlowp's only on negative exact halves.
    """
    multiplier = np.asarray(multiplier, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    high = ((x.astype(np.int64) << left) * multiplier + (1 << 30)) >> 31
    if not right.any():
        return high
    half = (np.int64(1) << right) >> 1  # 0 where right == 0
    if half_up:
        return (high + half) >> right
    return (high + half - ((high < 0) & (right > 0))) >> right


def requantize(q: np.ndarray, in_q: tuple[np.float32, int], out_q: tuple[np.float32, int],
               dtype: np.dtype) -> np.ndarray:
    """QUANTIZE between two integer types: integer rescale with TFLite's fixed-point multiplier."""
    multiplier, shift = quantize_multiplier(float(in_q[0]) / float(out_q[0]))
    value = multiply_by_quantized_multiplier(q.astype(np.int64) - in_q[1], multiplier, shift) + out_q[1]
    info = np.iinfo(dtype)
    return np.clip(value, info.min, info.max).astype(dtype)


class AccumulatorRequantizer:
    """Int32 accumulators -> 8-bit outputs (per-channel ``multiplier``/``shift``, zero point, clamp), as
    MultiplyByQuantizedMultiplier + offset + clamp, but mostly in float32.

    The fixed-point path rounds twice (to 2^-right, then to 1), so it equals round(acc * real) except where
    acc * real lies within 2^-(right + 1) of a half; float32 adds at most |y| * 2^-22 of error, and values
    beyond +-2^10 clamp whatever their rounding (8-bit outputs). Only elements in that band (a few percent)
    are recomputed with the exact integer path. ``half_up``: as :func:`multiply_by_quantized_multiplier`'s.
    """

    LIMIT = np.float32(1024.0)

    def __init__(self, multiplier: np.ndarray, shift: np.ndarray, zero_point: int, low: int, high: int,
                 dtype: np.dtype, half_up: bool = False) -> None:
        if np.dtype(dtype).itemsize != 1:
            raise ModelFormatError(f"accumulator requantization to {np.dtype(dtype)} is not supported")
        self.multiplier = np.asarray(multiplier, dtype=np.int64)
        self.shift = np.asarray(shift, dtype=np.int64)
        self.real = (self.multiplier * np.exp2(self.shift.astype(np.float64) - 31)).astype(np.float32)
        right = np.maximum(-self.shift, 0)
        band = np.where(right > 0, np.exp2(-(right + 1.0)), 0.0) + 2.0 ** -10
        self.edge = (0.5 - band).astype(np.float32)
        self.zero_point, self.low, self.high, self.dtype = zero_point, low, high, np.dtype(dtype)
        self.half_up = half_up

    def __call__(self, partials: list[np.ndarray], bias: np.ndarray) -> np.ndarray:
        """``partials``: float32 arrays of exact integer partial sums broadcasting to (N, channels), the
        accumulator being their sum plus the int64 ``bias``. Returns (N, channels) of ``dtype``."""
        full, *rest = sorted(partials, key=lambda p: -p.shape[0])  # start from a full-size block
        y = full + bias.astype(full.dtype)
        for p in rest:
            y += p
        y *= self.real
        np.minimum(y, self.LIMIT, out=y)  # far-out values clamp anyway; keeps them out of the band
        np.maximum(y, -self.LIMIT, out=y)
        rounded = y + np.float32(0.5)
        np.floor(rounded, out=rounded)
        y -= rounded  # in [-0.5, 0.5)
        near = np.abs(y, out=y) >= self.edge
        rows, cols = np.nonzero(near)
        if rows.size:
            exact = bias[cols].astype(np.int64)
            for p in partials:
                exact += p[rows if p.shape[0] > 1 else 0, cols].astype(np.int64)
            rounded[rows, cols] = multiply_by_quantized_multiplier(exact, self.multiplier[cols],
                                                                   self.shift[cols], self.half_up)
        rounded += np.float32(self.zero_point)
        np.minimum(rounded, self.high, out=rounded)
        return np.maximum(rounded, self.low, out=rounded).astype(self.dtype)
