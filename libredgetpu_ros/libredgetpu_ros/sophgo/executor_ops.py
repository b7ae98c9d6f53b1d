"""Executor handlers for the pools, element-wise and shape ops (registered into :mod:`executor`)."""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.sophgo import kernels, shapes
from libredgetpu_ros.sophgo.ir import OpNode, TpuLangError
from libredgetpu_ros.sophgo.op_registry import RunState, is_float, register, spatial, where_of


def _pool_geometry(node: OpNode, x: np.ndarray) -> tuple[list[int], list[int], list[int], tuple, tuple]:
    where = where_of(node)
    stride, pads, kernel = spatial(node)
    if len(x.shape) != 4:
        raise TpuLangError(f"{where}: input must be 4-D NCHW, got shape {list(x.shape)}")
    kernel, stride, pads = shapes.pool_window(x.shape, kernel, stride, pads)
    ceil_mode = bool(node.attrs.get("ceil_mode", False))
    out = shapes.pool_shape(x.shape, kernel, stride, pads, ceil_mode, where, node.kind)
    out_hw = (out[2], out[3])
    full = shapes.pool_pads(x.shape, kernel, stride, pads, ceil_mode)
    extra = (full[2] - pads[2], full[3] - pads[3])
    return kernel, stride, pads, extra, out_hw


@register("top.MaxPool")
def _maxpool(run: RunState, node: OpNode, args: list) -> np.ndarray:
    (x,) = args
    kernel, stride, pads, extra, out_hw = _pool_geometry(node, x)
    # Padded cells never win: pad with the lowest finite value of the dtype, which is also what a window
    # wholly in ceil_mode padding gives (-3.4028235e+38 for float32 on tpu-mlir's bm1684x cmodel).
    low = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    y = kernels.pool_taps(x, kernel, stride, pads, extra, out_hw, low, "max")
    # tpu-mlir 1.30.2 lowers a quantized maxpool to a plain max of the raw integers whatever the result's
    # scale and zero point (scale=[in, out] included): its interpreter and the bm1684x simulator give the
    # input's maximum unchanged, so this does too (no requantization).
    return y.astype(node.result.np_dtype)


@register("top.AvgPool")
def _avgpool(run: RunState, node: OpNode, args: list) -> np.ndarray:
    (x,) = args
    kernel, stride, pads, extra, out_hw = _pool_geometry(node, x)
    counts = kernels.pool_counts(x.shape[2:], kernel, stride, pads, extra, out_hw,
                                 bool(node.attrs.get("count_include_pad", False)))
    (tx,) = run.operand_types(node)
    # A window wholly in the ceil_mode padding counts no cell: tpu-mlir gives 0 there (the real value 0).
    empty = counts == 0
    counts = np.maximum(counts, 1)
    if is_float(tx):
        sums = kernels.pool_taps(x.astype(np.float32), kernel, stride, pads, extra, out_hw, 0, "sum")
        return np.where(empty, 0, sums / counts.astype(np.float32)).astype(node.result.np_dtype)
    mode = node.attrs.get("round_mode", "HalfAwayFromZero")
    out_q, in_q = node.result.quant, tx.quant
    if (in_q is not None and in_q.axis is not None) or (out_q is not None and out_q.axis is not None):
        raise TpuLangError(f"{where_of(node)}: a per-channel quantized avgpool is not supported")
    sums = kernels.pool_taps(x.astype(np.int64), kernel, stride, pads, extra, out_hw, 0, "sum")
    if in_q is not None and out_q is not None:
        geometry = (kernel, stride, pads, extra)
        return _chip_quantized_avgpool(run, node, x.shape, in_q, out_q, sums, empty, geometry, mode)
    if node.attrs.get("count_include_pad") and in_q is not None and in_q.zero_points[0]:
        # Counted pad cells hold the real value 0, i.e. the zero point.
        real_cells = kernels.pool_counts(x.shape[2:], kernel, stride, pads, extra, out_hw, False)
        sums = sums + in_q.zero_points[0] * (counts - real_cells)
    if out_q is not None:
        raise TpuLangError(f"{where_of(node)}: avgpool from a plain integer tensor to a quantized one is not "
                           f"supported")
    zero = in_q.zero_points[0] if in_q is not None else 0  # the real value 0 (raw values kept)
    # TpuLang's unquantized result: the raw values' mean
    mean = np.where(empty, zero, kernels.round_div(sums, counts, mode))
    return kernels.saturate(mean, node.result.np_dtype)


