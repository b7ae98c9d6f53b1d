"""TpuLang's graph state: ``init``/``deinit``, ``Tensor`` and the op list, turned into a :class:`Module`.

Like TpuLang, ops are recorded in call order into one default graph; :func:`build_module` orders the printed
ops the way ``TpuLangConverter.generate_mlir`` does (all ``top.Input`` first, each ``top.Weight`` just before
its first user). Unlike TpuLang, an op output's ``shape`` is the inferred shape (TpuLang leaves it ``[]``);
the MLIR still prints every op result unranked.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.sophgo.ir import (
    DTYPES,
    AttrValue,
    Module,
    OpNode,
    Quant,
    TensorType,
    TpuLangError,
    check_dtype,
    weight_file_name,
)
from libredgetpu_ros.textdata import clip_repr

_tensor_ids = itertools.count()
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")
DEVICES = ("cpu", "bm1684x", "bm1688", "cv183x")


def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple, np.ndarray)):
        return list(np.asarray(value).reshape(-1).tolist())
    return [value]


def make_quant(scale: Any, zero_point: Any, where: str, axis: int = 1) -> Quant | None:
    """Quant of TpuLang ``scale``/``zero_point`` arguments (a list of more than one scale is per channel)."""
    if scale is None and zero_point is None:
        return None
    scales = [float(s) for s in _as_list(scale)] or [1.0]
    zps = [int(z) for z in _as_list(zero_point)] or [0]
    for s in scales:
        if not np.isfinite(s) or s <= 0:
            raise TpuLangError(f"{where}: scale {s} must be a positive finite number")
    if len(scales) == 1 and len(zps) == 1:
        return Quant((scales[0],), (zps[0],))
    if len(zps) == 1:
        zps = zps * len(scales)
    if len(scales) == 1:
        scales = scales * len(zps)
    if len(scales) != len(zps):
        raise TpuLangError(f"{where}: {len(scales)} scales but {len(zps)} zero points")
    return Quant(tuple(scales), tuple(zps), axis)


class Tensor:
    """TpuLang's Tensor: a graph input / op output (``ttype="neuron"``) or a weight (``ttype="coeff"``)."""

    def __init__(self, shape: list | tuple = (), name: str | None = None, ttype: str = "neuron",
                 data: np.ndarray | None = None, dtype: str = "float32", scale: Any = None,
                 zero_point: Any = None) -> None:
        self.id = next(_tensor_ids)
        if name is not None and (not isinstance(name, str) or not name):
            raise TpuLangError(f"Tensor: name must be a non-empty string, got {clip_repr(name)}")
        self.name = name if name is not None else f"BMTensor{self.id}"
        where = f"Tensor {clip_repr(self.name)}"
        if ttype not in ("neuron", "coeff"):
            raise TpuLangError(f"{where}: ttype must be 'neuron' or 'coeff', got {ttype!r}")
        self.ttype = ttype
        self.dtype = dtype
        np_dtype = check_dtype(dtype, where)
        try:
            self.shape = [int(d) for d in shape]
        except (TypeError, ValueError):
            raise TpuLangError(f"{where}: shape must be a list of ints, got {shape!r}") from None
        if len(self.shape) > 8:
            raise TpuLangError(f"{where}: rank {len(self.shape)} is above 8")
        if any(d <= 0 for d in self.shape):
            raise TpuLangError(f"{where}: shape {self.shape} has a non-positive dimension")
        self.buffer: np.ndarray | None = None
        if data is not None:
            array = np.asarray(data)
            if array.dtype != np_dtype:
                raise TpuLangError(f"{where}: data has dtype {array.dtype}, the tensor is declared {dtype}")
            if self.shape and list(array.shape) != self.shape:
                raise TpuLangError(f"{where}: data has shape {list(array.shape)}, declared {self.shape}")
            self.shape = list(array.shape)
            self.buffer = array
        if ttype == "coeff" and self.buffer is None:
            raise TpuLangError(f"{where}: a coeff tensor needs data (missing weights)")
        self.quant = make_quant(scale, zero_point, where, axis=1)
        self._stated = (scale is not None, zero_point is not None)  # what quantization() may still fill in

    @property
    def is_quantized(self) -> bool:
        return self.quant is not None

    @property
    def scale(self) -> float | list[float] | None:
        if self.quant is None:
            return None
        return self.quant.scales[0] if self.quant.axis is None else list(self.quant.scales)

    @property
    def zero_point(self) -> int | list[int] | None:
        if self.quant is None:
            return None
        return self.quant.zero_points[0] if self.quant.axis is None else list(self.quant.zero_points)

    def quantization(self, scale: Any = None, zero_point: Any = None, where: str = "") -> Tensor:
        """Set the quantization, or check it against the one already set (TpuLang's set-or-check).

        As in TpuLang, what the tensor did not state yet is filled in: a tensor given only a zero point (an
        op result's offset) takes a later scale (``requant_int`` then ``dequant_int_to_fp(scale, zp)``);
        a stated value that differs is an error (TpuLang asserts)."""
        where = where or f"Tensor {clip_repr(self.name)}"
        new = make_quant(scale, zero_point, where)
        if new is None:
            return self
        if self.quant is None:
            self.quant, self._stated = new, (scale is not None, zero_point is not None)
            return self
        scale_stated, zp_stated = self._stated
        merged = make_quant(scale if scale is not None else (self.quant.scales if scale_stated else None),
                            zero_point if zero_point is not None else (self.quant.zero_points if zp_stated
                                                                       else None), where)
        if (scale_stated and merged.scales != self.quant.scales) or (
                zp_stated and merged.zero_points != self.quant.zero_points):
            raise TpuLangError(f"{where}: tensor {clip_repr(self.name)} is already quantized with scale "
                               f"{self.scale} zero point {self.zero_point}, the argument asks for "
                               f"{list(new.scales)} / {list(new.zero_points)}")
        self.quant = merged
        self._stated = (scale_stated or scale is not None, zp_stated or zero_point is not None)
        return self

    def set_quantization(self, scale: Any, zero_point: Any) -> Tensor:
        """Replace the quantization outright (an exporter labelling an op output with its real scale, where
        TpuLang's op would leave the placeholder scale 1.0)."""
        self.quant = make_quant(scale, zero_point, f"Tensor {clip_repr(self.name)}")
        self._stated = (True, True)
        return self

    def stated_quantization(self) -> tuple[Any, Any]:
        """(scale, zero point) as TpuLang's Tensor holds them: None where not stated."""
        if self.quant is None:
            return None, None
        scale_stated, zp_stated = self._stated
        return (self.scale if scale_stated else None), (self.zero_point if zp_stated else None)

    def copy_quantization(self, quant: Quant) -> Tensor:
        """Take another tensor's quantization as stated (an op result keeping its input's type)."""
        self.quant, self._stated = quant, (True, True)
        return self

    def mlir_type(self, ranked: bool) -> TensorType:
        return TensorType(tuple(self.shape) if ranked else None, self.dtype, self.quant)

    def __repr__(self) -> str:
        return f"Tensor({clip_repr(self.name)}, {self.shape}, {self.dtype}, {self.ttype})"


