"""Rebuild a conformance case from its ``CASE.json`` through the Python API (every listed TpuLang call with
its arguments), so the MLIR and npz we write can be compared with the ones tpu-mlir wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.paths import check_regular
from libredgetpu_ros.sophgo import ops, ops_quant
from libredgetpu_ros.sophgo.emitter import save_module
from libredgetpu_ros.sophgo.graph import Tensor, build_module, private_graph, weights_of
from libredgetpu_ros.sophgo.ir import Module, TpuLangError
from libredgetpu_ros.sophgo.npz_reader import read_npz
from libredgetpu_ros.textdata import clip, clip_repr, load_json_file

FUNCTIONS = {name: getattr(ops, name) for name in (
    "conv", "conv_int", "conv_quant", "matmul", "matmul_int", "relu", "maxpool2d", "avgpool2d", "softmax",
    "add",
    "concat", "reshape", "permute")}
FUNCTIONS.update({name: getattr(ops_quant, name) for name in (
    "requant_int", "requant_fp", "dequant_int_to_fp", "requant_fp_to_int")})


def load_case(path: str | Path) -> dict:
    """The CASE.json object (size, nesting depth and UTF-8 checked by :mod:`textdata`)."""
    path = Path(path)
    case = load_json_file(path, "CASE.json")
    shown = clip(str(path))
    if not isinstance(case, dict):
        raise TpuLangError(f"{shown}: not a JSON object")
    for key in ("case", "mode", "inputs", "weights", "ops", "outputs"):
        if key not in case:
            raise TpuLangError(f"{shown}: missing field {key!r}")
    return case


def _resolve(value: Any, tensors: dict[str, Tensor], where: str) -> Any:
    if isinstance(value, dict) and set(value) == {"tensor"}:
        if not isinstance(value["tensor"], str) or value["tensor"] not in tensors:
            raise TpuLangError(f"{where}: tensor {clip_repr(value['tensor'])} is not defined before this "
                               f"call")
        return tensors[value["tensor"]]
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [_resolve(v, tensors, where) for v in value]
    return value


# A CASE.json is user input: malformed entries (missing keys, wrong JSON types) become a TpuLangError naming
# the entry instead of a KeyError/TypeError from deep inside.
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError)


def _tensor(spec: Any, where: str, **extra: Any) -> Tensor:
    try:
        return Tensor(spec["shape"], name=spec["name"], dtype=spec["dtype"], scale=spec.get("scale"),
                      zero_point=spec.get("zero_point"), **extra)
    except _MALFORMED as exc:
        raise TpuLangError(f"{where}: malformed entry ({type(exc).__name__}: {exc})") from None


def replay_case(path: str | Path,
                weights_npz: str | Path | None = None) -> tuple[Module, dict[str, np.ndarray]]:
    """(module, weights) rebuilt from ``CASE.json``; weight values come from the case's own weight npz."""
    path = Path(path)
    case = load_case(path)
    files = case.get("files") if isinstance(case.get("files"), dict) else {}
    npz_path = Path(weights_npz) if weights_npz else path.parent / str(files.get("weights", ""))
    if case["weights"]:
        check_regular(npz_path, "weight npz", error=TpuLangError)
    keys = [spec.get("npz_key", spec.get("name")) for spec in _entries(case, "weights", path)
            if isinstance(spec, dict)]
    stored = read_npz(npz_path, "weight npz", names=[k for k in keys if isinstance(k, str)]) \
        if case["weights"] else {}
    with private_graph() as graph:
        tensors: dict[str, Tensor] = {}
        for index, spec in enumerate(_entries(case, "inputs", path)):
            tensor = _tensor(spec, f"{path.name} inputs[{index}]")
            tensors[tensor.name] = tensor
        for index, spec in enumerate(_entries(case, "weights", path)):
            where = f"{path.name} weights[{index}]"
            key = spec.get("npz_key", spec.get("name")) if isinstance(spec, dict) else None
            if not isinstance(key, str) or key not in stored:
                raise TpuLangError(f"{where}: key {clip_repr(key)} missing from {clip(npz_path)}")
            tensor = _tensor(spec, where, ttype="coeff", data=stored[key])
            tensors[tensor.name] = tensor
        for index, call in enumerate(_entries(case, "ops", path)):
            func = call.get("tpulang_func") if isinstance(call, dict) else None
            where = f"{path.name} ops[{index}] ({func})"
            if not isinstance(func, str) or func not in FUNCTIONS:
                raise TpuLangError(f"{where}: unsupported TpuLang function")
            raw_args = call.get("args", {})
            if not isinstance(raw_args, dict):
                raise TpuLangError(f"{where}: args must be an object")
            args = {k: _resolve(v, tensors, where) for k, v in raw_args.items()}
            try:
                out = FUNCTIONS[func](**args)
            except _MALFORMED as exc:
                raise TpuLangError(f"{where}: {type(exc).__name__}: {exc}") from None
            tensors[out.name] = out
        try:
            outputs = [tensors[name] for name in case["outputs"]]
            inputs = [tensors[spec["name"]] for spec in case["inputs"]]
        except _MALFORMED as exc:
            raise TpuLangError(f"{path.name}: outputs/inputs name unknown tensors ({exc})") from None
        module = build_module(str(case["case"]), inputs, outputs, quantized=case["mode"] != "f32")
        return module, weights_of(graph)


def _entries(case: dict, key: str, path: Path) -> list:
    if not isinstance(case[key], list):
        raise TpuLangError(f"{path.name}: {key} must be a list")
    return case[key]


def replay_to_dir(path: str | Path, out_dir: str | Path) -> tuple[Path, Path]:
    module, weights = replay_case(path)
    return save_module(module, weights, out_dir)
