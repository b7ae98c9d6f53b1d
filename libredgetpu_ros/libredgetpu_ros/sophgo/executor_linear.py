"""Executor handlers of the arithmetic ops: Conv, MatMul, RequantInt, RequantFp and Cast.

Quantized tensors travel as their raw storage integers. Integer rules (checked against the conformance
references where one exists, see docs/sophgo.md):

* conv/matmul with integer output: ``acc = op(x - zp_x, w - zp_w) + bias`` exact, saturated to the output
  dtype; with a quantized output (conv_quant): ``sat(round_half_away(acc * s_in * s_w[oc] / s_out) + zp)``
  (the per-channel weight scales index output channels although the type says axis 1);
* RequantInt MultiplierShift: ``sat(round(x * m / 2**rshift) + zp_out)`` per channel along ``rq_axis``;
* RequantFp: ``sat(round(float32(x) * float32(scale) + offset))``; Cast: dequantize / quantize.
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.sophgo import kernels, shapes
from libredgetpu_ros.sophgo.ir import OpNode, TensorType, TpuLangError
from libredgetpu_ros.sophgo.op_registry import RunState, is_float, register, spatial, where_of, zero_point


@register("top.Conv")
def _conv(run: RunState, node: OpNode, args: list) -> np.ndarray:
    where = where_of(node)
    x, w, b = [*args, None][:3]
    tx, tw = run.operand_types(node)[:2]
    stride, pads, kernel = spatial(node)
    dilation = shapes.int_list(node.attrs.get("dilations", [1, 1]), 2, where, "dilations", 1)
    group = node.attrs.get("group")
    group = getattr(group, "value", 1)
    out_shape = shapes.conv_shape(x.shape, w.shape, stride, dilation, pads, group, where)
    if kernel and list(w.shape[2:]) != kernel:
        raise TpuLangError(f"{where}: kernel_shape {kernel} does not match the weight {list(w.shape)}")
    if b is not None and b.size != w.shape[0]:
        raise TpuLangError(f"{where}: bias has {b.size} values for {w.shape[0]} output channels")
    hw = (out_shape[2], out_shape[3])
    out_t = node.result
    if is_float(tx):
        if not (is_float(tw) and is_float(out_t)):
            raise TpuLangError(f"{where}: float input needs a float weight and result")
        y = kernels.conv2d(x.astype(np.float32), w.astype(np.float32), stride, dilation, pads, group, hw)
        if b is not None:
            y += b.reshape(1, -1, 1, 1).astype(np.float32)
        return y.astype(out_t.np_dtype)
    if is_float(tw):
        raise TpuLangError(f"{where}: integer input needs an integer weight")
    # Padding must read as the zero point, i.e. 0 after the shift: the kernel pads the shifted input.
    w_zp = (zero_point(tw, 4) if tw.quant is None or tw.quant.axis is None
            else _per_oc(tw.quant.zero_points, w.shape[0], where).reshape(-1, 1, 1, 1))
    acc = kernels.conv2d_int(x, zero_point(tx, 4), w, w_zp, stride, dilation, pads, group, hw)
    if b is not None:
        acc += b.reshape(1, -1, 1, 1).astype(np.int64)
    return _integer_result(acc, node, tx, tw, where, channel_axis=1)


def _per_oc(values: tuple, count: int, where: str) -> np.ndarray:
    if len(values) == 1:
        return np.full(count, values[0])
    if len(values) != count:
        raise TpuLangError(f"{where}: {len(values)} per-channel quant values for {count} output channels")
    return np.asarray(values)


def _integer_result(acc: np.ndarray, node: OpNode, tx: TensorType, tw: TensorType, where: str,
                    channel_axis: int) -> np.ndarray:
    out_t = node.result
    if is_float(out_t):
        raise TpuLangError(f"{where}: integer operands with a float result are not supported")
    if out_t.quant is None:
        return kernels.saturate(acc, out_t.np_dtype)
    if tx.quant is None or tw.quant is None or tx.quant.axis is not None:
        raise TpuLangError(f"{where}: a quantized result needs per-tensor input and weight scales")
    count = acc.shape[channel_axis]
    shape = [1] * acc.ndim
    shape[channel_axis] = count
    s_w = _per_oc(tw.quant.scales, count, where).astype(np.float64).reshape(shape)
    s_out, zp_out = out_t.quant.scales[0], out_t.quant.zero_points[0]
    if channel_axis == 1:
        # tpu-mlir lowers a quantized conv to an int32 conv + a TFLite_LShift requant whose per-channel
        # multiplier/shift come from QuantizeMultiplier(s_in * s_w[oc] / s_out), the chip's arithmetic
        # (a float product rounds differently about once in 240 values).
        pairs = [kernels.quantize_multiplier(tx.quant.scales[0] * float(s) / s_out) for s in s_w.reshape(-1)]
        m = np.asarray([p[0] for p in pairs], dtype=np.int64).reshape(shape)
        sh = np.asarray([p[1] for p in pairs], dtype=np.int64).reshape(shape)
        scaled = kernels.multiply_by_quantized_multiplier(acc, m, sh, "HalfAwayFromZero")
        return kernels.saturate(scaled + zp_out, out_t.np_dtype)
    real = acc.astype(np.float64) * (tx.quant.scales[0] * s_w / s_out)
    return kernels.saturate(kernels.round_float(real, "HalfAwayFromZero") + zp_out, out_t.np_dtype)


@register("top.MatMul")
def _matmul(run: RunState, node: OpNode, args: list) -> np.ndarray:
    where = where_of(node)
    a, b, bias = [*args, None][:3]
    ta, tb = run.operand_types(node)[:2]
    attrs = node.attrs
    left_t, right_t, out_t_flag = (bool(attrs.get(k, False)) for k in
                                   ("left_transpose", "right_transpose", "output_transpose"))
    shapes.matmul_shape(a.shape, b.shape, left_t, right_t, out_t_flag, where)
    if left_t:
        a = np.swapaxes(a, -1, -2)
    if right_t:
        b = np.swapaxes(b, -1, -2)
    n = b.shape[-1]
    if bias is not None and bias.size != n:
        raise TpuLangError(f"{where}: bias has {bias.size} values for {n} output columns")
    if is_float(ta):
        y = np.matmul(a.astype(np.float32), b.astype(np.float32))
        if bias is not None:
            y += bias.reshape(-1).astype(np.float32)
        if attrs.get("do_relu"):
            limit = getattr(attrs.get("relu_limit"), "value", -1.0)
            y = np.maximum(y, 0) if limit < 0 else np.clip(y, 0, limit)
        y = np.swapaxes(y, -1, -2) if out_t_flag else y
        return y.astype(node.result.np_dtype)
    if is_float(tb):
        raise TpuLangError(f"{where}: integer input needs an integer right operand")
    acc = kernels.matmul_int(a, zero_point(ta, a.ndim), b, zero_point(tb, b.ndim))
    if bias is not None:
        acc += bias.reshape(-1).astype(np.int64)
    if attrs.get("do_relu"):
        acc = np.maximum(acc, 0)
    acc = np.swapaxes(acc, -1, -2) if out_t_flag else acc
    return _integer_result(acc, node, ta, tb, where, channel_axis=acc.ndim - 1)


@register("top.RequantInt")
def _requant_int(run: RunState, node: OpNode, args: list) -> np.ndarray:
    where = where_of(node)
    (x,) = args
    mode = node.attrs.get("quant_mode")
    if mode != "MultiplierShift":
        raise TpuLangError(f"{where}: quant_mode {mode!r} is not supported by this executor "
                           f"(MultiplierShift is)")
    axis = shapes.axis_in_range(getattr(node.attrs.get("rq_axis"), "value", 1), x.ndim, where)
    muls = np.asarray(node.attrs.get("multiplier", []), dtype=np.int64)
    rshift = np.asarray(node.attrs.get("rshift", []), dtype=np.int64)
    for name, values in (("multiplier", muls), ("rshift", rshift)):
        if values.size not in (1, x.shape[axis]):
            raise TpuLangError(f"{where}: {name} has {values.size} values, axis {axis} has {x.shape[axis]}")
    if np.abs(rshift).max(initial=0) > 62 or np.abs(muls).max(initial=0) >= 1 << 31:
        raise TpuLangError(f"{where}: multiplier must fit int32 and |rshift| <= 62")
    shape = [1] * x.ndim
    shape[axis] = -1
    m = muls.reshape(shape) if muls.size > 1 else muls.reshape(())
    r = rshift.reshape(shape) if rshift.size > 1 else rshift.reshape(())
    product = x.astype(np.int64) * m
    right = kernels.round_div(product, np.left_shift(1, np.maximum(r, 0)), node.attrs.get("round_mode"))
    # A left shift saturates the (at most 32-bit) output long before int64 overflows: clip the product to
    # 2**(62 - shift) first, which keeps every result that does not saturate exact.
    left = np.maximum(-r, 0)
    bound = np.left_shift(np.int64(1), 62 - left)
    value = np.where(r < 0, np.clip(product, -bound, bound) << left, right)
    zp = zero_point(node.result, x.ndim)
    return kernels.saturate(value + zp, node.result.np_dtype)


@register("top.RequantFp")
def _requant_fp(run: RunState, node: OpNode, args: list) -> np.ndarray:
    where = where_of(node)
    (x,) = args
    scale = np.asarray([getattr(s, "value", s) for s in node.attrs.get("scale", [])], dtype=np.float32)
    offset = np.asarray([getattr(o, "value", o) for o in node.attrs.get("offset", [])], dtype=np.float64)
    if scale.size == 0 or offset.size == 0:
        raise TpuLangError(f"{where}: scale and offset attributes are required")
    channels = x.shape[1] if x.ndim > 1 else 1
    shape = [1] * x.ndim
    if x.ndim > 1:
        shape[1] = -1
    for name, values in (("scale", scale), ("offset", offset)):
        if values.size not in (1, channels):
            raise TpuLangError(f"{where}: {name} has {values.size} values for {channels} channels")
    scale = scale.reshape(shape) if scale.size > 1 else scale.reshape(())
    offset = offset.reshape(shape) if offset.size > 1 else offset.reshape(())
    v = np.multiply(x.astype(np.float32), scale, dtype=np.float32).astype(np.float64) + offset
    return kernels.saturate(kernels.round_float(v, node.attrs.get("round_mode")), node.result.np_dtype)


@register("top.Cast")
def _cast(run: RunState, node: OpNode, args: list) -> np.ndarray:
    where = where_of(node)
    (x,) = args
    (tx,) = run.operand_types(node)
    out_t = node.result
    if not is_float(tx) and is_float(out_t):
        if tx.quant is None:
            return x.astype(out_t.np_dtype)
        scale = tx.quant.scale_array(x.ndim).astype(np.float32)
        zp = tx.quant.zp_array(x.ndim).astype(np.float32)
        return ((x.astype(np.float32) - zp) * scale).astype(out_t.np_dtype)
    if is_float(tx) and not is_float(out_t):
        if out_t.quant is None:
            raise TpuLangError(f"{where}: a float -> integer cast needs a quantized result type")
        scaled = x.astype(np.float64) / out_t.quant.scale_array(x.ndim)
        rounded = kernels.round_float(scaled, node.attrs.get("round_mode", "HalfAwayFromZero"))
        return kernels.saturate(rounded + out_t.quant.zp_array(x.ndim), out_t.np_dtype)
    raise TpuLangError(f"{where}: only quantized <-> float casts are supported")

