"""Generate Dense(N) templates: write the uncompiled model ourselves, compile it, write the sidecar.

Only compilation needs Google's ``edgetpu_compiler`` (x86-64 Linux). Without it the uncompiled model is
still written; compile it on an x86-64 machine (``edgetpu_compiler -s dense_N.tflite``), put the result
beside it and rerun: an existing ``dense_N_edgetpu.tflite`` is reused and only the sidecar is written.
"""

from __future__ import annotations

import base64
import json
import math
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from libredgetpu_ros.atomicio import atomic_write_bytes, atomic_write_text, make_folder
from libredgetpu_ros.errors import ConfigError, ModelFormatError
from libredgetpu_ros.matmul.blob import blob_size, check_dense_shape, parse_blob
from libredgetpu_ros.matmul.template import (
    COMPILED_SUFFIX,
    SIDECAR_SUFFIX,
    DenseTemplate,
    dense_quantization,
    load_template,
)
from libredgetpu_ros.matmul.tflite_writer import dense_template_tflite

COMPILER = "edgetpu_compiler"
COMPILER_HELP = ("install it from https://coral.ai/docs/edgetpu/compiler/ (Debian package edgetpu-compiler; "
                 "x86-64 Linux only, there is no ARM build)")
_ZERO_POINT = 127  # uint8 zero point for the symmetric input/output ranges, as in the fixture templates


@dataclass(frozen=True)
class DenseSpec:
    """Quantization ranges of a generated Dense(n) template."""

    n: int
    input_range: float = 1.0  # inputs in [-input_range, input_range]
    weight_range: float | None = None  # |w| <= weight_range; default Glorot-uniform limit sqrt(3 / n)
    output_range: float | None = None  # default weight_range * input_range * sqrt(n) (3 sigma, uniform W, x)
    seed: int = 0

    def resolved(self) -> tuple[float, float, float]:
        w = self.weight_range if self.weight_range is not None else math.sqrt(6.0 / (2 * self.n))
        out = self.output_range if self.output_range is not None else w * self.input_range * math.sqrt(self.n)
        for name, value in (("input_range", self.input_range), ("weight_range", w), ("output_range", out)):
            if not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"{name} must be a positive finite number, got {value}")
        return self.input_range, w, out


def write_uncompiled(spec: DenseSpec, out_dir: Path) -> Path:
    """Write ``dense_N.tflite`` (random int8 weights, one scale per row) and return its path."""
    check_dense_shape(spec.n, spec.n)
    input_range, weight_range, output_range = spec.resolved()
    rng = np.random.default_rng(spec.seed)
    weights = rng.integers(-127, 128, size=(spec.n, spec.n), dtype=np.int8)
    scales = np.full(spec.n, weight_range / 127.0, dtype=np.float32)
    data = dense_template_tflite(weights, scales, 2 * input_range / 255, _ZERO_POINT,
                                 2 * output_range / 255, _ZERO_POINT)
    make_folder(out_dir)
    path = out_dir / f"dense_{spec.n}.tflite"
    atomic_write_bytes(path, data)
    return path


def compile_model(uncompiled: Path) -> Path:
    """Run ``edgetpu_compiler`` next to ``uncompiled``; ConfigError when the compiler is missing or fails."""
    compiled = uncompiled.with_name(uncompiled.stem + COMPILED_SUFFIX)
    exe = shutil.which(COMPILER)
    if exe is None:
        if compiled.is_file():
            return compiled
        raise ConfigError(f"{COMPILER} not found on PATH: {COMPILER_HELP}. {uncompiled} was written; "
                          f"compile it with `{COMPILER} -s -o {uncompiled.parent} {uncompiled}` on an x86-64 "
                          f"machine, copy {compiled.name} beside it and rerun to write the sidecar")
    result = subprocess.run([exe, "-s", "-o", str(uncompiled.parent), str(uncompiled)],
                            capture_output=True, text=True, check=False, timeout=600)
    if result.returncode != 0 or not compiled.is_file():
        raise ConfigError(f"{COMPILER} failed on {uncompiled} (exit {result.returncode}): "
                          f"{(result.stderr or result.stdout).strip()[-500:]}")
    return compiled


def write_sidecar(spec: DenseSpec, uncompiled: Path, compiled: Path) -> Path:
    """Write ``dense_N_edgetpu.json`` from the models (overhead taken from the compiled blob), then verify."""
    from libredgetpu_ros.formats import load_model

    quant, weights = dense_quantization(load_model(uncompiled), uncompiled)
    view = DenseTemplate(compiled, uncompiled, compiled, quant, weights, np.empty(0, np.uint8), {},
                         load_model(compiled))
    _, overhead = parse_blob(view.compiled_parameters(), spec.n, spec.n)
    sidecar = {
        "matrix_size": spec.n,
        "weight_scale": float(np.mean(quant.weight_scales)),
        "weight_zero_point": 0,
        "input_scale": quant.input_scale,
        "input_zero_point": quant.input_zero_point,
        "output_scale": quant.output_scale,
        "output_zero_point": quant.output_zero_point,
        "use_bias": False,
        "param_size": blob_size(spec.n, spec.n),
        "param_overhead": base64.b64encode(overhead.tobytes()).decode("ascii"),
    }
    path = uncompiled.with_name(uncompiled.stem + SIDECAR_SUFFIX)
    atomic_write_text(path, json.dumps(sidecar, indent=2) + "\n")
    try:
        load_template(compiled)
    except ModelFormatError as exc:
        raise ModelFormatError(f"generated template {uncompiled.stem} does not check out: {exc}") from exc
    return path


def generate(spec: DenseSpec, out_dir: Path, compile_it: bool = True) -> dict[str, str]:
    """Write a whole template (only the uncompiled model when ``compile_it`` is False); return its paths."""
    uncompiled = write_uncompiled(spec, out_dir)
    paths = {"uncompiled": str(uncompiled)}
    if compile_it:
        compiled = compile_model(uncompiled)
        paths["compiled"] = str(compiled)
        paths["sidecar"] = str(write_sidecar(spec, uncompiled, compiled))
    return paths