@dataclass
class Operator:
    kind: str
    inputs: list[Tensor | None]
    output: Tensor
    attrs: dict[str, AttrValue]


class Graph:
    def __init__(self) -> None:
        self.ops: list[Operator] = []
        self.names: set[str] = set()

    def insert(self, kind: str, inputs: list[Tensor | None], output: Tensor, attrs: dict[str,
               AttrValue]) -> Tensor:
        if output.name in self.names:
            raise TpuLangError(f"{kind} {clip_repr(output.name)}: out_name is already used by another op")
        self.names.add(output.name)
        self.ops.append(Operator(kind, inputs, output, attrs))
        return output


class _State(threading.local):
    """The default graph, per thread: TpuLang keeps one global graph; per-thread state lets the MatMul
    backend build its graph in a node's thread while another thread authors or exports."""

    graph: Graph | None = None
    device: str | None = None


_STATE = _State()


def init(device: str) -> None:
    """Start a new graph for ``device`` (TpuLang's chip names; the emitted module is chip "ALL" anyway)."""
    if str(device).lower() not in DEVICES:
        raise TpuLangError(f"init: device {device!r} is not one of {', '.join(DEVICES)}")
    _STATE.device = str(device).lower()
    _STATE.graph = Graph()


def deinit() -> None:
    _STATE.graph = None
    _STATE.device = None


@contextmanager
def private_graph(device: str = "bm1684x") -> Iterator[Graph]:
    """A fresh default graph for the duration of the block; the caller's graph (if any) is restored after,
    so the exports and replay never disturb a graph someone is building."""
    saved = (_STATE.graph, _STATE.device)
    init(device)
    try:
        yield _STATE.graph
    finally:
        _STATE.graph, _STATE.device = saved


def current_graph(op: str) -> Graph:
    if _STATE.graph is None:
        raise TpuLangError(f"{op}: no graph; call init(device) first")
    return _STATE.graph


# Ops whose result has their input's quantization (TpuLangConverter's "assign_ops" that this API has).
ASSIGN_OPS = frozenset({"top.Relu", "top.Reshape", "top.Permute"})


def _quantized_type_inference(ops: list[Operator]) -> None:
    """TpuLang's compile-time pass: through relu/reshape/permute, a quantization goes forward from input to
    result, then backward from result to input, each filling in only what the other tensor did not state
    (so ``relu`` then ``maxpool2d(scale=[s, s], zero_point=[z, z])`` gives the relu and its input scale s)."""
    assign = [op for op in ops if op.kind in ASSIGN_OPS and op.inputs[0] is not None]
    for op in assign:
        if op.inputs[0].quant is not None:
            where = f"{op.kind} {clip_repr(op.output.name)}"
            op.output.quantization(*op.inputs[0].stated_quantization(), where)
    for op in reversed(assign):
        if op.output.quant is not None:
            where = f"{op.kind} {clip_repr(op.output.name)}"
            op.inputs[0].quantization(*op.output.stated_quantization(), where)


