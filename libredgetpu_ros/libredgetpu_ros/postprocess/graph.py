"""Model-graph helpers shared by the post-processors: find ops, read quantization, check backend outputs.

Everything here works on a ``libredgetpu_ros.formats.TfliteModel``; nothing is hard-coded per model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.errors import InputError, ModelFormatError


def model_label(model: Any) -> str:
    """How error messages name a model (its file when the reader knows it)."""
    for attr in ("path", "source", "name"):
        value = getattr(model, attr, None)
        if value:
            return str(value)
    return "model"


def ops_named(model: Any, opcode_name: str) -> list[Any]:
    """Every operator of ``model`` whose opcode (builtin or custom name) is ``opcode_name``."""
    return [op for op in model.operators if op.opcode_name == opcode_name]


def require_op(model: Any, opcode_name: str, purpose: str) -> Any:
    """The single ``opcode_name`` op of ``model``; ModelFormatError naming what is missing otherwise."""
    found = ops_named(model, opcode_name)
    if not found:
        present = sorted({op.opcode_name for op in model.operators})
        raise ModelFormatError(f"{model_label(model)}: no {opcode_name} op, needed for {purpose} "
                               f"(ops present: {', '.join(present) or 'none'})")
    if len(found) > 1:
        raise ModelFormatError(f"{model_label(model)}: {len(found)} {opcode_name} ops, expected one")
    return found[0]


def custom_option(model: Any, op: Any, key: str) -> Any:
    """A value of a custom op's FlexBuffers options map; ModelFormatError if absent."""
    options = op.custom_options
    if not isinstance(options, Mapping) or key not in options:
        raise ModelFormatError(f"{model_label(model)}: {op.opcode_name} custom options lack {key!r}")
    return options[key]


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """What the post-processor expects for one boundary tensor (name, shape, dtype, per-tensor quant)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float
    zero_point: int

    @classmethod
    def of(cls, model: Any, index: int) -> TensorSpec:
        tensor = model.tensors[index]
        scale, zero_point = per_tensor_quant(model, tensor)
        shape = tuple(int(d) for d in tensor.shape)
        return cls(tensor.name, shape, np.dtype(tensor.dtype), scale, zero_point)

    def dequantize(self, raw: np.ndarray, extra_scale: float = 1.0,
                   out: np.ndarray | None = None) -> np.ndarray:
        """``(q - zero_point) * scale * extra_scale`` in float32 (as TFLite's kernels compute it); into
        ``out`` (float32, ``raw``'s shape, e.g. a view of a larger buffer) when given."""
        if raw.dtype.kind == "f":
            return np.multiply(raw, np.float32(extra_scale), out=out, dtype=np.float32)
        scale = np.float32(self.scale) * np.float32(extra_scale)
        result = np.subtract(raw, np.float32(self.zero_point), out=out, dtype=np.float32)
        return np.multiply(result, scale, out=result)


def per_tensor_quant(model: Any, tensor: Any) -> tuple[float, int]:
    """(scale, zero_point) of a per-tensor quantized tensor; (1.0, 0) for float tensors."""
    quant = getattr(tensor, "quantization", None)
    scales = np.asarray(quant.scale if quant is not None else [], dtype=np.float64).ravel()
    zeros = np.asarray(quant.zero_point if quant is not None else [], dtype=np.int64).ravel()
    if scales.size == 0:
        if np.dtype(tensor.dtype).kind == "f":
            return 1.0, 0
        raise ModelFormatError(f"{model_label(model)}: tensor {tensor.name!r} is {np.dtype(tensor.dtype)} "
                               "but has no quantization parameters")
    if scales.size != 1:
        raise ModelFormatError(f"{model_label(model)}: tensor {tensor.name!r} has {scales.size} scales, "
                               "expected per-tensor quantization")
    return float(scales[0]), int(zeros[0]) if zeros.size else 0


def take_outputs(outputs: Mapping[str, np.ndarray], specs: Sequence[TensorSpec],
                 consumer: str) -> list[np.ndarray]:
    """The arrays for ``specs`` from a backend's output dict; InputError on a missing name or bad shape."""
    if not isinstance(outputs, Mapping):
        raise InputError(f"{consumer}: outputs must be a dict of tensor name -> array, got {type(outputs)}")
    arrays = []
    for spec in specs:
        if spec.name not in outputs:
            raise InputError(f"{consumer}: outputs lack tensor {spec.name!r} "
                             f"(got: {', '.join(sorted(outputs)) or 'nothing'})")
        array = np.asarray(outputs[spec.name])
        if array.shape != spec.shape:
            raise InputError(f"{consumer}: tensor {spec.name!r} has shape {array.shape}, "
                             f"expected {spec.shape}")
        if array.dtype != spec.dtype and array.dtype.kind != "f":
            raise InputError(f"{consumer}: tensor {spec.name!r} has dtype {array.dtype}, "
                             f"expected {spec.dtype}")
        arrays.append(array)
    return arrays
