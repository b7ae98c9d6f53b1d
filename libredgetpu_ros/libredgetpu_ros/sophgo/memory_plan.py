"""The memory an execution will need, worked out from the module's types before anything is allocated.

TpuLang's origin MLIR gives every compute result an unranked type (``tensor<*xf32>``), so a 1 KB file can
describe a graph whose tensors grow without bound (four convs padded by 8191 around a 1x1 input: 1 GiB,
then 4 GiB...). :func:`plan_memory` infers every value's shape with the same functions the executor's
handlers use (:mod:`shapes`), from the declared input and weight types, and estimates the peak bytes of a
run: the values alive at each op (the executor drops a computed value after its last reader unless every
value is kept), plus the working set that op needs on top of them. A plan over
the budget is a :class:`TpuLangError` naming the op, raised before the first array exists; so are the
shape errors a handler would only have met half-way through the run.

The working-set figures are upper estimates of what the NumPy handlers allocate (8-byte float64/int64
copies of the operands, the padded input and the im2col matrix of a convolution, and up to four 8-byte
temporaries per output element for accumulation, rounding and saturation), not measurements; they are
meant to refuse graphs that cannot run, not to predict RSS to the byte.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from libredgetpu_ros.sophgo import shapes
from libredgetpu_ros.sophgo.ir import DTYPES, Module, OpNode, TpuLangError
from libredgetpu_ros.sophgo.op_registry import spatial, where_of

DEFAULT_BUDGET = 2 << 30  # bytes; `tpulang run --max-memory-mb` changes it
_WIDE = 8  # bytes of the float64 / int64 copies the handlers compute in
_TEMPORARIES = 4  # 8-byte arrays per output element an op may hold at once (acc, real, rounded, clipped)
_OVERHEAD = 1 << 20  # Python objects, small index arrays (pool counts, per-channel vectors)

Shape = tuple[int, ...]


@dataclass(frozen=True)
class MemoryPlan:
    """Per value: inferred shape and stored bytes; the run's estimated peak and the op where it occurs;
    which computed values are dropped after which op (empty when every value is kept)."""

    shapes: dict[str, Shape]
    value_bytes: dict[str, int]
    peak_bytes: int
    peak_op: str
    keep_all: bool
    drops: dict[int, list[str]]

    def bytes_of(self, names: Sequence[str]) -> int:
        return sum(self.value_bytes.get(name, 0) for name in names)


def _elements(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def _same(node: OpNode, operands: list[Shape]) -> tuple[Shape, int]:
    return operands[0], 0


def _conv(node: OpNode, operands: list[Shape]) -> tuple[Shape, int]:
    where = where_of(node)
    if len(operands) < 2:
        raise TpuLangError(f"{where}: needs an input and a weight")
    x, w = operands[:2]
    stride, pads, _ = spatial(node)
    dilation = shapes.int_list(node.attrs.get("dilations", [1, 1]), 2, where, "dilations", 1)
    group = getattr(node.attrs.get("group"), "value", 1)
    out = shapes.conv_shape(x, w, stride, dilation, pads, group, where)
    padded = x[0] * x[1] * (x[2] + pads[0] + pads[2]) * (x[3] + pads[1] + pads[3])
    im2col = out[0] * out[2] * out[3] * w[1] * w[2] * w[3]  # one group's columns at a time
    return tuple(out), _WIDE * (_elements(x) + padded + im2col + _elements(w))


def _pool(node: OpNode, operands: list[Shape]) -> tuple[Shape, int]:
    where = where_of(node)
    stride, pads, kernel = spatial(node)
    x = operands[0]
    if len(x) != 4:
        raise TpuLangError(f"{where}: input must be 4-D NCHW, got shape {list(x)}")
    kernel, stride, pads = shapes.pool_window(x, kernel, stride, pads)
    out = shapes.pool_shape(x, kernel, stride, pads, bool(node.attrs.get("ceil_mode", False)), where,
                            node.kind)
    padded = x[0] * x[1] * (x[2] + pads[0] + pads[2] + stride[0]) * (x[3] + pads[1] + pads[3] + stride[1])
    return tuple(out), _WIDE * (_elements(x) + padded)


def _matmul(node: OpNode, operands: list[Shape]) -> tuple[Shape, int]:
    if len(operands) < 2:
        raise TpuLangError(f"{where_of(node)}: needs two operands")
    a, b = operands[:2]
    flags = (bool(node.attrs.get(k, False)) for k in ("left_transpose", "right_transpose",
                                                      "output_transpose"))
    out = shapes.matmul_shape(a, b, *flags, where_of(node))
    return tuple(out), _WIDE * (_elements(a) + _elements(b))


def _add(node: OpNode, operands: list[Shape]) -> tuple[Shape, int]:
    if len(operands) != 2:
        raise TpuLangError(f"{where_of(node)}: needs two operands")
    out = shapes.broadcast_shape(operands[0], operands[1], where_of(node))
    return tuple(out), _WIDE * (_elements(operands[0]) + _elements(operands[1]))


def _concat(node: OpNode, operands: list[Shape]) -> tuple[Shape, int]:
    axis = getattr(node.attrs.get("axis"), "value", 0)
    out = tuple(shapes.concat_shape(operands, axis, where_of(node)))
    # a quantized result requantizes every input in int64/float64 before concatenating (executor_ops)
    return out, _WIDE * 2 * _elements(out)


def _reshape(node: OpNode, operands: list[Shape]) -> tuple[Shape, int]:
    target = node.attrs.get("shape")
    if not isinstance(target, list):
        raise TpuLangError(f"{where_of(node)}: shape attribute is required")
    return tuple(shapes.reshape_shape(operands[0], target, where_of(node))), 0


def _permute(node: OpNode, operands: list[Shape]) -> tuple[Shape, int]:
    order = node.attrs.get("order")
    if not isinstance(order, list):
        raise TpuLangError(f"{where_of(node)}: order attribute is required")
    return tuple(shapes.permute_shape(operands[0], order, where_of(node))), 0


# kind -> (node, operand shapes) -> (result shape, working bytes besides the result's temporaries).
# Kept to the executor's HANDLERS (a test checks both name the same kinds).
SHAPE_RULES: dict[str, Callable[[OpNode, list[Shape]], tuple[Shape, int]]] = {
    "top.Conv": _conv, "top.MaxPool": _pool, "top.AvgPool": _pool, "top.MatMul": _matmul, "top.Add": _add,
    "top.Concat": _concat, "top.Reshape": _reshape, "top.Permute": _permute, "top.Relu": _same,
    "top.Softmax": _same, "top.Cast": _same, "top.RequantInt": _same, "top.RequantFp": _same,
}


def releases(module: Module) -> dict[int, list[str]]:
    """op index -> computed values no later op reads and that are not outputs: the executor drops them
    after that op (inputs and weights stay: the caller holds them)."""
    last: dict[str, int] = {}
    for index, node in enumerate(module.ops):
        if node.kind not in ("top.Input", "top.Weight"):
            last[node.name] = index
        for name in node.operands:
            if name in last:
                last[name] = index
    out: dict[int, list[str]] = {}
    for name, index in last.items():
        if name not in module.outputs:
            out.setdefault(index, []).append(name)
    return out


def plan_memory(module: Module, budget: int = DEFAULT_BUDGET, keep_all: bool = False) -> MemoryPlan:
    """Shapes and the estimated peak of running ``module`` (every value kept when ``keep_all``, else each
    dropped after its last reader); TpuLangError (before any allocation) when a shape is inconsistent or
    the peak exceeds ``budget`` bytes."""
    dropped = {} if keep_all else releases(module)
    known: dict[str, Shape] = {}
    stored: dict[str, int] = {}
    live = _OVERHEAD
    peak, peak_op = 0, ""
    for index, node in enumerate(module.ops):
        where = where_of(node)
        if node.kind in ("top.Input", "top.Weight"):
            if node.result.shape is None:
                raise TpuLangError(f"{where}: the module gives it no shape (an unranked type)")
            shape, working = tuple(node.result.shape), 0
        else:
            rule = SHAPE_RULES.get(node.kind)
            if rule is None:
                raise TpuLangError(f"{where}: op kind {node.kind} is not supported by the executor")
            if not node.operands or node.operands[0] is None:
                raise TpuLangError(f"{where}: first operand must not be none")
            operands = [known[name] for name in node.operands if name is not None]
            try:
                shape, working = rule(node, operands)
            except (ValueError, TypeError, IndexError, OverflowError) as exc:  # as the executor reports them
                raise TpuLangError(f"{where}: {exc}") from exc
            shapes.check_size(shape, where, "result")
            working += _WIDE * _TEMPORARIES * _elements(shape)
        if node.result.dtype not in DTYPES:
            raise TpuLangError(f"{where}: result type {node.result.dtype} is not a tensor type")
        nbytes = _elements(shape) * node.result.np_dtype.itemsize
        if live + working + nbytes > peak:
            peak, peak_op = live + working + nbytes, where
        if peak > budget:
            raise TpuLangError(f"{where}: running this module needs about {peak >> 20} MiB at this op "
                               f"({live >> 20} MiB of values so far, result {list(shape)}), more than the "
                               f"{budget >> 20} MiB budget; nothing was allocated")
        known[node.name] = shape
        stored[node.name] = nbytes
        live += nbytes - sum(stored[name] for name in dropped.get(index, ()))
    return MemoryPlan(known, stored, peak, peak_op, keep_all, dropped)
