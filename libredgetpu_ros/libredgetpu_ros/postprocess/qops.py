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


def run_op(model: Any, op: Any, args: list[np.ndarray]) -> np.ndarray:
    """Evaluate one small quantized op (RESHAPE, CONCATENATION, LOGISTIC, DEQUANTIZE, QUANTIZE)."""
    out_tensor = model.tensors[op.outputs[0]]
    name = op.opcode_name
    if name in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
        return args[0].reshape(out_tensor.shape)
    if name == "CONCATENATION":
        if op.builtin_options.get("fused_activation_function", "NONE") != "NONE":
            raise ModelFormatError(f"{model_label(model)}: fused activation on CONCATENATION not supported")
        out_q = _quant(model, op.outputs[0]) if out_tensor.dtype.kind != "f" else None
        parts = [a if out_q is None else _requantize_float(a, _quant(model, i), out_q, out_tensor.dtype)
                 for a, i in zip(args, op.inputs, strict=True)]
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
                                     shift: np.ndarray | int) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier on int64 arrays (``multiplier``/``shift`` scalars or broadcast
    per output channel): SaturatingRoundingDoublingHighMul then RoundingDivideByPOT."""
    multiplier = np.asarray(multiplier, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    if shift.ndim == 0:
        left, right = max(int(shift), 0), max(-int(shift), 0)
    else:
        left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    prod = (x.astype(np.int64) << left) * multiplier
    negative = prod < 0
    # (prod + nudge) / 2^31 with C++'s truncating division: floor-shift after adding 2^31 - 1 to negatives.
    nudged = prod + (1 << 30) - negative * ((1 << 31) - 1)
    high = (nudged + (nudged < 0) * ((1 << 31) - 1)) >> 31
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + ((high & mask) > threshold)


def requantize(q: np.ndarray, in_q: tuple[np.float32, int], out_q: tuple[np.float32, int],
               dtype: np.dtype) -> np.ndarray:
    """QUANTIZE between two integer types: integer rescale with TFLite's fixed-point multiplier."""
    multiplier, shift = quantize_multiplier(float(in_q[0]) / float(out_q[0]))
    value = multiply_by_quantized_multiplier(q.astype(np.int64) - in_q[1], multiplier, shift) + out_q[1]
    info = np.iinfo(dtype)
    return np.clip(value, info.min, info.max).astype(dtype)
