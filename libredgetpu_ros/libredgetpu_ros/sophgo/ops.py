"""TpuLang's float and integer ops with TpuLang's argument names and defaults (tpu-mlir 1.30.2).

Each function checks its arguments, infers the output shape, records one Top op with the attributes
TpuLang's converter writes (including the defaults it adds, ``dynweight_reorderd`` and friends) and returns
the output Tensor. Quantized-only ops live in :mod:`ops_quant`.
"""

from __future__ import annotations

from typing import Any

from libredgetpu_ros.sophgo import shapes
from libredgetpu_ros.sophgo.graph import Tensor, _as_list, current_graph
from libredgetpu_ros.sophgo.ir import F64, I64, SI32, AttrValue, TpuLangError, check_dtype

ROUND_MODES = ("HalfAwayFromZero", "HalfUp", "HalfDown", "HalfToEven", "HalfToOdd", "HalfTowardsZero",
               "TowardsZero", "Up", "Down")
_NO_RELU: dict[str, AttrValue] = {"relu_limit": F64(-1.0)}


def round_mode_convert(rmode: str, where: str = "round_mode") -> str:
    """``half_away_from_zero`` -> ``HalfAwayFromZero`` like TpuLang; error on an unknown mode."""
    mode = "".join(part.capitalize() for part in str(rmode).split("_"))
    if mode not in ROUND_MODES:
        raise TpuLangError(f"{where}: round_mode {rmode!r} is not one of "
                           f"{', '.join(m for m in ROUND_MODES)} (in snake_case)")
    return mode


def where_of(op: str, out_name: str | None) -> str:
    return f"{op} {out_name!r}" if out_name else op


def check_tensor(value: Any, where: str, arg: str, allow_none: bool = False) -> Tensor | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, Tensor):
        raise TpuLangError(f"{where}: {arg} must be a Tensor, got {type(value).__name__}")
    return value


def _name(out_name: str | None, op: str) -> str:
    if out_name is None:
        # TpuLang makes "<func>_<uuid4>"; a counter keeps our output reproducible.
        return f"{op}_{len(current_graph(op).ops)}"
    if not isinstance(out_name, str) or not out_name:
        raise TpuLangError(f"{op}: out_name must be a non-empty string, got {out_name!r}")
    return out_name


def _out(shape: list[int], dtype: str, name: str, quant: Any = None) -> Tensor:
    tensor = Tensor(shape, name=name, dtype=dtype)
    if quant is not None:
        tensor.copy_quantization(quant)
    return tensor


def _insert(kind: str, inputs: list[Tensor | None], output: Tensor, attrs: dict[str, AttrValue]) -> Tensor:
    return current_graph(kind).insert(kind, inputs, output, attrs)


# -- convolution --------------------------------------------------------------------------------------
def _conv_common(op: str, input: Any, weight: Any, bias: Any, stride: Any, dilation: Any, pad: Any,
                 group: int, out_name: str | None) -> tuple:
    where = where_of(op, out_name)
    x = check_tensor(input, where, "input")
    w = check_tensor(weight, where, "weight")
    b = check_tensor(bias, where, "bias", allow_none=True)
    stride = shapes.int_list([1, 1] if stride is None else stride, 2, where, "stride", 1)
    dilation = shapes.int_list([1, 1] if dilation is None else dilation, 2, where, "dilation", 1)
    pads = shapes.int_list([0, 0, 0, 0] if pad is None else pad, 4, where, "pad", 0)
    if not isinstance(group, int) or isinstance(group, bool):
        raise TpuLangError(f"{where}: group must be an int, got {group!r}")
    shape = shapes.conv_shape(x.shape, w.shape, stride, dilation, pads, group, where)
    if b is not None and b.shape != [w.shape[0]]:
        raise TpuLangError(f"{where}: bias has shape {b.shape}, expected [{w.shape[0]}] "
                           f"(one per output channel)")
    attrs = {"kernel_shape": w.shape[2:], "strides": stride, "dilations": dilation, "pads": pads,
             "do_relu": False, "group": I64(group), "dynweight_reorderd": False, "weight_is_coeff": I64(1),
             **_NO_RELU}
    return where, x, w, b, attrs, shape


