"""The backend interface and the Edge TPU boundary it runs up to.

A backend runs the part of a compiled model that the ``edgetpu-custom-op`` covers: it takes the op's input
tensors (quantized, shaped like the TFLite tensors) and returns the op's output tensors keyed by TFLite tensor
name, still quantized. Everything after the boundary (PoseNet decoding, DeepLab's tail, SSD box decoding) is
post-processing and is the same code for every backend, which makes CPU and Edge TPU results comparable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from libredgetpu_ros.errors import InputError, ModelFormatError
from libredgetpu_ros.reparam.store import ParameterTarget

EDGETPU_OPCODE = "edgetpu-custom-op"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor at the boundary: what a backend accepts or returns for it."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float
    zero_point: int

    def dequantize(self, values: np.ndarray) -> np.ndarray:
        """Real values of a quantized array of this tensor (float32)."""
        return (values.astype(np.float32) - np.float32(self.zero_point)) * np.float32(self.scale)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype.name,
                "scale": self.scale, "zero_point": self.zero_point}


def tensor_spec(tensor: Any) -> TensorSpec:
    """TensorSpec of a ``formats`` Tensor (per-tensor quantization: the first scale/zero point)."""
    quant = tensor.quantization
    scales = np.atleast_1d(np.asarray(quant.scale if quant is not None else [], dtype=np.float64))
    zeros = np.atleast_1d(np.asarray(quant.zero_point if quant is not None else [], dtype=np.int64))
    return TensorSpec(
        index=int(tensor.index),
        name=str(tensor.name),
        shape=tuple(int(d) for d in tensor.shape),
        dtype=np.dtype(tensor.dtype),
        scale=float(scales[0]) if scales.size else 0.0,
        zero_point=int(zeros[0]) if zeros.size else 0,
    )


@dataclass(frozen=True, slots=True)
class BoundaryInfo:
    """The Edge TPU op of a compiled model: its input/output tensors and the CPU ops around it."""

    model_path: Path | None
    op_index: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    cpu_ops_before: tuple[str, ...]
    cpu_ops_after: tuple[str, ...]

    @classmethod
    def from_model(cls, model: Any, model_path: Path | None = None) -> BoundaryInfo:
        """Boundary of a ``formats.TfliteModel``; exactly one Edge TPU op is supported per file."""
        where = str(model_path) if model_path is not None else "model"
        ops = list(model.edgetpu_ops())
        if len(ops) != 1:
            raise ModelFormatError(f"{where}: expected exactly one {EDGETPU_OPCODE}, found {len(ops)} "
                                   f"(is it compiled with edgetpu_compiler?)")
        op = ops[0]
        return cls(
            model_path=model_path,
            op_index=int(op.index),
            inputs=tuple(tensor_spec(model.tensors[i]) for i in op.inputs),
            outputs=tuple(tensor_spec(model.tensors[i]) for i in op.outputs),
            cpu_ops_before=tuple(o.opcode_name for o in model.cpu_ops_before(op)),
            cpu_ops_after=tuple(o.opcode_name for o in model.cpu_ops_after(op)),
        )

    @classmethod
    def from_graph(cls, model: Any, model_path: Path | None = None) -> BoundaryInfo:
        """The whole graph of an uncompiled model as the boundary (the CPU backend runs it as is)."""
        return cls(model_path=model_path, op_index=-1,
                   inputs=tuple(tensor_spec(model.tensors[i]) for i in model.inputs),
                   outputs=tuple(tensor_spec(model.tensors[i]) for i in model.outputs),
                   cpu_ops_before=(), cpu_ops_after=())

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
                "cpu_ops_before": list(self.cpu_ops_before), "cpu_ops_after": list(self.cpu_ops_after)}


def check_inputs(inputs: Sequence[np.ndarray], specs: Sequence[TensorSpec]) -> list[np.ndarray]:
    """Inputs reshaped (as views) to the boundary shapes; a wrong count, size or dtype is an InputError.

    A missing leading batch dimension of 1 is accepted, so callers may pass ``HxWxC`` images. One input at
    its exact shape and dtype (every frame a module or node has fitted to the model) is passed on as it is
    (read-only or strided too, as the general path would) without the per-input loop.
    """
    if len(inputs) == 1 == len(specs):
        array, spec = inputs[0], specs[0]
        if isinstance(array, np.ndarray) and array.shape == spec.shape and array.dtype == spec.dtype:
            return [array]
    if len(inputs) != len(specs):
        raise InputError(f"expected {len(specs)} input array(s) ({', '.join(s.name for s in specs)}), "
                         f"got {len(inputs)}")
    checked = []
    for array, spec in zip(inputs, specs, strict=True):
        if not isinstance(array, np.ndarray):  # a list or another library's tensor: said, no AttributeError
            raise InputError(f"input {spec.name!r}: a NumPy array is needed, got {type(array).__name__}")
        if array.dtype != spec.dtype:
            raise InputError(f"input {spec.name!r}: dtype {array.dtype} given, the model wants {spec.dtype}")
        if array.shape != spec.shape:
            if array.size != int(np.prod(spec.shape)) or array.shape != spec.shape[1:]:
                raise InputError(f"input {spec.name!r}: shape {array.shape} given, the model wants "
                                 f"{spec.shape}")
            array = array.reshape(spec.shape)
        checked.append(array)
    return checked


@runtime_checkable
class Backend(ParameterTarget, Protocol):
    """What the perception pipeline needs from a way of running the Edge TPU part of a model: an
    accelerator runner (``reparam.ParameterTarget``: ``stage(set)`` before a set is published, ``run`` with
    a set) chosen by ``choose`` (``name``, ``choice``, ``fallback``)."""

    name: str
    choice: str  # why choose() picked this backend ("auto: no Edge TPU attached", "cpu (requested)")
    fallback: str  # the same text when auto fell back to the CPU, else ""

    def load(self, model_path: Path, cpu_model_path: Path | None = None) -> None:
        """Load ``model_path`` (a compiled ``*_edgetpu.tflite``); ``cpu_model_path`` names its CPU twin."""

    def run(self, inputs: Sequence[np.ndarray], parameters: Any = None) -> dict[str, np.ndarray]:
        """One inference: Edge TPU op inputs in, op outputs (quantized, keyed by tensor name) out;
        ``parameters`` (a ``reparam.ParameterSet``) replaces the compiled parameters (see reparam/)."""

    def describe(self) -> dict[str, Any]:
        """Backend, device, model and twin paths, for logs and ``--json``."""

    def close(self) -> None:
        """Release the device / interpreter; the backend may not be used afterwards."""
