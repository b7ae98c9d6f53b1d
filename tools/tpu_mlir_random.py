#!/usr/bin/env python3
"""Random TpuLang graphs of this package, deployed by tpu-mlir 1.30.2 to bm1684x and run on its cmodel.

Widens ``tpu_mlir_check.py`` (same toolchain, same comparison with our executor) beyond the fixed cases:
float conv -> relu -> max/avg pool graphs (random kernels, strides, pads, dilations, groups, ceil_mode,
count_include_pad, kernel=None) and integer conv_int -> per-channel requant_int -> relu -> quantized
max/avg pool and matmul_int -> requant_int graphs (random zero points, multipliers, shifts). Not part of
the suite:

    .venv/bin/python tools/tpu_mlir_random.py --cache DIR --graphs 40 --seed 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tpu_mlir_check as check  # a sibling script, not a package


def float_graph(index: int, rng: np.random.Generator, out: Path) -> check.Case:
    from libredgetpu_ros.sophgo.emitter import save_module
    from libredgetpu_ros.sophgo.ir import TpuLangError

    from libredgetpu_ros import sophgo as tpul

    group = int(rng.choice([1, 1, 2]))
    cin, cout = group * int(rng.integers(1, 4)), group * int(rng.integers(1, 4))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    h, w = int(rng.integers(6, 14)), int(rng.integers(6, 14))
    tpul.init(check.CHIP)
    x = tpul.Tensor([1, cin, h, w], name="x")
    weight = tpul.Tensor(name="w", ttype="coeff",
                         data=rng.standard_normal((cout, cin // group, kh, kw)).astype(np.float32))
    bias = tpul.Tensor(name="b", ttype="coeff", data=rng.standard_normal(cout).astype(np.float32))
    y = tpul.conv(x, weight, bias, stride=[int(rng.integers(1, 3)), int(rng.integers(1, 3))],
                  dilation=[int(rng.integers(1, 3)), 1], pad=[int(v) for v in rng.integers(0, 2, 4)],
                  group=group, out_name="conv")
    y = tpul.relu(y, out_name="relu")
    pk = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
    pads = [int(rng.integers(0, pk[0])), int(rng.integers(0, pk[1])), int(rng.integers(0, pk[0])),
            int(rng.integers(0, pk[1]))]
    kernel = None if rng.random() < 0.1 else pk
    stride = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
    ceil_mode = bool(rng.random() < 0.5)
    try:
        if rng.random() < 0.5:
            y = tpul.maxpool2d(y, kernel, stride, pads, ceil_mode=ceil_mode, out_name="pool")
        else:
            y = tpul.avgpool2d(y, kernel, stride, pads, ceil_mode=ceil_mode,
                               count_include_pad=bool(rng.random() < 0.5), out_name="pool")
    except TpuLangError:  # refused: draw the input anyway, so the next graphs stay those of the seed
        rng.standard_normal((1, cin, h, w))
        raise
    module, weights = tpul.build(f"rand_f{index}", [x], [y], quantized=False)
    tpul.deinit()
    mlir, npz = save_module(module, weights, out / module.name)
    return check.Case(module.name, mlir, npz, "F32",
                      [{"x": rng.standard_normal((1, cin, h, w)).astype(np.float32)}])


def int_graph(index: int, rng: np.random.Generator, out: Path) -> check.Case:
    from libredgetpu_ros.sophgo.emitter import save_module

    from libredgetpu_ros import sophgo as tpul

    tpul.init(check.CHIP)
    zp_in = int(rng.integers(-10, 11))
    if rng.random() < 0.5:
        cin, cout, k = int(rng.integers(1, 5)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
        x = tpul.Tensor([1, cin, 9, 9], name="x", dtype="int8")
        weight = tpul.Tensor(name="w", ttype="coeff", dtype="int8",
                             data=rng.integers(-128, 128, (cout, cin, k, k)).astype(np.int8))
        bias = tpul.Tensor(name="b", ttype="coeff", dtype="int32",
                           data=rng.integers(-5000, 5000, cout).astype(np.int32))
        # weight_zp: tpu-mlir lowers a conv_int only with a quantized weight type (a plain si8 weight
        # asserts in the INT8 lowering: cast<UniformQuantizedType>)
        acc = tpul.conv_int(x, weight, bias, stride=[int(rng.integers(1, 3))] * 2, pad=[k // 2] * 4,
                            input_zp=zp_in, weight_zp=int(rng.integers(-3, 4)), out_name="acc")
        channels = cout
        shape = (1, cin, 9, 9)
    else:
        rows, cols = int(rng.integers(1, 6)), int(rng.integers(2, 40))
        channels = int(rng.integers(1, 20))
        x = tpul.Tensor([rows, cols], name="x", dtype="int8")
        weight = tpul.Tensor(name="w", ttype="coeff", dtype="int8", scale=0.01,
                             data=rng.integers(-128, 128, (cols, channels)).astype(np.int8))
        acc = tpul.matmul_int(x, weight, input_zp=zp_in, out_name="acc")
        shape = (rows, cols)
    per_channel = len(shape) == 4 and rng.random() < 0.7
    count = channels if per_channel else 1
    mul = [int(v) for v in rng.integers(1, 2**15, count)]
    shift = [-int(v) for v in rng.integers(8, 20, count)]
    offset = int(rng.integers(-20, 21))
    y = tpul.requant_int(acc, mul, shift, offset, 2, out_dtype="int8", out_name="rq",
                         round_mode=str(rng.choice(["half_away_from_zero", "half_to_even"])))
    if rng.random() < 0.5:
        y = tpul.relu(y, out_name="relu")
    if len(shape) == 4 and rng.random() < 0.6:  # a quantized pool, same scale in and out
        kernel = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        pool = tpul.maxpool2d if rng.random() < 0.5 else tpul.avgpool2d
        y = pool(y, kernel, [int(rng.integers(1, 3))] * 2, [0, 0, int(kernel[0] > 1), int(kernel[1] > 1)],
                 ceil_mode=bool(rng.random() < 0.3), scale=[0.5, 0.5], zero_point=[offset, offset],
                 out_name="pool")
    module, weights = tpul.build(f"rand_q{index}", [x], [y], quantized=True)
    tpul.deinit()
    mlir, npz = save_module(module, weights, out / module.name)
    return check.Case(module.name, mlir, npz, "INT8", [{"x": rng.integers(-128, 128, shape).astype(np.int8)}])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=check.default_cache())
    parser.add_argument("--wheel", type=Path, default=None)
    parser.add_argument("--graphs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    root = check.ensure_toolchain(args.cache, args.wheel)
    env = check.tool_env(root)
    rng = np.random.default_rng(args.seed)
    from libredgetpu_ros.sophgo.ir import TpuLangError

    from libredgetpu_ros import sophgo as tpul

    built = agreed = 0
    failures, refused = [], []
    with tempfile.TemporaryDirectory(prefix="tpu_mlir_random_") as tmp:
        work = Path(tmp)
        for index in range(args.graphs):
            try:
                case = (float_graph if index % 2 == 0 else int_graph)(index, rng, work / "src")
            except TpuLangError as exc:  # a graph this package refuses (docs/sophgo.md says why)
                tpul.deinit()
                refused.append(f"rand_{index}: {exc}")
                continue
            result = check.run_case(root, env, case.name, case.mlir, case.weights, case.mode, work)
            if not result.ok:
                failures.append(f"{case.name}: {result.failed_step}: {result.message}\n    {_ops(case.mlir)}")
                continue
            built += 1
            run = check.run_on_cmodel(root, env, case, work)
            if run.startswith(check.REFUSED):
                refused.append(f"{case.name}: {run}")
                built -= 1
                continue
            if run.startswith("cmodel = our executor on"):
                agreed += 1
            else:
                failures.append(f"{case.name}: {run}\n    {_ops(case.mlir)}")
    built_by_us = args.graphs - len(refused)
    print(f"seed {args.seed}: {len(refused)}/{args.graphs} refused by this package; {built}/{built_by_us} "
          f"reach a bmodel; {agreed}/{built_by_us} run on the bm1684x cmodel equal to our executor")
    for line in refused + failures:
        print("  " + line)
    return 0 if agreed == built_by_us else 1


def _ops(mlir: Path) -> str:
    """The graph's ops with their attributes, to reproduce a failure."""
    return " | ".join(line.split("loc(")[0].strip()[:400] for line in mlir.read_text().splitlines()
                      if '"top.' in line and "top.None" not in line and "top.Weight" not in line)


if __name__ == "__main__":
    sys.exit(main())