def _out_dtype(out_dtype: str | None, default: str, where: str) -> str:
    dtype = default if out_dtype is None else out_dtype
    check_dtype(dtype, f"{where}: out_dtype")
    return dtype


def conv(input: Tensor, weight: Tensor, bias: Tensor = None, stride: list[int] | None = None,
         dilation: list[int] | None = None, pad: list[int] | None = None, group: int = 1,
         out_dtype: str | None = None,
         out_name: str | None = None) -> Tensor:
    where, x, w, b, attrs, shape = _conv_common("conv", input, weight, bias, stride, dilation, pad, group,
                                                out_name)
    for arg, t in (("input", x), ("weight", w), ("bias", b)):
        if t is not None and t.dtype not in ("float32", "float16"):
            raise TpuLangError(f"{where}: {arg} must be float32/float16 (use conv_int/conv_quant), "
                               f"got {t.dtype}")
    dtype = _out_dtype(out_dtype, x.dtype, where)
    return _insert("top.Conv", [x, w, b], _out(shape, dtype, _name(out_name, "conv")), attrs)


def _check_int(where: str, **tensors: Tensor | None) -> None:
    for arg, t in tensors.items():
        if t is not None and t.dtype in ("float32", "float16"):
            raise TpuLangError(f"{where}: {arg} must be an integer tensor, got {t.dtype}")


def _set_zero_point(t: Tensor, zero_point: Any, where: str) -> None:
    """conv_int/matmul_int: the zero point goes into the operand's quant type, its scale left unstated
    (printed 1.0 unless something states it), as TpuLang's ``input.quantization(zero_point=input_zp)``."""
    if zero_point is None:
        return
    t.quantization(None, zero_point, where)


def conv_int(input: Tensor, weight: Tensor, bias: Tensor = None, stride: list[int] | None = None,
             dilation: list[int] | None = None, pad: list[int] | None = None, group: int = 1,
             input_zp: Any = None,
             weight_zp: Any = None, out_dtype: str | None = None, out_name: str | None = None) -> Tensor:
    where, x, w, b, attrs, shape = _conv_common("conv_int", input, weight, bias, stride, dilation, pad, group,
                                                out_name)
    _check_int(where, input=x, weight=w, bias=b)
    # The zero points live only in the operand quant types (scale 1.0 unless the tensor has one).
    _set_zero_point(x, input_zp, f"{where} input_zp")
    _set_zero_point(w, weight_zp, f"{where} weight_zp")
    dtype = _out_dtype(out_dtype, "int32", where)
    return _insert("top.Conv", [x, w, b], _out(shape, dtype, _name(out_name, "conv_int")), attrs)


def conv_quant(input: Tensor, weight: Tensor, bias: Tensor = None, stride: list[int] | None = None,
               dilation: list[int] | None = None, pad: list[int] | None = None, group: int = 1,
               input_scale: Any = None,
               weight_scale: Any = None, output_scale: Any = None, input_zp: Any = None,
               weight_zp: Any = None,
               output_zp: Any = None, out_dtype: str | None = None, out_name: str | None = None) -> Tensor:
    where, x, w, b, attrs, shape = _conv_common("conv_quant", input, weight, bias, stride, dilation, pad,
                                                group, out_name)
    _check_int(where, input=x, weight=w, bias=b)
    if input_scale is None or weight_scale is None or output_scale is None:
        raise TpuLangError(f"{where}: input_scale, weight_scale and output_scale are required")
    x.quantization(input_scale, 0 if input_zp is None else input_zp, f"{where} input_scale/input_zp")
    w.quantization(weight_scale, 0 if weight_zp is None else weight_zp, f"{where} weight_scale/weight_zp")
    if w.quant.axis is not None and len(w.quant.scales) != w.shape[0]:
        raise TpuLangError(f"{where}: weight_scale has {len(w.quant.scales)} values, the weight has "
                           f"{w.shape[0]} output channels")
    out = _out(shape, _out_dtype(out_dtype, "int8", where), _name(out_name, "conv_quant"))
    out.quantization(output_scale, 0 if output_zp is None else output_zp, f"{where} output_scale")
    return _insert("top.Conv", [x, w, b], out, attrs)


