"""Dense(N) templates: the compiled model, its uncompiled twin and the JSON sidecar, loaded and cross-checked.

A template named ``dense_N`` is three files in one folder: ``dense_N_edgetpu.tflite`` (compiled by
``edgetpu_compiler``), ``dense_N.tflite`` (the int8 model it was compiled from) and ``dense_N_edgetpu.json``
(scales, zero points, ``param_size`` and the base64 ``param_overhead``). The quantization is read from the
uncompiled model: its weights carry one scale per output row even though the sidecar stores a single
``weight_scale``, and the per-row scales are the ones the compiled instructions use.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.matmul.blob import blob_size, overhead_multipliers, overhead_size, parse_blob
from libredgetpu_ros.matmul.twin import DenseQuantization
from libredgetpu_ros.models.templates import MAX_TEMPLATE_BYTES, base_name, resolve_template

if TYPE_CHECKING:
    from libredgetpu_ros.formats.darwinn import Executable
    from libredgetpu_ros.formats.tflite import Operator, Tensor, TfliteModel

COMPILED_SUFFIX = "_edgetpu.tflite"
SIDECAR_SUFFIX = "_edgetpu.json"
# Sidecar floats are float32 values printed as doubles; the overhead multipliers are rounded by the compiler.
_SCALE_RTOL = 1e-6
_MULTIPLIER_RTOL = 1e-5


def template_paths(template: int | str | Path, templates_dir: Path | None = None) -> tuple[Path, Path, Path]:
    """(compiled, uncompiled, sidecar) paths of a template: a size N, a name or either model's path.

    A size or bare name is looked up in ``templates_dir`` when given, else in the model cache,
    ``$LIBREDGETPU_ROS_TEMPLATES`` and the fixtures (models/templates.py: one ConfigError with the fetch
    command when it is nowhere)."""
    if isinstance(template, int):
        name = f"dense_{template}"
        base = Path(templates_dir) / name if templates_dir else resolve_template(name)
    else:
        path = Path(template)
        name = base_name(path.name)
        if path.parent == Path(".") and not path.exists():
            base = Path(templates_dir) / name if templates_dir else resolve_template(name)
        else:
            base = path.with_name(name)
    compiled = base.with_name(base.name + COMPILED_SUFFIX)
    uncompiled = base.with_name(base.name + ".tflite")
    sidecar = base.with_name(base.name + SIDECAR_SUFFIX)
    missing = [str(p) for p in (compiled, uncompiled, sidecar) if not p.is_file()]
    if missing:
        raise ModelFormatError(f"template {template!r} is incomplete: missing {', '.join(missing)} "
                               f"(a template is NAME_edgetpu.tflite + NAME.tflite + NAME_edgetpu.json; "
                               f"make one with `libredgetpu-ros template-gen`)")
    return compiled, uncompiled, sidecar


def _close(a: float, b: float, rtol: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=rtol, abs_tol=0.0)


@dataclass(frozen=True, eq=False)
class DenseTemplate:
    """A loaded, consistent Dense template (see the module docstring)."""

    compiled_path: Path
    uncompiled_path: Path
    sidecar_path: Path
    quant: DenseQuantization
    weights: np.ndarray  # int8 (rows, cols): the template's own weights, read-only
    overhead: np.ndarray  # uint8 (rows // 64 * 512,): weight-independent part of the parameter blob
    sidecar: dict[str, Any]
    compiled: TfliteModel

    @property
    def rows(self) -> int:
        return int(self.weights.shape[0])

    @property
    def cols(self) -> int:
        return int(self.weights.shape[1])

    @property
    def name(self) -> str:
        return self.uncompiled_path.stem

    @cached_property
    def executables(self) -> tuple[Executable, Executable]:
        """(PARAMETER_CACHING, EXECUTION_ONLY) executables of the compiled model's Edge TPU op."""
        from libredgetpu_ros.formats.darwinn import ExecutableType

        ops = self.compiled.edgetpu_ops()
        if len(ops) != 1:
            raise ModelFormatError(f"{self.compiled_path}: expected one edgetpu-custom-op, found {len(ops)}")
        package = self.compiled.darwinn(ops[0])
        caching = package.by_type(ExecutableType.PARAMETER_CACHING)
        execution = package.by_type(ExecutableType.EXECUTION_ONLY)
        if caching is None or execution is None:
            raise ModelFormatError(f"{self.compiled_path}: the DarwiNN package lacks a PARAMETER_CACHING or "
                                   f"EXECUTION_ONLY executable (compile the template with parameter caching)")
        return caching, execution

    def compiled_parameters(self) -> np.ndarray:
        """The PARAMETER_CACHING executable's parameter bytes as a uint8 view."""
        caching, _ = self.executables
        params = np.frombuffer(caching.parameters, dtype=np.uint8)
        if params.size != blob_size(self.rows, self.cols):
            raise ModelFormatError(f"{self.compiled_path}: PARAMETER_CACHING parameters have {params.size} "
                                   f"bytes, a ({self.rows}, {self.cols}) Dense blob has "
                                   f"{blob_size(self.rows, self.cols)}")
        return params


