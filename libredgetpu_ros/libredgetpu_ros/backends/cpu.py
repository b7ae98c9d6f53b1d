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

_KEPT_VERSIONS = 2  # interpreters kept for re-parameterised versions: the current one and the one before


class CpuBackend:
    """``Backend`` on LiteRT. ``num_threads=None`` keeps LiteRT's default."""

    name = "cpu"
    choice = ""  # why open_backend picked it, and the reason when that was a fallback (backends/__init__)
    fallback = ""

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
        self._twin_spans: dict[int, tuple[int, int]] = {}
        self._versions: dict[tuple[int, int], Any] = {}  # ParameterSet.key -> its interpreter

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
        if not compiled.edgetpu_ops() and cpu_model_path is None:
            # an uncompiled model (a template whose compiled file does not exist): the whole graph runs
            boundary = BoundaryInfo.from_graph(compiled, model_path)
            twin = CutTwin(path=model_path, content=bytes(compiled.data), output_names=boundary.output_names,
                           kept_ops=len(compiled.operators), dropped_ops=())
        else:
            boundary = BoundaryInfo.from_model(compiled, model_path)
            twin = cut_twin(boundary, find_twin(model_path, cpu_model_path))
        try:
            interpreter = Interpreter(model_content=twin.content, num_threads=self._num_threads)
            interpreter.allocate_tensors()
        except (RuntimeError, ValueError) as exc:  # the user's file: bad input (exit 2), not a backend fault
            raise ModelFormatError(f"LiteRT cannot load the cut twin {twin.path}: {exc}") from exc

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
            self._twin_spans = {}
            self._versions = {}

    def _interpreter_for(self, parameters: Any) -> Any:
        """LiteRT on the cut twin carrying ``parameters.twin`` (a ``reparam.ParameterSet``)."""
        from ai_edge_litert.interpreter import Interpreter

        from libredgetpu_ros.formats import load_model
        from libredgetpu_ros.reparam.twin import patch_twin_content, twin_tensor_span

        twin = self.twin
        missing = [i for i in parameters.twin if i not in self._twin_spans]
        if missing:
            model = load_model(twin.content)
            spans = dict(self._twin_spans)
            spans.update({i: twin_tensor_span(model, i) for i in missing})
            self._twin_spans = spans
        content = patch_twin_content(twin.content, self._twin_spans, parameters.twin)
        try:
            interpreter = Interpreter(model_content=content, num_threads=self._num_threads)
            interpreter.allocate_tensors()
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"LiteRT cannot load the re-parameterised twin {twin.path}: {exc}") from exc
        return interpreter

    def stage(self, parameters: Any) -> None:
        """Build the interpreter of a ``reparam.ParameterSet`` before it is published (errors refuse it)."""
        if not parameters.twin or parameters.version == 0 or parameters.key in self._versions:
            return
        interpreter = self._interpreter_for(parameters)
        with self._lock:
            self._versions[parameters.key] = interpreter
            while len(self._versions) > _KEPT_VERSIONS:
                del self._versions[next(iter(self._versions))]

    def run(self, inputs: Sequence[np.ndarray], parameters: Any = None) -> dict[str, np.ndarray]:
        """One inference; ``parameters`` (a ``reparam.ParameterSet``) selects the twin values to run with."""
        versioned = parameters is not None and bool(parameters.twin) and parameters.version != 0
        if versioned:
            self.stage(parameters)  # no-op when already built
        with self._lock:
            interpreter = self._interpreter
            if interpreter is None:
                raise BackendError("CPU backend: run() before load() or after close()")
            if versioned:
                interpreter = self._versions.get(parameters.key) or self._interpreter_for(parameters)
            checked = check_inputs(inputs, self._boundary.inputs)
            if len(checked) == 1:  # most models: the loop below (a strict zip) costs more than the check
                interpreter.set_tensor(self._input_indices[0], checked[0])
            else:
                for index, array in zip(self._input_indices, checked, strict=True):
                    interpreter.set_tensor(index, array)
            interpreter.invoke()
            if len(self._output_indices) == 1:
                name, index = self._output_indices[0]
                return {name: interpreter.get_tensor(index)}
            return {name: interpreter.get_tensor(index) for name, index in self._output_indices}

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"backend": self.name, "device": "cpu (LiteRT)", "choice": self.choice,
                                "fallback": self.fallback,
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
            self._versions = {}
