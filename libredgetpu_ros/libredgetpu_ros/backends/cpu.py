"""CPU backend: LiteRT running the model's CPU twin cut at the Edge TPU boundary.

It returns the same tensors the Edge TPU op would (names, shapes, quantized dtypes), so the post-processing
after it is the one the Edge TPU path uses. Results match the accelerator up to the usual few-LSB differences
between the compiler's and LiteRT's integer kernels.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.backends.base import BoundaryInfo, check_inputs
from libredgetpu_ros.backends.twin import CutTwin, cut_twin, find_twin
from libredgetpu_ros.errors import BackendError, InputError, ModelFormatError


class CpuBackend:
    """``Backend`` on LiteRT. ``num_threads=None`` keeps LiteRT's default."""

    name = "cpu"

    def __init__(self, num_threads: int | None = None) -> None:
        if num_threads is not None and num_threads < 1:
            raise InputError(f"num_threads must be >= 1, got {num_threads}")
        self._num_threads = num_threads
        self._interpreter: Any = None
        self._boundary: BoundaryInfo | None = None
        self._twin: CutTwin | None = None
        self._model_path: Path | None = None
        self._input_indices: list[int] = []
        self._output_indices: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    @property
    def boundary(self) -> BoundaryInfo:
        if self._boundary is None:
            raise BackendError("CPU backend: no model loaded")
        return self._boundary

    @property
    def twin(self) -> CutTwin:
        if self._twin is None:
            raise BackendError("CPU backend: no model loaded")
        return self._twin

    def load(self, model_path: Path, cpu_model_path: Path | None = None) -> None:
        from ai_edge_litert.interpreter import Interpreter

        from libredgetpu_ros.formats import load_model

        model_path = Path(model_path)
        try:
            compiled = load_model(model_path)
        except OSError as exc:
            raise InputError(f"cannot read model {model_path}: {exc.strerror or exc}") from exc
        boundary = BoundaryInfo.from_model(compiled, model_path)
        twin = cut_twin(boundary, find_twin(model_path, cpu_model_path))
        try:
            interpreter = Interpreter(model_content=twin.content, num_threads=self._num_threads)
            interpreter.allocate_tensors()
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"LiteRT cannot load the cut twin {twin.path}: {exc}") from exc

        inputs = interpreter.get_input_details()
        outputs = {d["name"]: d for d in interpreter.get_output_details()}
        if len(inputs) != len(boundary.inputs):
            raise ModelFormatError(f"{twin.path}: {len(inputs)} graph input(s), the Edge TPU op of "
                                   f"{model_path.name} reads {len(boundary.inputs)}")
        for detail, spec in zip(inputs, boundary.inputs, strict=True):
            if tuple(detail["shape"]) != spec.shape or np.dtype(detail["dtype"]) != spec.dtype:
                raise ModelFormatError(f"{twin.path}: input {detail['name']!r} is {tuple(detail['shape'])} "
                                       f"{np.dtype(detail['dtype'])}, the Edge TPU op reads {spec.name!r} "
                                       f"{spec.shape} {spec.dtype}")
        for spec in boundary.outputs:
            detail = outputs.get(spec.name)
            if (detail is None or tuple(detail["shape"]) != spec.shape
                    or np.dtype(detail["dtype"]) != spec.dtype):
                raise ModelFormatError(f"{twin.path}: output {spec.name!r} does not match the Edge TPU op's "
                                       f"{spec.shape} {spec.dtype}")
        with self._lock:
            self._interpreter = interpreter
            self._boundary = boundary
            self._twin = twin
            self._model_path = model_path
            self._input_indices = [int(d["index"]) for d in inputs]
            self._output_indices = [(s.name, int(outputs[s.name]["index"])) for s in boundary.outputs]

    def run(self, inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock:
            interpreter = self._interpreter
            if interpreter is None:
                raise BackendError("CPU backend: run() before load() or after close()")
            for index, array in zip(self._input_indices, check_inputs(inputs, self._boundary.inputs),
                                    strict=True):
                interpreter.set_tensor(index, array)
            interpreter.invoke()
            return {name: interpreter.get_tensor(index) for name, index in self._output_indices}

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"backend": self.name, "device": "cpu (LiteRT)",
                                "num_threads": self._num_threads,
                                "model": str(self._model_path) if self._model_path else None}
        if self._twin is not None:
            info.update(twin=str(self._twin.path), twin_ops_kept=self._twin.kept_ops,
                        twin_ops_dropped=list(self._twin.dropped_ops),
                        boundary=self._boundary.to_dict() if self._boundary else None)
        return info

    def close(self) -> None:
        with self._lock:
            self._interpreter = None
