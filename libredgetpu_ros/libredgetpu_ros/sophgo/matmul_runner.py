"""MatMulEngine backend ``tpulang``: the Dense layer as a TpuLang graph run by the NumPy executor.

A MatMul runner like ``matmul.device_runner.EdgeTpuRunner`` (``matmul/runners.py``: a
``reparam.ParameterTarget``): ``stage(parameters)`` before a swap publishes a set, ``run(xq, parameters)`` on
the set a call took. The graph (the uint8 core of :func:`export_dense.dense_graph`) is built and parsed back
once per batch size; a parameter set only swaps the ``dense_w`` array (``W^T`` of its blob's int8 weights),
so every result comes from exactly one version.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from libredgetpu_ros.matmul.blob import parse_blob
from libredgetpu_ros.matmul.template import DenseTemplate
from libredgetpu_ros.reparam import ParameterSet
from libredgetpu_ros.sophgo.emitter import emit_mlir
from libredgetpu_ros.sophgo.executor import execute
from libredgetpu_ros.sophgo.export_dense import INPUT_NAME, OUTPUT_NAME, WEIGHT_NAME, dense_graph
from libredgetpu_ros.sophgo.ir import Module
from libredgetpu_ros.sophgo.memory_plan import MemoryPlan, plan_memory
from libredgetpu_ros.sophgo.parser import parse_mlir

_KEEP_VERSIONS = 2  # the active version and the one a swap is publishing
_MAX_BATCH_SIZES = 8  # parsed modules kept (one per batch size seen)


class TpuLangRunner:
    """The ``tpulang`` MatMul runner (declared in setup.py, opened by ``open_tpulang_runner``)."""

    name = "tpulang"
    choice = ""  # set by backends.choose
    fallback = ""

    def __init__(self, template: DenseTemplate) -> None:
        self._template = template
        self._rows, self._cols = template.rows, template.cols
        self._lock = threading.Lock()
        self._modules: dict[int, tuple[Module, MemoryPlan]] = {}  # batch size -> parsed module, its plan
        self._weights: dict[tuple[int, int], np.ndarray] = {}  # ParameterSet.key -> W^T int8 (cols, rows)

    def _module(self, batch: int) -> tuple[Module, MemoryPlan]:
        entry = self._modules.get(batch)
        if entry is None:
            if len(self._modules) >= _MAX_BATCH_SIZES:
                self._modules.clear()
            zeros = np.zeros((self._rows, self._cols), dtype=np.int8)
            built, _ = dense_graph(zeros, self._template.quant, batch=batch, float_io=False)
            # Run what a Sophgo toolchain would read: the emitted text, parsed back.
            module = parse_mlir(emit_mlir(built), f"{built.name}_origin.mlir")
            entry = self._modules[batch] = (module, plan_memory(module))  # planned once, not per call
        return entry

    def _weights_of(self, parameters: ParameterSet) -> np.ndarray:
        weights = self._weights.get(parameters.key)
        if weights is None:
            int8 = parse_blob(parameters.blob("pc"), self._rows, self._cols)[0]
            weights = np.ascontiguousarray(int8.T)
            weights.setflags(write=False)
            self._weights[parameters.key] = weights
            while len(self._weights) > _KEEP_VERSIONS:  # oldest first (insertion order)
                del self._weights[next(iter(self._weights))]
        return weights

    def stage(self, parameters: ParameterSet) -> None:
        """The set's W^T, built before the set is published (a bad blob refuses it)."""
        with self._lock:
            self._weights_of(parameters)

    def run(self, xq: np.ndarray, parameters: ParameterSet) -> np.ndarray:
        """uint8 outputs (k, rows) for uint8 inputs (k, cols) with the set's weights."""
        with self._lock:
            weights = self._weights_of(parameters)
            module, plan = self._module(xq.shape[0])
        return execute(module, {WEIGHT_NAME: weights}, {INPUT_NAME: xq}, plan=plan)[OUTPUT_NAME]

    def close(self) -> None:
        with self._lock:
            self._weights.clear()
            self._modules.clear()


def open_tpulang_runner(template: DenseTemplate, device: Any = None) -> TpuLangRunner:
    """The ``tpulang`` entry of MatMul's runner registry (setup.py entry point); no device involved."""
    return TpuLangRunner(template)