def load_template(template: int | str | Path, templates_dir: Path | None = None) -> DenseTemplate:
    """Load and cross-check a template; any inconsistency raises ModelFormatError naming file and field."""
    from libredgetpu_ros.formats import load_model

    compiled_path, uncompiled_path, sidecar_path = template_paths(template, templates_dir)
    sidecar = _read_sidecar(sidecar_path)
    model = load_model(uncompiled_path, MAX_TEMPLATE_BYTES)
    quant, weights = dense_quantization(model, uncompiled_path)
    rows, cols = weights.shape
    _check_sidecar(sidecar, sidecar_path, quant, rows, cols)
    compiled = load_model(compiled_path, MAX_TEMPLATE_BYTES)
    template_obj = DenseTemplate(compiled_path, uncompiled_path, sidecar_path, quant, weights,
                                 np.empty(0, np.uint8), sidecar, compiled)
    overhead = _sidecar_overhead(sidecar, sidecar_path, rows)
    if overhead is None:  # older sidecars: take it from the compiled blob itself
        _, overhead = parse_blob(template_obj.compiled_parameters(), rows, cols)
    multipliers = overhead_multipliers(overhead).astype(np.float64)
    expected = quant.multipliers().astype(np.float64)
    worst = int(np.argmax(np.abs(multipliers - expected) / expected))
    if not _close(multipliers[worst], expected[worst], _MULTIPLIER_RTOL):
        raise ModelFormatError(f"{sidecar_path}: param_overhead multiplier of row {worst} is "
                               f"{multipliers[worst]:.9g} but {uncompiled_path.name}'s scales give "
                               f"{expected[worst]:.9g}: sidecar and models are from different templates")
    overhead.setflags(write=False)
    return DenseTemplate(compiled_path, uncompiled_path, sidecar_path, quant, weights, overhead, sidecar,
                         compiled)


def _read_sidecar(path: Path) -> dict[str, Any]:
    from libredgetpu_ros.errors import TextDataError
    from libredgetpu_ros.textdata import load_json_file

    try:  # size, UTF-8 and nesting depth bounded (textdata.py)
        data = load_json_file(path, "template sidecar", max_bytes=1 << 20, max_depth=16)
    except TextDataError as exc:
        raise ModelFormatError(str(exc)) from None
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path}: the sidecar must be a JSON object")
    for key in ("matrix_size", "input_scale", "input_zero_point", "output_scale", "output_zero_point"):
        if not isinstance(data.get(key), int | float) or isinstance(data.get(key), bool):
            raise ModelFormatError(f"{path}: field {key!r} is missing or not a number ({data.get(key)!r})")
    return data


def _sidecar_overhead(sidecar: dict[str, Any], path: Path, rows: int) -> np.ndarray | None:
    encoded = sidecar.get("param_overhead")
    if encoded is None:
        return None
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, TypeError) as exc:
        raise ModelFormatError(f"{path}: param_overhead is not valid base64: {exc}") from exc
    if len(raw) != overhead_size(rows):
        raise ModelFormatError(f"{path}: param_overhead has {len(raw)} bytes, {rows} rows need "
                               f"{overhead_size(rows)}")
    return np.frombuffer(raw, dtype=np.uint8).copy()


def _single(tensor: Tensor, path: Path) -> tuple[float, int]:
    q = tensor.quantization
    if q is None or q.scale.size != 1:
        raise ModelFormatError(f"{path}: tensor {tensor.name!r} needs one quantization scale")
    return float(q.scale[0]), int(q.zero_point[0])


def _find_dense(model: TfliteModel, path: Path) -> Operator:
    dense = [op for op in model.operators if op.opcode_name == "FULLY_CONNECTED"]
    others = {op.opcode_name for op in model.operators} - {"FULLY_CONNECTED", "QUANTIZE"}
    if len(dense) != 1 or others:
        raise ModelFormatError(f"{path}: a Dense template has one FULLY_CONNECTED and QUANTIZE ops only, "
                               f"found {[op.opcode_name for op in model.operators]}")
    op = dense[0]
    activation = op.builtin_options.get("fused_activation_function", "NONE")
    if activation != "NONE":
        raise ModelFormatError(f"{path}: FULLY_CONNECTED has fused activation {activation}; "
                               f"templates need NONE")
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        raise ModelFormatError(f"{path}: FULLY_CONNECTED has a bias tensor; templates have none "
                               f"(the engine adds the bias on the host)")
    return op