def _refuse_fused_requant_relu(run: RunState, node: OpNode) -> None:
    """requant_int -> relu -> this padded count_include_pad=False avgpool: tpu-mlir 1.30.2's bm1684x
    deployment gives other numbers than the same graph with the relu also an output (which equal ours),
    i.e. its fusion of the three is wrong (random seed 6's rand_q21; conv_quant or a graph input before the
    relu, count_include_pad, or no padding: all equal). Refused rather than run unlike the chip."""
    relu = run.producer(node.operands[0])
    if relu is None or relu.kind != "top.Relu" or relu.name in run.module.outputs:
        return
    source = run.producer(relu.operands[0])
    if source is not None and source.kind == "top.RequantInt":
        raise TpuLangError(f"{where_of(node)}: a padded count_include_pad=False avgpool of relu("
                           f"{source.name!r}, a requant_int) is not supported: tpu-mlir 1.30.2 deploys that "
                           f"chain wrong on bm1684x (make the relu a graph output too, or use "
                           f"count_include_pad=True)")


def _chip_quantized_avgpool(run: RunState, node: OpNode, shape: tuple, in_q, out_q, sums: np.ndarray,
                            empty: np.ndarray, geometry: tuple, mode: str) -> np.ndarray:
    """A quantized avgpool as tpu-mlir 1.30.2 deploys it to bm1684x (measured on its simulator: 60 random
    pools, every value; see docs/sophgo.md). ``sums`` holds the pad cells as raw 0.

    * ``count_include_pad=False`` on a padded window grid (pads, ceil_mode padding, or a stride leaving a
      remainder, which the backend pads too): the raw integers' mean over the real cells, rounded with
      ``round_mode``; the scales and zero points are ignored;
    * otherwise ``round(sum * s_in / (kh * kw * s_out) + zp_out - s_in / s_out * zp_in)`` (tpu-mlir's
      ``scale`` and ``offset`` attributes, in float32), every pad cell a raw 0, not the zero point."""
    kernel, stride, pads, extra = geometry
    if in_q.axis is not None or out_q.axis is not None:
        raise TpuLangError(f"{where_of(node)}: a per-channel quantized avgpool is not supported")
    padded = any(pads) or any(extra) or any(
        (shape[2 + i] + pads[i] + pads[i + 2] + extra[i] - kernel[i]) % stride[i] for i in (0, 1))
    if padded and not node.attrs.get("count_include_pad", False):
        _refuse_fused_requant_relu(run, node)
        real = kernels.pool_counts(shape[2:], kernel, stride, pads, extra, sums.shape[2:], False)
        mean = kernels.round_div(sums, np.maximum(real, 1), mode)
        return kernels.saturate(np.where(empty, out_q.zero_points[0], mean), node.result.np_dtype)
    # tpu-mlir's double attributes, then float32 arithmetic on the chip (a float64 product rounds some
    # near-ties the other way: 30 * 0.1781 / 0.0702 - 17.61 is 58.5 in float64, 58.500004 on the chip)
    scale = np.float32(in_q.scales[0] / (kernel[0] * kernel[1] * out_q.scales[0]))
    offset = np.float32(out_q.zero_points[0] - in_q.scales[0] / out_q.scales[0] * in_q.zero_points[0])
    value = sums.astype(np.float32) * scale + offset
    return kernels.saturate(kernels.round_float(value.astype(np.float64), mode), node.result.np_dtype)


@register("top.Relu")
def _relu(run: RunState, node: OpNode, args: list) -> np.ndarray:
    (x,) = args
    limit = getattr(node.attrs.get("relu_limit"), "value", -1.0)
    # Quantized relu works on the raw integers: max(q, 0), not max(q, zero_point) (observed in tpu-mlir).
    y = np.maximum(x, np.zeros((), dtype=x.dtype))
    if limit >= 0:
        # A limit beyond the dtype's range clips nothing; cast as is it would wrap (300 -> 44 in int8).
        top = np.iinfo(x.dtype).max if x.dtype.kind in "iu" else np.finfo(x.dtype).max
        y = np.minimum(y, np.asarray(min(limit, top)).astype(x.dtype))
    return y


