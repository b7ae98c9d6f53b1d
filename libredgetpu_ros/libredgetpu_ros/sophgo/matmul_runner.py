"""MatMulEngine backend ``tpulang``: the Dense layer as a TpuLang graph run by the NumPy executor.

Same contract as ``matmul.device_runner.EdgeTpuRunner``: ``upload(blob, version)`` before a swap publishes,
``run(blob, version, xq)`` on the snapshot a call took. The graph (the uint8 core of
:func:`export_dense.dense_graph`) is built and parsed back once per batch size; a weight version only swaps
the ``dense_w`` array (``W^T`` of the blob's int8 weights), so every result comes from exactly one version.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from libredgetpu_ros.matmul.blob import parse_blob
from libredgetpu_ros.matmul.template import DenseTemplate
from libredgetpu_ros.sophgo.emitter import emit_mlir
from libredgetpu_ros.sophgo.executor import execute
from libredgetpu_ros.sophgo.export_dense import INPUT_NAME, OUTPUT_NAME, WEIGHT_NAME, dense_graph
from libredgetpu_ros.sophgo.ir import Module
from libredgetpu_ros.sophgo.memory_plan import MemoryPlan, plan_memory
from libredgetpu_ros.sophgo.parser import parse_mlir

_KEEP_VERSIONS = 2  # the active version and the one a swap is publishing
_MAX_BATCH_SIZES = 8  # parsed modules kept (one per batch size seen)


class TpuLangRunner:
    def __init__(self, template: DenseTemplate) -> None:
        self._template = template
        self._rows, self._cols = template.rows, template.cols
        self._lock = threading.Lock()
        self._modules: dict[int, tuple[Module, MemoryPlan]] = {}  # batch size -> parsed module, its plan
        self._weights: dict[int, np.ndarray] = {}  # version -> W^T int8 (cols, rows)

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

    def _weights_of(self, blob: np.ndarray, version: int) -> np.ndarray:
        weights = self._weights.get(version)
        if weights is None:
            int8 = parse_blob(blob, self._rows, self._cols)[0]
            weights = np.ascontiguousarray(int8.T)
            weights.setflags(write=False)
            self._weights[version] = weights
            for old in sorted(self._weights)[:-_KEEP_VERSIONS]:
                del self._weights[old]
        return weights

    def upload(self, blob: np.ndarray, version: int) -> None:
        with self._lock:
            self._weights_of(blob, version)

    def run(self, blob: np.ndarray, version: int, xq: np.ndarray) -> np.ndarray:
        """uint8 outputs (k, rows) for uint8 inputs (k, cols)."""
        with self._lock:
            weights = self._weights_of(blob, version)
            module, plan = self._module(xq.shape[0])
        return execute(module, {WEIGHT_NAME: weights}, {INPUT_NAME: xq}, plan=plan)[OUTPUT_NAME]

    def close(self) -> None:
        with self._lock:
            self._weights.clear()
            self._modules.clear()


def open_tpulang_runner(template: DenseTemplate, device: Any = None) -> TpuLangRunner:
    """The ``tpulang`` entry of MatMul's runner registry (setup.py entry point); no device involved."""
    return TpuLangRunner(template)