def dense_quantization(model: TfliteModel, path: Path) -> tuple[DenseQuantization, np.ndarray]:
    """Boundary quantization and int8 weights of an uncompiled ``uint8 -> int8 Dense -> uint8`` template."""
    op = _find_dense(model, path)
    w_tensor = model.tensors[op.inputs[1]]
    weights = model.buffer_data(w_tensor)
    if weights is None or w_tensor.dtype != np.int8 or weights.ndim != 2:
        raise ModelFormatError(f"{path}: FULLY_CONNECTED weights {w_tensor.name!r} must be constant "
                               f"2-D int8, got {w_tensor.dtype} {w_tensor.shape}")
    rows, cols = weights.shape
    wq = w_tensor.quantization
    if wq is None or wq.scale.size not in (1, rows) or np.any(wq.zero_point != 0):
        raise ModelFormatError(f"{path}: weights {w_tensor.name!r} need symmetric per-row (or per-tensor) "
                               f"quantization with zero point 0")
    scales = np.broadcast_to(wq.scale.astype(np.float32), (rows,)).copy()
    if np.any(scales <= 0) or not np.all(np.isfinite(scales)):
        raise ModelFormatError(f"{path}: weights {w_tensor.name!r} have a non-positive or non-finite scale")
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise ModelFormatError(f"{path}: a Dense template has one input and one output")
    boundary = []
    for index, inner_index, role in ((model.inputs[0], op.inputs[0], "input"),
                                     (model.outputs[0], op.outputs[0], "output")):
        outer, inner = model.tensors[index], model.tensors[inner_index]
        size = cols if role == "input" else rows
        if outer.dtype != np.uint8 or math.prod(outer.shape) != size:
            raise ModelFormatError(f"{path}: model {role} {outer.name!r} must be uint8 with {size} values, "
                                   f"got {outer.dtype} {outer.shape}")
        scale, zp = _single(outer, path)
        inner_scale, inner_zp = _single(inner, path)
        shift = 128 if inner.dtype == np.int8 else 0
        # The QUANTIZE ops around the Dense op must only shift the zero point for the uint8 twin to hold.
        if not _close(scale, inner_scale, _SCALE_RTOL) or inner_zp != zp - shift:
            raise ModelFormatError(f"{path}: {role} QUANTIZE changes the scale ({scale} -> {inner_scale}) or "
                                   f"zero point ({zp} -> {inner_zp}); only a 128 shift is supported")
        boundary.append((scale, zp))
    (in_scale, in_zp), (out_scale, out_zp) = boundary
    weights = weights.copy()
    weights.setflags(write=False)
    scales.setflags(write=False)
    return DenseQuantization(in_scale, in_zp, out_scale, out_zp, scales), weights


def _check_sidecar(sidecar: dict[str, Any], path: Path, quant: DenseQuantization,
                   rows: int, cols: int) -> None:
    """The sidecar must describe the same matrix and boundary quantization as the uncompiled model."""
    if sidecar["matrix_size"] != rows or rows != cols:
        raise ModelFormatError(f"{path}: matrix_size {sidecar['matrix_size']} but the model's weights are "
                               f"({rows}, {cols})")
    pairs = (("input_scale", quant.input_scale), ("output_scale", quant.output_scale))
    for key, value in pairs:
        if not _close(sidecar[key], value, _SCALE_RTOL):
            raise ModelFormatError(f"{path}: {key} {sidecar[key]} does not match the model's {value}")
    for key, value in (("input_zero_point", quant.input_zero_point),
                       ("output_zero_point", quant.output_zero_point)):
        if int(sidecar[key]) != value:
            raise ModelFormatError(f"{path}: {key} {sidecar[key]} does not match the model's {value}")
    if "param_size" in sidecar and sidecar["param_size"] != blob_size(rows, cols):
        raise ModelFormatError(f"{path}: param_size {sidecar['param_size']} but a ({rows}, {cols}) blob has "
                               f"{blob_size(rows, cols)} bytes")
    if "weight_scale" in sidecar:  # informational only: one value standing for the per-row scales
        lo, hi = float(quant.weight_scales.min()), float(quant.weight_scales.max())
        if not lo * (1 - _SCALE_RTOL) <= float(sidecar["weight_scale"]) <= hi * (1 + _SCALE_RTOL):
            raise ModelFormatError(f"{path}: weight_scale {sidecar['weight_scale']} is outside the model's "
                                   f"per-row scales [{lo}, {hi}]")