# -- pooling --------------------------------------------------------------------------------------------
def _pool(kind: str, op: str, input: Any, kernel: Any, stride: Any, pad: Any, ceil_mode: bool, scale: Any,
          zero_point: Any, out_name: str | None, round_mode: str, first_round_mode: str,
          count_include_pad: bool) -> Tensor:
    where = where_of(op, out_name)
    x = check_tensor(input, where, "input")
    if len(x.shape) != 4:
        raise TpuLangError(f"{where}: input must be 4-D NCHW, got shape {x.shape}")
    # kernel=None: TpuLang prints kernel_shape = [] and tpu-mlir makes it a global pool (shapes.pool_window)
    kernel = [] if kernel is None else shapes.int_list(kernel, 2, where, "kernel", 1)
    stride = shapes.int_list([1, 1] if stride is None else stride, 2, where, "stride", 1)
    pads = shapes.int_list([0, 0, 0, 0] if pad is None else pad, 4, where, "pad", 0)
    shape = shapes.pool_shape(x.shape, *shapes.pool_window(x.shape, kernel, stride, pads), bool(ceil_mode),
                              where, kind)
    attrs = {"kernel_shape": kernel, "strides": stride, "pads": pads, "ceil_mode": bool(ceil_mode),
             "count_include_pad": bool(count_include_pad), "do_relu": False, "is_adaptive": False,
             "keepdims": True, "pad_value": I64(0), "round_mode": round_mode_convert(round_mode, where),
             "first_round_mode": round_mode_convert(first_round_mode, where), **_NO_RELU}
    # TpuLang: the output is a new, unquantized tensor of the input's dtype; scale=[in, out] (and
    # zero_point=[in, out], default [0, 0]) quantize the input and the output per tensor. A zero_point
    # without a scale is ignored, as TpuLang does.
    out = _out(shape, x.dtype, _name(out_name, op))
    if scale is not None:
        scales = _pair(scale, where, "scale")
        zps = [0, 0] if zero_point is None else _pair(zero_point, where, "zero_point")
        x.quantization(scales[0], zps[0], f"{where} scale[0]/zero_point[0]")
        out.quantization(scales[1], zps[1], f"{where} scale[1]/zero_point[1]")
    return _insert(kind, [x], out, attrs)


def _pair(value: Any, where: str, arg: str) -> list:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise TpuLangError(f"{where}: {arg} must be [input, output] (two values), got {value!r}")
    return list(value)


def maxpool2d(input: Tensor, kernel: Any = None, stride: Any = None, pad: Any = None, ceil_mode: bool = False,
              scale: list[float] | None = None, zero_point: list[int] | None = None,
              out_name: str | None = None,
              round_mode: str = "half_away_from_zero") -> Tensor:
    return _pool("top.MaxPool", "maxpool2d", input, kernel, stride, pad, ceil_mode, scale, zero_point,
                 out_name,
                 round_mode, "half_away_from_zero", False)


def avgpool2d(input: Tensor, kernel: Any = None, stride: Any = None, pad: Any = None, ceil_mode: bool = False,
              scale: list[float] | None = None, zero_point: list[int] | None = None,
              out_name: str | None = None,
              count_include_pad: bool = False, round_mode: str = "half_away_from_zero",
              first_round_mode: str = "half_away_from_zero") -> Tensor:
    return _pool("top.AvgPool", "avgpool2d", input, kernel, stride, pad, ceil_mode, scale, zero_point,
                 out_name,
                 round_mode, first_round_mode, count_include_pad)


