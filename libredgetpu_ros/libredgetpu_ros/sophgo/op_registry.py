"""The executor's op registry and the helpers every handler shares (no handlers here).

A handler is ``fn(run, node, args) -> ndarray``: ``args`` are the operand arrays (None for the ``top.None``
operand), ``run.operand_types(node)`` their declared types; it returns the result in the result type's
storage dtype and raises TpuLangError naming the op for anything it cannot do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from libredgetpu_ros.sophgo import shapes
from libredgetpu_ros.sophgo.ir import Module, OpNode, TensorType
from libredgetpu_ros.textdata import clip_repr

Handler = Callable[["RunState", OpNode, list], np.ndarray]
HANDLERS: dict[str, Handler] = {}


def register(kind: str) -> Callable[[Handler], Handler]:
    """Decorator: ``fn`` runs every op of this ``kind`` (``"top.Conv"``)."""
    def add(fn: Handler) -> Handler:
        HANDLERS[kind] = fn
        return fn
    return add


def where_of(node: OpNode) -> str:
    return f"{node.kind} {clip_repr(node.name)}"


def is_float(t: TensorType) -> bool:
    return t.dtype in ("float32", "float16")


class RunState:
    """One execution: the module, its weights and the declared type of every value computed so far."""

    def __init__(self, module: Module, weights: Mapping[str, np.ndarray]) -> None:
        self.module = module
        self.weights = weights
        self.types: dict[str, TensorType] = {}
        self._producers: dict[str, OpNode] | None = None

    def producer(self, name: str | None) -> OpNode | None:
        """The op computing value ``name`` (None for the top.None operand or an unknown name)."""
        if self._producers is None:
            self._producers = {node.name: node for node in self.module.ops}
        return None if name is None else self._producers.get(name)

    def operand_types(self, node: OpNode) -> list[TensorType | None]:
        return [None if n is None else self.types[n] for n in node.operands]


def zero_point(t: TensorType | None, ndim: int) -> np.ndarray | int:
    return 0 if t is None or t.quant is None else t.quant.zp_array(ndim)


def spatial(node: OpNode) -> tuple[list[int], list[int], list[int]]:
    where = where_of(node)
    stride = shapes.int_list(node.attrs.get("strides", [1, 1]), 2, where, "strides", 1)
    pads = shapes.int_list(node.attrs.get("pads", [0, 0, 0, 0]), 4, where, "pads", 0)
    kernel = shapes.int_list(node.attrs.get("kernel_shape"), 2, where, "kernel_shape", 1) \
        if node.attrs.get("kernel_shape") else []  # [] (TpuLang's kernel=None): a global pool
    return stride, pads, kernel

