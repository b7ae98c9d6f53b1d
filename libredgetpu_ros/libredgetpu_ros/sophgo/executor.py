"""Runs a Top :class:`Module` with NumPy: float32 semantics for float ops, exact integer semantics for the
quantized ones (as tpu-mlir's INT8 references show). The op handlers live in :mod:`executor_linear`
(conv, matmul, requantization, casts) and :mod:`executor_ops` (pools, element-wise and shape ops).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from libredgetpu_ros.sophgo import executor_linear, executor_ops
from libredgetpu_ros.sophgo.ir import Module, TensorType, TpuLangError
from libredgetpu_ros.sophgo.memory_plan import DEFAULT_BUDGET, MemoryPlan, plan_memory
from libredgetpu_ros.sophgo.op_registry import HANDLERS, RunState, where_of

_REGISTERED = (executor_linear, executor_ops)  # importing them registers their handlers


def execute(module: Module, weights: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray],
            keep_all: bool = False, memory_budget: int = DEFAULT_BUDGET,
            plan: MemoryPlan | None = None) -> dict[str, np.ndarray]:
    """Outputs keyed by name (every value when ``keep_all``); errors name the op that failed.

    The whole run is planned first (:func:`memory_plan.plan_memory`): a graph whose shapes do not fit or
    whose estimated peak exceeds ``memory_budget`` bytes is refused before anything is allocated. Unless
    ``keep_all``, a computed value is dropped once no later op reads it. A caller running the same module
    many times may pass the ``plan`` it made once (with the same ``keep_all``; its budget was checked)."""
    if plan is None or plan.keep_all != keep_all:
        plan = plan_memory(module, memory_budget, keep_all)
    dropped = plan.drops
    run = RunState(module, weights)
    values: dict[str, np.ndarray] = {}
    for index, node in enumerate(module.ops):
        where = where_of(node)
        if node.kind == "top.Input":
            array = _checked(inputs.get(node.name), node.result, where, "input")
        elif node.kind == "top.Weight":
            array = _checked(weights.get(node.name), node.result, where, "weight")
        else:
            handler = HANDLERS.get(node.kind)
            if handler is None:
                raise TpuLangError(f"{where}: op kind {node.kind} is not supported by the executor")
            args = [None if name is None else values[name] for name in node.operands]
            if any(a is None for a in args[:1]):
                raise TpuLangError(f"{where}: first operand must not be none")
            try:
                array = handler(run, node, args)
            except TpuLangError:
                raise
            except (ValueError, TypeError, IndexError, OverflowError) as exc:
                raise TpuLangError(f"{where}: {exc}") from exc
            if array.dtype != node.result.np_dtype:
                raise TpuLangError(f"{where}: produced {array.dtype}, the result type says "
                                   f"{node.result.dtype}")
        values[node.name] = array
        run.types[node.name] = node.result
        for name in dropped.get(index, ()):  # no later op reads it: free it now (as the plan counted)
            del values[name]
    if keep_all:
        return values
    return {name: values[name] for name in module.outputs}


def _checked(array: np.ndarray | None, declared: TensorType, where: str, what: str) -> np.ndarray:
    if array is None:
        raise TpuLangError(f"{where}: missing {what} (no array of that name was given)")
    array = np.asarray(array)
    if array.dtype != declared.np_dtype and not (declared.dtype == "float16" and array.dtype == np.uint16):
        raise TpuLangError(f"{where}: {what} has dtype {array.dtype}, the module declares {declared.dtype}")
    if declared.dtype == "float16" and array.dtype == np.uint16:
        array = array.view(np.float16)
    if declared.shape is not None and tuple(array.shape) != declared.shape:
        raise TpuLangError(f"{where}: {what} has shape {list(array.shape)}, the module declares "
                           f"{list(declared.shape)}")
    return array