# -- matmul -----------------------------------------------------------------------------------------------
def _matmul(op: str, input: Any, right: Any, bias: Any, input_transpose: bool, right_transpose: bool,
            output_transpose: bool, keep_dims: bool, do_relu: bool, relu_limit: float,
            out_name: str | None) -> tuple[str, Tensor, Tensor, Tensor | None, dict, list[int]]:
    where = where_of(op, out_name)
    x = check_tensor(input, where, "input")
    r = check_tensor(right, where, "right")
    b = check_tensor(bias, where, "bias", allow_none=True)
    shape = shapes.matmul_shape(x.shape, r.shape, bool(input_transpose), bool(right_transpose),
                                bool(output_transpose), where)
    n = shape[-2] if output_transpose else shape[-1]
    if b is not None and b.shape != [n]:
        raise TpuLangError(f"{where}: bias has shape {b.shape}, expected [{n}]")
    attrs = {"do_relu": bool(do_relu), "dq_type": "NONE", "hdim_is_batch": False, "is_lora": False,
             "keep_dims": bool(keep_dims), "left_transpose": bool(input_transpose),
             "output_transpose": bool(output_transpose), "q_group_size": I64(0),
             "relu_limit": F64(float(relu_limit)), "right_transpose": bool(right_transpose)}
    return where, x, r, b, attrs, shape


def matmul(input: Tensor, right: Tensor, bias: Tensor = None, input_transpose: bool = False,
           right_transpose: bool = False, output_transpose: bool = False, keep_dims: bool = True,
           do_relu: bool = False, relu_limit: float = -1.0, out_dtype: str | None = None,
           out_name: str | None = None) -> Tensor:
    where, x, r, b, attrs, shape = _matmul("matmul", input, right, bias, input_transpose, right_transpose,
                                           output_transpose, keep_dims, do_relu, relu_limit, out_name)
    for arg, t in (("input", x), ("right", r), ("bias", b)):
        if t is not None and t.dtype not in ("float32", "float16"):
            raise TpuLangError(f"{where}: {arg} must be float32/float16 (use matmul_int), got {t.dtype}")
    dtype = _out_dtype(out_dtype, x.dtype, where)
    return _insert("top.MatMul", [x, r, b], _out(shape, dtype, _name(out_name, "matmul")), attrs)


def matmul_int(input: Tensor, right: Tensor, bias: Tensor = None, input_transpose: bool = False,
               right_transpose: bool = False, output_transpose: bool = False, keep_dims: bool = True,
               input_zp: Any = None, right_zp: Any = None, do_relu: bool = False, relu_limit: float = -1.0,
               out_dtype: str | None = None, out_name: str | None = None) -> Tensor:
    where, x, r, b, attrs, shape = _matmul("matmul_int", input, right, bias, input_transpose, right_transpose,
                                           output_transpose, keep_dims, do_relu, relu_limit, out_name)
    _check_int(where, input=x, right=r, bias=b)
    _set_zero_point(x, input_zp, f"{where} input_zp")
    _set_zero_point(r, right_zp, f"{where} right_zp")
    dtype = _out_dtype(out_dtype, "int32", where)
    return _insert("top.MatMul", [x, r, b], _out(shape, dtype, _name(out_name, "matmul_int")), attrs)


# -- element-wise and shape ops ------------------------------------------------------------------------
def relu(input: Tensor, out_name: str | None = None) -> Tensor:
    where = where_of("relu", out_name)
    x = check_tensor(input, where, "input")
    return _insert("top.Relu", [x], _out(list(x.shape), x.dtype, _name(out_name, "relu")),
                   dict(_NO_RELU))


def softmax(input: Tensor, axis: int, out_name: str | None = None) -> Tensor:
    where = where_of("softmax", out_name)
    x = check_tensor(input, where, "input")
    if x.dtype not in ("float32", "float16"):
        raise TpuLangError(f"{where}: input must be float32/float16 (use softmax_int), got {x.dtype}")
    shapes.axis_in_range(int(axis), len(x.shape), where)
    attrs = {"axis": SI32(int(axis)), "beta": F64(1.0), "log": False, "round_mode": "HalfAwayFromZero"}
    return _insert("top.Softmax", [x], _out(list(x.shape), x.dtype, _name(out_name, "softmax")), attrs)