def build_module(name: str, inputs: list[Tensor], outputs: list[Tensor], quantized: bool,
                 graph: Graph | None = None) -> Module:
    """The module TpuLang's ``compile`` (quantized) or ``compile_f32`` would write for this graph."""
    graph = graph or current_graph("compile")
    if not MODULE_NAME.fullmatch(name or ""):
        raise TpuLangError(f"compile: model name {clip_repr(name)} must be a bare MLIR identifier "
                           f"([A-Za-z_][A-Za-z0-9_$.]*): it names the module and the files")
    if not inputs or not outputs:
        raise TpuLangError("compile: a graph needs at least one input and one output")
    state = "TOP_QUANTIZED" if quantized else "TOP_F32"
    _quantized_type_inference(graph.ops)
    produced = {op.output.id for op in graph.ops}
    input_ids = set()
    ops: list[OpNode] = []
    for index, tensor in enumerate(inputs):
        if tensor.ttype != "neuron" or tensor.id in produced:
            raise TpuLangError(f"compile: input {clip_repr(tensor.name)} must be a neuron tensor no op "
                               f"produces")
        input_ids.add(tensor.id)
        ranked = tensor.mlir_type(ranked=True)
        ops.append(OpNode("top.Input", tensor.name, (tensor.name,), {"do_preprocess": False}, ranked, index))
    emitted_weights: set[int] = set()
    tpulang_shaped: set[int] = set()  # op outputs whose TpuLang Tensor.shape is known (ranked in the MLIR)
    shapes = {t.name: tuple(t.shape) for t in inputs}
    for op in graph.ops:
        for operand in op.inputs:
            if operand is None:
                continue
            if operand.ttype == "coeff" and operand.id not in emitted_weights:
                emitted_weights.add(operand.id)
                ops.append(OpNode("top.Weight", operand.name, (), {}, operand.mlir_type(ranked=True)))
                shapes[operand.name] = tuple(operand.shape)
            elif operand.ttype == "neuron" and operand.id not in input_ids and operand.id not in produced:
                raise TpuLangError(f"{op.kind} {clip_repr(op.output.name)}: operand "
                                   f"{clip_repr(operand.name)} is not a graph input of compile() and no op "
                                   f"produces it")
        operands = tuple(None if t is None else t.name for t in op.inputs)
        # TpuLang knows the shape of graph inputs and weights (most op outputs get Tensor.shape []); relu,
        # softmax, requant_int, requant_fp, dequant_int_to_fp and requant_fp_to_int copy their operand's
        # shape, so their result is ranked when that shape is known (chains of them included).
        ranked = (op.kind in _SHAPE_COPYING and op.inputs[0] is not None
                  and (op.inputs[0].id not in produced or op.inputs[0].id in tpulang_shaped))
        if ranked:
            tpulang_shaped.add(op.output.id)
        ops.append(OpNode(op.kind, op.output.name, operands, dict(op.attrs),
                          op.output.mlir_type(ranked=ranked)))
        shapes[op.output.name] = tuple(op.output.shape)
    known: set[str] = set()
    for node in ops:
        if node.name in known:
            raise TpuLangError(f"compile: name {clip_repr(node.name)} is used by two tensors (inputs, "
                               f"weights and op outputs need distinct names)")
        known.add(node.name)
    for tensor in outputs:
        if tensor.name not in known:
            raise TpuLangError(f"compile: output {clip_repr(tensor.name)} is not produced by this graph")
    module = Module(name, state, weight_file_name(name, state),
                    [(t.name, t.mlir_type(ranked=True)) for t in inputs], ops, [t.name for t in outputs])
    module.shapes = shapes
    return module


# TpuLang 1.30.2 functions building their output as Tensor(input.shape, ...) (python/transform/TpuLang.py)
_SHAPE_COPYING = frozenset({"top.Relu", "top.Softmax", "top.RequantInt", "top.RequantFp", "top.Cast"})


def weights_of(graph: Graph | None = None) -> dict[str, np.ndarray]:
    """Every coeff tensor's data keyed by name, in first-use order (what the weight npz holds)."""
    graph = graph or current_graph("compile")
    out: dict[str, np.ndarray] = {}
    for op in graph.ops:
        for operand in op.inputs:
            if operand is not None and operand.ttype == "coeff" and operand.name not in out:
                data = operand.buffer
                # TpuLang stores float16 weights as their uint16 bit pattern.
                out[operand.name] = data.view(np.uint16) if data.dtype == np.float16 else data
    return out


def storage_dtype(dtype: str) -> np.dtype:
    return DTYPES[dtype][0]