@register("top.Softmax")
def _softmax(run: RunState, node: OpNode, args: list) -> np.ndarray:
    (x,) = args
    if not is_float(node.result):
        raise TpuLangError(f"{where_of(node)}: only float softmax is supported")
    axis = shapes.axis_in_range(getattr(node.attrs.get("axis"), "value", 1), x.ndim, where_of(node))
    beta = getattr(node.attrs.get("beta"), "value", 1.0)
    z = (x.astype(np.float64) - x.max(axis=axis, keepdims=True)) * beta
    e = np.exp(z)
    y = e / e.sum(axis=axis, keepdims=True)
    if node.attrs.get("log"):
        y = z - np.log(e.sum(axis=axis, keepdims=True))
    return y.astype(node.result.np_dtype)


@register("top.Add")
def _add(run: RunState, node: OpNode, args: list) -> np.ndarray:
    where = where_of(node)
    a, b = args
    ta, tb = run.operand_types(node)
    shapes.broadcast_shape(a.shape, b.shape, where)
    out_t = node.result
    if is_float(out_t):
        y = a.astype(np.float32) + b.astype(np.float32)
    elif out_t.quant is None and ta.quant is None and tb.quant is None:
        return kernels.saturate(a.astype(np.int64) + b.astype(np.int64), out_t.np_dtype)
    else:
        if any(t.quant is None or t.quant.axis is not None for t in (ta, tb, out_t)):
            raise TpuLangError(f"{where}: quantized add needs per-tensor scales on both inputs and the "
                               f"result")
        real = sum((v.astype(np.float64) - t.quant.zero_points[0]) * t.quant.scales[0]
                   for v, t in ((a, ta), (b, tb)))
        q = kernels.round_float(real / out_t.quant.scales[0], "HalfAwayFromZero") + out_t.quant.zero_points[0]
        return kernels.saturate(q, out_t.np_dtype)
    if node.attrs.get("do_relu"):
        y = np.maximum(y, 0)
    return y.astype(out_t.np_dtype)


@register("top.Concat")
def _concat(run: RunState, node: OpNode, args: list) -> np.ndarray:
    where = where_of(node)
    axis = getattr(node.attrs.get("axis"), "value", 0)
    shapes.concat_shape([a.shape for a in args], axis, where)
    out_q = node.result.quant
    types = run.operand_types(node)
    if out_q is None or all(t.quant == out_q for t in types):
        # TpuLang's unquantized result (no dtype given): tpu-mlir concatenates the raw integers whatever
        # the inputs' scales (its interpreter and the bm1684x simulator alike).
        return np.concatenate(args, axis=axis).astype(node.result.np_dtype)
    if out_q.axis is not None or any(t.quant is None or t.quant.axis is not None for t in types):
        raise TpuLangError(f"{where}: a quantized concat needs per-tensor scales on every input and the "
                           f"result")
    # A quantized result: the bm1684x simulator moves each input to the result's scale as
    # round(q * s_in / s_out) + zp_out, the input's zero point NOT subtracted (measured, int8 and uint8).
    mode = node.attrs.get("round_mode", "HalfAwayFromZero")
    parts = []
    for value, t in zip(args, types, strict=True):
        if t.quant == out_q:
            parts.append(value.astype(np.int64))
            continue
        scaled = kernels.round_float(value.astype(np.float64) * (t.quant.scales[0] / out_q.scales[0]), mode)
        parts.append(scaled + out_q.zero_points[0])
    return kernels.saturate(np.concatenate(parts, axis=axis), node.result.np_dtype)


@register("top.Reshape")
def _reshape(run: RunState, node: OpNode, args: list) -> np.ndarray:
    (x,) = args
    where = where_of(node)
    target = node.attrs.get("shape")
    if not isinstance(target, list):
        raise TpuLangError(f"{where}: shape attribute is required")
    return x.reshape(shapes.reshape_shape(x.shape, target, where))


@register("top.Permute")
def _permute(run: RunState, node: OpNode, args: list) -> np.ndarray:
    (x,) = args
    order = node.attrs.get("order")
    if not isinstance(order, list):
        raise TpuLangError(f"{where_of(node)}: order attribute is required")
    shapes.permute_shape(x.shape, order, where_of(node))
    return np.ascontiguousarray(np.transpose(x, order))
