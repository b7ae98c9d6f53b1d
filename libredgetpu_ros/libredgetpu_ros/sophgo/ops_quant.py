"""TpuLang's requantization and casting ops.

``requant_int`` is checked against tpu-mlir's output (negated shift, offset only in the result type).
``requant_fp``, ``dequant_int_to_fp`` and ``requant_fp_to_int`` follow TpuLang's source (``top.RequantFp`` /
``top.Cast``) but no conformance case covers their printed attributes.
"""

from __future__ import annotations

from typing import Any

from libredgetpu_ros.sophgo import shapes
from libredgetpu_ros.sophgo.graph import Tensor, _as_list
from libredgetpu_ros.sophgo.ir import F64, SI32, TpuLangError
from libredgetpu_ros.sophgo.ops import (
    _insert,
    _name,
    _out,
    _out_dtype,
    check_tensor,
    round_mode_convert,
    where_of,
)

QUANT_MODES = ("TFLite_LShift", "TFLite", "MultiplierShift")


def _ints(value: Any, where: str, arg: str) -> list[int]:
    items = _as_list(value)
    if not items or any(not float(v).is_integer() for v in items):
        raise TpuLangError(f"{where}: {arg} must be an int or a list of ints, got {value!r}")
    return [int(v) for v in items]


def _per_axis_count(x: Tensor, values: list, axis: int, where: str, arg: str) -> None:
    if len(values) > 1 and len(values) != x.shape[axis]:
        raise TpuLangError(f"{where}: {arg} has {len(values)} values, axis {axis} of the input has "
                           f"{x.shape[axis]}")


def requant_int(tensor_i: Tensor, mul: Any, shift: Any, offset: Any, requant_mode: int,
                out_dtype: str = "int8", out_name: Any = None, round_mode: str = "half_away_from_zero",
                rq_axis: int = 1, fuse_rq_to_matmul: bool = False) -> Tensor:
    where = where_of("requant_int", out_name)
    x = check_tensor(tensor_i, where, "tensor_i")
    if x.dtype in ("float32", "float16"):
        raise TpuLangError(f"{where}: tensor_i must be an integer tensor, got {x.dtype}")
    if requant_mode not in (0, 1, 2):
        raise TpuLangError(f"{where}: requant_mode must be 0, 1 or 2, got {requant_mode!r}")
    muls = _ints(mul, where, "mul")
    shifts = _ints(shift, where, "shift")
    offsets = _ints(offset, where, "offset")
    if len(offsets) != 1:
        raise TpuLangError(f"{where}: offset must be one int (it becomes the result's zero point)")
    axis = shapes.axis_in_range(int(rq_axis), len(x.shape), where) if x.shape else 0
    if len(muls) != len(shifts) and 1 not in (len(muls), len(shifts)):
        raise TpuLangError(f"{where}: mul has {len(muls)} values but shift has {len(shifts)}")
    _per_axis_count(x, muls, axis, where, "mul")
    _per_axis_count(x, shifts, axis, where, "shift")
    dtype = _out_dtype(out_dtype, "int8", where)
    out = _out(list(x.shape), dtype, _name(out_name, "requant_int"))
    out.quantization(None, offsets[0], f"{where} offset")
    attrs = {"multiplier": muls, "rshift": [-s for s in shifts], "quant_mode": QUANT_MODES[requant_mode],
             "round_mode": round_mode_convert(round_mode, where), "rq_axis": SI32(int(rq_axis)),
             "fuse_rq": bool(fuse_rq_to_matmul)}
    return _insert("top.RequantInt", [x], out, attrs)


def requant_fp(tensor_i: Tensor, scale: Any, offset: Any, out_dtype: str, out_name: str | None = None,
               round_mode: str = "half_away_from_zero",
               first_round_mode: str = "half_away_from_zero") -> Tensor:
    """``y = saturate(round(float(x) * scale + offset))``, per channel (axis 1) when ``scale`` is a list."""
    where = where_of("requant_fp", out_name)
    x = check_tensor(tensor_i, where, "tensor_i")
    scales = [float(s) for s in _as_list(scale)]
    offsets = [float(o) for o in _as_list(offset)]
    if not scales or not offsets:
        raise TpuLangError(f"{where}: scale and offset are required")
    if x.shape and len(x.shape) > 1:
        _per_axis_count(x, scales, 1, where, "scale")
        _per_axis_count(x, offsets, 1, where, "offset")
    if round_mode in ("half_up", "half_down"):
        raise TpuLangError(f"{where}: round_mode {round_mode!r} is rewritten by TpuLang; use "
                           f"half_away_from_zero, half_to_even, towards_zero, down or up")
    dtype = _out_dtype(out_dtype, "int8", where)
    out = _out(list(x.shape), dtype, _name(out_name, "requant_fp"))
    out.quantization(None, int(offsets[0]), f"{where} offset")
    attrs = {"scale": [F64(s) for s in scales], "offset": [F64(o) for o in offsets],
             "quant_mode": "MultiplierShift", "round_mode": round_mode_convert(round_mode, where),
             "first_round_mode": round_mode_convert(first_round_mode, where)}
    return _insert("top.RequantFp", [x], out, attrs)


def dequant_int_to_fp(tensor_i: Tensor, scale: Any, offset: Any, out_dtype: str = "float32",
                      out_name: str | None = None, round_mode: str = "half_away_from_zero") -> Tensor:
    """``y = (x - offset) * scale``; the scale/offset become the input's quant type (TpuLang's way)."""
    where = where_of("dequant_int_to_fp", out_name)
    x = check_tensor(tensor_i, where, "tensor_i")
    if out_dtype not in ("float32", "float16"):
        raise TpuLangError(f"{where}: out_dtype must be float32 or float16, got {out_dtype!r}")
    if x.dtype in ("float32", "float16"):
        raise TpuLangError(f"{where}: tensor_i must be an integer tensor, got {x.dtype}")
    x.quantization(scale, offset, f"{where} scale/offset")
    out = _out(list(x.shape), out_dtype, _name(out_name, "dequant_int_to_fp"))
    return _insert("top.Cast", [x], out, _cast_attrs(round_mode, where))


def _cast_attrs(round_mode: str, where: str) -> dict:
    # TpuLang's top.Cast carries an empty ``to`` (printed); its result is ranked when the operand's shape is
    # known to TpuLang (a graph input or a weight), see graph.build_module.
    return {"round_mode": round_mode_convert(round_mode, where), "to": ""}


def requant_fp_to_int(tensor_i: Tensor, scale: Any, offset: Any, requant_mode: int, out_dtype: str,
                      out_name: str | None = None, round_mode: str = "half_away_from_zero") -> Tensor:
    """``y = saturate(round(x / scale) + offset)`` (``requant_mode`` is unused, as in TpuLang)."""
    where = where_of("requant_fp_to_int", out_name)
    x = check_tensor(tensor_i, where, "tensor_i")
    if x.dtype not in ("float32", "float16"):
        raise TpuLangError(f"{where}: tensor_i must be float32/float16, got {x.dtype}")
    out = _out(list(x.shape), _out_dtype(out_dtype, "int8", where), _name(out_name, "requant_fp_to_int"))
    out.quantization(scale, offset, f"{where} scale/offset")
    return _insert("top.Cast", [x], out, _cast_attrs(round_mode, where))