def add(tensor_i0: Any, tensor_i1: Any, scale: list[float] | None = None, zero_point: list[int] | None = None,
        out_dtype: str | None = None, out_name: str | None = None) -> Tensor:
    where = where_of("add", out_name)
    a = check_tensor(tensor_i0, where, "tensor_i0 (scalars are not supported here)")
    b = check_tensor(tensor_i1, where, "tensor_i1 (scalars are not supported here)")
    if a.dtype != b.dtype:
        raise TpuLangError(f"{where}: tensor_i0 is {a.dtype} but tensor_i1 is {b.dtype}")
    shape = shapes.broadcast_shape(a.shape, b.shape, where)
    out = _out(shape, _out_dtype(out_dtype, a.dtype, where), _name(out_name, "add"))
    if scale is not None:
        scales = list(scale)
        zps = [0, 0, 0] if zero_point is None else list(zero_point)
        if len(scales) != 3 or len(zps) != 3:
            raise TpuLangError(f"{where}: scale and zero_point must list [tensor_i0, tensor_i1, output] "
                               f"values")
        a.quantization(scales[0], zps[0], f"{where} scale[0]")
        b.quantization(scales[1], zps[1], f"{where} scale[1]")
        out.quantization(scales[2], zps[2], f"{where} scale[2]")
    attrs = {"do_relu": False, "is_scalar": False, **_NO_RELU}
    return _insert("top.Add", [a, b], out, attrs)


def concat(inputs: list[Tensor], scales: Any = None, zero_points: Any = None, axis: int = 0,
           out_name: str | None = None, dtype: str = "float32",
           round_mode: str = "half_away_from_zero") -> Tensor:
    where = where_of("concat", out_name)
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise TpuLangError(f"{where}: inputs must be a non-empty list of Tensors")
    tensors = [check_tensor(t, where, f"inputs[{i}]") for i, t in enumerate(inputs)]
    if len({t.dtype for t in tensors}) > 1:
        raise TpuLangError(f"{where}: inputs mix dtypes {[t.dtype for t in tensors]}")
    shape = shapes.concat_shape([t.shape for t in tensors], int(axis), where)
    # TpuLang: scales / zero_points list every input then the result; an input takes its pair (set or
    # check), the result is unquantized unless ``dtype`` is not "float32" (then it takes the last pair).
    pairs = []
    for arg, values in (("scales", scales), ("zero_points", zero_points)):
        values = [None] * (len(tensors) + 1) if values is None else _as_list(values)
        if len(values) != len(tensors) + 1:
            raise TpuLangError(f"{where}: {arg} needs {len(tensors) + 1} values (each input, then the "
                               f"result), got {len(values)}")
        pairs.append(values)
    for i, t in enumerate(tensors):
        t.quantization(pairs[0][i], pairs[1][i], f"{where} scales/zero_points[{i}]")
    attrs = {"axis": SI32(int(axis)), "do_relu": False, "only_merge": False,
             "round_mode": round_mode_convert(round_mode, where), **_NO_RELU}
    out = _out(shape, tensors[0].dtype, _name(out_name, "concat"))
    if dtype != "float32":
        out.quantization(pairs[0][-1], pairs[1][-1], f"{where} scales/zero_points[-1]")
    return _insert("top.Concat", list(tensors), out, attrs)


def reshape(tensor: Tensor, new_shape: Any, out_name: str | None = None) -> Tensor:
    where = where_of("reshape", out_name)
    x = check_tensor(tensor, where, "tensor")
    if isinstance(new_shape, Tensor):
        raise TpuLangError(f"{where}: a Tensor new_shape (dynamic reshape) is not supported")
    given = shapes.int_list(new_shape, len(list(new_shape)), where, "new_shape", -1)
    shape = shapes.reshape_shape(x.shape, given, where)
    attrs = {"shape": given, "flatten_start_dim": I64(-1)}
    return _insert("top.Reshape", [x], _out(shape, x.dtype, _name(out_name, "reshape")), attrs)


def permute(input: Tensor, order: Any, out_name: str | None = None) -> Tensor:
    where = where_of("permute", out_name)
    x = check_tensor(input, where, "input")
    order = shapes.int_list(order, len(list(order)), where, "order", 0)
    shape = shapes.permute_shape(x.shape, order, where)
    return _insert("top.Permute", [x], _out(shape, x.dtype, _name(out_name, "permute")),
                   {"order": order})
