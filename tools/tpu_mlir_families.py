#!/usr/bin/env python3
"""Random families of the ops issue 38 made equal to the deployed chip, through tpu-mlir 1.30.2 to bm1684x.

Part of ``make tpu-mlir-check`` (opt-in, not ``make test``), after ``tpu_mlir_check.py``. Each family builds
small random TpuLang graphs with this package, deploys them (the pipeline of ``tpu_mlir_check.py``), runs
them on the bm1684x cmodel and compares with our executor: integers exactly, floats within 1e-5.

  maxpool_q    int8 maxpool with scale=[in, out] (the chip: the plain maximum)
  avgpool_q    int8 avgpool with scale=[in, out], pads, strides, count_include_pad, round modes
  concat_q     int8/uint8 concat of differently quantized inputs, with and without a result dtype, also of
               requant_int results (mid-graph)
  conv_quant   per-channel and per-tensor conv_quant (QuantizeMultiplier fixed point)
  matmul_t     f32 matmul with right transposes and batches (input/output_transpose are refused: counted)
  shape_copy   f32 relu/softmax chains on graph inputs (TpuLang's ranked results)

A graph this package refuses is counted as refused (docs/sophgo.md says why); a graph tpu-mlir itself
fails to deploy is listed with its tool's message.

    .venv/bin/python tools/tpu_mlir_families.py [--per-family 4] [--seed 1] [--only concat_q ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tpu_mlir_check as check  # a sibling script, not a package
from tpu_mlir_random import _ops  # the graph's ops with their attributes, to reproduce a failure


def _case(name: str, inputs: list, outputs: list, feed: dict, out: Path,
          quantized: bool = True) -> check.Case:
    from libredgetpu_ros.sophgo.emitter import save_module

    from libredgetpu_ros import sophgo as tpul

    try:
        module, weights = tpul.build(name, inputs, outputs, quantized)
    finally:
        tpul.deinit()
    mlir, npz = save_module(module, weights, out)
    return check.Case(name, mlir, npz, "INT8" if quantized else "F32", [feed])


def _scale(rng: np.random.Generator) -> float:
    return round(float(rng.uniform(0.01, 0.2)), 4)


def _int8(rng: np.random.Generator, shape: tuple, dtype: str = "int8") -> np.ndarray:
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    return rng.integers(lo, hi, shape).astype(dtype)


def _pool_args(rng: np.random.Generator, h: int, w: int) -> tuple[list, list, list]:
    kernel = [int(rng.integers(1, min(h, 3) + 1)), int(rng.integers(1, min(w, 3) + 1))]
    stride = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    pads = [int(rng.integers(0, kernel[0])), int(rng.integers(0, kernel[1])), int(rng.integers(0, kernel[0])),
            int(rng.integers(0, kernel[1]))]
    return kernel, stride, pads


def maxpool_q(name: str, rng: np.random.Generator, out: Path) -> check.Case:
    from libredgetpu_ros import sophgo as tpul

    h, w = int(rng.integers(3, 8)), int(rng.integers(3, 8))
    kernel, stride, pads = _pool_args(rng, h, w)
    tpul.init(check.CHIP)
    x = tpul.Tensor([1, 2, h, w], name="x", dtype="int8")
    y = tpul.maxpool2d(x, kernel, stride, pads, ceil_mode=bool(rng.random() < 0.3),
                       scale=[_scale(rng), _scale(rng)], zero_point=[int(v) for v in rng.integers(-8, 9, 2)],
                       out_name="pool")
    return _case(name, [x], [y], {"x": _int8(rng, (1, 2, h, w))}, out)


def avgpool_q(name: str, rng: np.random.Generator, out: Path) -> check.Case:
    from libredgetpu_ros import sophgo as tpul

    h, w = int(rng.integers(4, 9)), int(rng.integers(4, 9))
    kernel, stride, pads = _pool_args(rng, h, w)
    same = rng.random() < 0.3
    si, so = _scale(rng), _scale(rng)
    zi, zo = int(rng.integers(-10, 11)), int(rng.integers(-10, 11))
    tpul.init(check.CHIP)
    x = tpul.Tensor([1, 2, h, w], name="x", dtype="int8")
    y = tpul.avgpool2d(x, kernel, stride, pads, count_include_pad=bool(rng.random() < 0.5),
                       scale=[si, si if same else so], zero_point=[zi, zi if same else zo],
                       round_mode=str(rng.choice(["half_away_from_zero", "half_to_even"])), out_name="pool")
    return _case(name, [x], [y], {"x": _int8(rng, (1, 2, h, w))}, out)


def concat_q(name: str, rng: np.random.Generator, out: Path) -> check.Case:
    from libredgetpu_ros import sophgo as tpul

    dtype = "int8" if rng.random() < 0.6 else "uint8"
    count = int(rng.integers(2, 4))
    zps = ([int(v) for v in rng.integers(-10, 11, count + 1)] if dtype == "int8" else
           [int(v) for v in rng.integers(100, 156, count + 1)])
    scales = [_scale(rng) for _ in range(count + 1)]
    result = str(rng.choice(["float32", dtype]))  # TpuLang's default: an unquantized result
    tpul.init(check.CHIP)
    mid = dtype == "int8" and rng.random() < 0.4  # the first input is a requant_int result
    inputs, parts, feed = [], [], {}
    for i in range(count):
        if i == 0 and mid:
            t = tpul.Tensor([1, 2, 3, 3], name="acc", dtype="int32")
            feed["acc"] = rng.integers(-40000, 40000, (1, 2, 3, 3)).astype(np.int32)
            parts.append(tpul.requant_int(t, int(rng.integers(1, 2**14)), -int(rng.integers(8, 14)),
                                          zps[0], 2, out_dtype="int8", out_name="rq"))
        else:
            t = tpul.Tensor([1, i + 1, 3, 3], name=f"in{i}", dtype=dtype)
            feed[f"in{i}"] = _int8(rng, (1, i + 1, 3, 3), dtype)
            parts.append(t)
        inputs.append(t)
    y = tpul.concat(parts, scales=scales, zero_points=zps, axis=1, dtype=result, out_name="cat")
    return _case(name, inputs, [y], feed, out)


def conv_quant(name: str, rng: np.random.Generator, out: Path) -> check.Case:
    from libredgetpu_ros import sophgo as tpul

    cin, cout, k = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
    tpul.init(check.CHIP)
    x = tpul.Tensor([1, cin, 6, 6], name="x", dtype="int8")
    w = tpul.Tensor(name="w", ttype="coeff", dtype="int8", data=_int8(rng, (cout, cin, k, k)))
    b = tpul.Tensor(name="b", ttype="coeff", dtype="int32",
                    data=rng.integers(-3000, 3000, cout).astype(np.int32))
    ws = [_scale(rng) / 10 for _ in range(cout)] if rng.random() < 0.6 else _scale(rng) / 10
    y = tpul.conv_quant(x, w, b, stride=[int(rng.integers(1, 3))] * 2, pad=[k // 2] * 4,
                        input_scale=_scale(rng), weight_scale=ws, output_scale=_scale(rng) * 3,
                        input_zp=int(rng.integers(-5, 6)), output_zp=int(rng.integers(-5, 6)), out_name="cq")
    return _case(name, [x], [y], {"x": _int8(rng, (1, cin, 6, 6))}, out)


def matmul_t(name: str, rng: np.random.Generator, out: Path) -> check.Case:
    from libredgetpu_ros import sophgo as tpul

    batch, m, k, n = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 6)), \
        int(rng.integers(1, 5))
    left_t, right_t = bool(rng.random() < 0.2), bool(rng.random() < 0.5)
    a_shape = (batch, k, m) if left_t else (batch, m, k)
    tpul.init(check.CHIP)
    a = tpul.Tensor(list(a_shape), name="a")
    w = tpul.Tensor(name="w", ttype="coeff",
                    data=rng.standard_normal((n, k) if right_t else (k, n)).astype(np.float32))
    bias = tpul.Tensor(name="bias", ttype="coeff", data=rng.standard_normal(n).astype(np.float32))
    y = tpul.matmul(a, w, bias, input_transpose=left_t, right_transpose=right_t,
                    output_transpose=bool(rng.random() < 0.2), out_name="y")
    return _case(name, [a], [y], {"a": rng.standard_normal(a_shape).astype(np.float32)}, out, quantized=False)


def shape_copy(name: str, rng: np.random.Generator, out: Path) -> check.Case:
    from libredgetpu_ros import sophgo as tpul

    shape = [1, int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(1, 5))]
    tpul.init(check.CHIP)
    x = tpul.Tensor(shape, name="x")
    y = tpul.softmax(tpul.relu(x, out_name="r"), int(rng.integers(1, 4)), out_name="y")
    return _case(name, [x], [y], {"x": rng.standard_normal(shape).astype(np.float32)}, out, quantized=False)


FAMILIES: dict[str, Callable[[str, np.random.Generator, Path], check.Case]] = {
    f.__name__: f for f in (maxpool_q, avgpool_q, concat_q, conv_quant, matmul_t, shape_copy)}


def main(argv: list[str] | None = None) -> int:
    from libredgetpu_ros.sophgo.ir import TpuLangError

    from libredgetpu_ros import sophgo as tpul

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=check.default_cache())
    parser.add_argument("--wheel", type=Path, default=None)
    parser.add_argument("--per-family", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args(argv)
    root = check.ensure_toolchain(args.cache, args.wheel)
    env = check.tool_env(root)
    rng = np.random.default_rng(args.seed)
    lines, failed = [], 0
    with tempfile.TemporaryDirectory(prefix="tpu_mlir_families_") as tmp:
        work = Path(tmp)
        for family, build in FAMILIES.items():
            if args.only and family not in args.only:
                continue
            equal = refused = tool_fails = 0
            notes = []
            for index in range(args.per_family):
                name = f"{family}_{index}"
                try:
                    case = build(name, rng, work / "src")
                except TpuLangError as exc:
                    tpul.deinit()
                    refused += 1
                    notes.append(f"{name} refused: {str(exc)[:160]}")
                    continue
                result = check.run_case(root, env, case.name, case.mlir, case.weights, case.mode, work)
                if not result.ok:
                    tool_fails += 1
                    notes.append(f"{name} tpu-mlir fails at {result.failed_step}: {result.message[:200]}\n"
                                 f"        {_ops(case.mlir)[:600]}")
                    continue
                run = check.run_on_cmodel(root, env, case, work)
                if run.startswith(check.REFUSED):
                    refused += 1
                    notes.append(f"{name} {run[:200]}")
                    continue
                if run.startswith("cmodel = our executor on"):
                    equal += 1
                else:
                    failed += 1
                    notes.append(f"{name}: {run}\n        {_ops(case.mlir)[:600]}")
            deployed = args.per_family - refused - tool_fails
            lines.append(f"{family}: {equal}/{deployed} deployed graphs equal to the bm1684x cmodel "
                         f"({refused} refused by this package, {tool_fails} not deployable by tpu-mlir)")
            lines.extend("    " + note for note in notes)
    print(f"tpu-mlir {check.VERSION} random families, seed {args.seed}, {args.per_family} graphs each")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
