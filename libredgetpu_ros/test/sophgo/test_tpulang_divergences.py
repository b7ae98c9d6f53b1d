"""Where our TpuLang emitter/executor used to differ from TpuLang 1.30.2 and tpu-mlir (issue 23), each
against TpuLang's source (python/transform/TpuLang.py, TpuLangConverter.py) or tpu-mlir's own numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.sophgo.emitter import emit_mlir
from libredgetpu_ros.sophgo.executor import execute
from libredgetpu_ros.sophgo.ir import TpuLangError
from libredgetpu_ros.sophgo.parser import parse_mlir
from libredgetpu_ros.sophgo.shapes import pool_shape

from libredgetpu_ros import sophgo as tpul

# (input height, kernel, stride, pad top, pad bottom, output height) of ceil_mode pools, as tpu-mlir 1.30.2's
# `tpuc-opt --shape-infer` wrote them (MaxPool and AvgPool alike; width 4, kernel/stride/pads 1/1/0 there).
# 22 of these 120 differ from the ceil formula ceil((h + pads - k) / s) + 1 this package used.
TPU_MLIR_CEIL_SHAPES = [
    (5, 2, 1, 0, 0, 4), (5, 2, 1, 0, 1, 5), (5, 2, 1, 1, 0, 5), (5, 2, 1, 1, 1, 6), (5, 2, 2, 0, 0, 3),
    (5, 2, 2, 0, 1, 3), (5, 2, 2, 1, 0, 3), (5, 2, 2, 1, 1, 4), (5, 2, 3, 0, 0, 2), (5, 2, 3, 0, 1, 2),
    (5, 2, 3, 1, 0, 2), (5, 2, 3, 1, 1, 3), (5, 3, 1, 0, 0, 3), (5, 3, 1, 0, 1, 4), (5, 3, 1, 0, 2, 5),
    (5, 3, 1, 1, 0, 4), (5, 3, 1, 1, 1, 5), (5, 3, 1, 1, 2, 6), (5, 3, 2, 0, 0, 2), (5, 3, 2, 0, 1, 2),
    (5, 3, 2, 0, 2, 3), (5, 3, 2, 1, 0, 2), (5, 3, 2, 1, 1, 3), (5, 3, 2, 1, 2, 3), (5, 3, 3, 0, 0, 2),
    (5, 3, 3, 0, 1, 2), (5, 3, 3, 0, 2, 2), (5, 3, 3, 1, 0, 2), (5, 3, 3, 1, 1, 3), (5, 3, 3, 1, 2, 3),
    (6, 2, 1, 0, 0, 5), (6, 2, 1, 0, 1, 6), (6, 2, 1, 1, 0, 6), (6, 2, 1, 1, 1, 7), (6, 2, 2, 0, 0, 3),
    (6, 2, 2, 0, 1, 3), (6, 2, 2, 1, 0, 3), (6, 2, 2, 1, 1, 4), (6, 2, 3, 0, 0, 3), (6, 2, 3, 0, 1, 3),
    (6, 2, 3, 1, 0, 2), (6, 2, 3, 1, 1, 3), (6, 3, 1, 0, 0, 4), (6, 3, 1, 0, 1, 5), (6, 3, 1, 0, 2, 6),
    (6, 3, 1, 1, 0, 5), (6, 3, 1, 1, 1, 6), (6, 3, 1, 1, 2, 7), (6, 3, 2, 0, 0, 3), (6, 3, 2, 0, 1, 3),
    (6, 3, 2, 0, 2, 4), (6, 3, 2, 1, 0, 3), (6, 3, 2, 1, 1, 4), (6, 3, 2, 1, 2, 4), (6, 3, 3, 0, 0, 2),
    (6, 3, 3, 0, 1, 2), (6, 3, 3, 0, 2, 2), (6, 3, 3, 1, 0, 2), (6, 3, 3, 1, 1, 3), (6, 3, 3, 1, 2, 3),
    (7, 2, 1, 0, 0, 6), (7, 2, 1, 0, 1, 7), (7, 2, 1, 1, 0, 7), (7, 2, 1, 1, 1, 8), (7, 2, 2, 0, 0, 4),
    (7, 2, 2, 0, 1, 4), (7, 2, 2, 1, 0, 4), (7, 2, 2, 1, 1, 5), (7, 2, 3, 0, 0, 3), (7, 2, 3, 0, 1, 3),
    (7, 2, 3, 1, 0, 3), (7, 2, 3, 1, 1, 4), (7, 3, 1, 0, 0, 5), (7, 3, 1, 0, 1, 6), (7, 3, 1, 0, 2, 7),
    (7, 3, 1, 1, 0, 6), (7, 3, 1, 1, 1, 7), (7, 3, 1, 1, 2, 8), (7, 3, 2, 0, 0, 3), (7, 3, 2, 0, 1, 3),
    (7, 3, 2, 0, 2, 4), (7, 3, 2, 1, 0, 3), (7, 3, 2, 1, 1, 4), (7, 3, 2, 1, 2, 4), (7, 3, 3, 0, 0, 3),
    (7, 3, 3, 0, 1, 3), (7, 3, 3, 0, 2, 3), (7, 3, 3, 1, 0, 2), (7, 3, 3, 1, 1, 3), (7, 3, 3, 1, 2, 3),
    (8, 2, 1, 0, 0, 7), (8, 2, 1, 0, 1, 8), (8, 2, 1, 1, 0, 8), (8, 2, 1, 1, 1, 9), (8, 2, 2, 0, 0, 4),
    (8, 2, 2, 0, 1, 4), (8, 2, 2, 1, 0, 4), (8, 2, 2, 1, 1, 5), (8, 2, 3, 0, 0, 3), (8, 2, 3, 0, 1, 3),
    (8, 2, 3, 1, 0, 3), (8, 2, 3, 1, 1, 4), (8, 3, 1, 0, 0, 6), (8, 3, 1, 0, 1, 7), (8, 3, 1, 0, 2, 8),
    (8, 3, 1, 1, 0, 7), (8, 3, 1, 1, 1, 8), (8, 3, 1, 1, 2, 9), (8, 3, 2, 0, 0, 4), (8, 3, 2, 0, 1, 4),
    (8, 3, 2, 0, 2, 5), (8, 3, 2, 1, 0, 4), (8, 3, 2, 1, 1, 5), (8, 3, 2, 1, 2, 5), (8, 3, 3, 0, 0, 3),
    (8, 3, 3, 0, 1, 3), (8, 3, 3, 0, 2, 3), (8, 3, 3, 1, 0, 3), (8, 3, 3, 1, 1, 4), (8, 3, 3, 1, 2, 4),
]


def _build(name: str, inputs: list, outputs: list, quantized: bool) -> tuple[str, dict]:
    try:
        module, weights = tpul.build(name, inputs, outputs, quantized)
    finally:
        tpul.deinit()
    text = emit_mlir(module)
    assert emit_mlir(parse_mlir(text)) == text
    return text, weights


def _line(text: str, loc_name: str) -> str:
    alias = next(ln.split(" = ")[0] for ln in text.splitlines() if ln.endswith(f'loc("{loc_name}")'))
    return next(ln.strip() for ln in text.splitlines() if ln.endswith(f"loc({alias})"))


def test_ceil_mode_pool_shapes_are_tpu_mlirs() -> None:
    assert len(TPU_MLIR_CEIL_SHAPES) == 120
    for h, k, s, top, bottom, out in TPU_MLIR_CEIL_SHAPES:
        assert pool_shape([1, 1, h, 4], [k, 1], [s, 1], [top, 0, bottom, 0], True, "t")[2] == out, (h, k, s)
    # the case: a padded maxpool the ceil formula makes 3x5, tpu-mlir 2x4 (also its bm1684x bmodel)
    assert pool_shape([1, 2, 7, 8], [3, 2], [3, 2], [1, 1, 0, 0], True, "t") == [1, 2, 2, 4]


def test_pool_windows_wholly_in_ceil_padding() -> None:
    """6x6, 3x3 stride 2, pads [0, 0, 2, 2], ceil: tpu-mlir pads the end to 3 and makes 4x4; the last row and
    column of windows hold no input cell. Average: 0 (tpu-mlir's interpreter; its bm1684x cmodel gives NaN),
    with count_include_pad every pad counts; max: the lowest finite float (the cmodel's -3.4028235e+38)."""
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 1, 6, 6], name="x")
    avg = tpul.avgpool2d(x, [3, 3], [2, 2], [0, 0, 2, 2], ceil_mode=True, out_name="avg")
    counted = tpul.avgpool2d(x, [3, 3], [2, 2], [0, 0, 2, 2], ceil_mode=True, count_include_pad=True,
                             out_name="counted")
    top = tpul.maxpool2d(x, [3, 3], [2, 2], [0, 0, 2, 2], ceil_mode=True, out_name="max")
    text, weights = _build("holes", [x], [avg, counted, top], quantized=False)
    data = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6) + 1
    out = execute(parse_mlir(text), weights, {"x": data})
    assert out["avg"].shape == (1, 1, 4, 4) and not np.isnan(out["avg"]).any()
    assert np.all(out["avg"][0, 0, 3, :] == 0) and np.all(out["avg"][0, 0, :, 3] == 0)
    assert out["avg"][0, 0, 2, 2] == pytest.approx(np.mean([29, 30, 35, 36]))  # 2x2 real cells
    assert out["counted"][0, 0, 2, 2] == pytest.approx((29 + 30 + 35 + 36) / 9)
    assert np.all(out["max"][0, 0, 3, :] == np.finfo(np.float32).min)
    assert out["max"][0, 0, 2, 2] == 36


def test_quantized_empty_window_is_the_zero_point() -> None:
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 1, 6, 6], name="x", dtype="int8", scale=0.5, zero_point=7)
    y = tpul.avgpool2d(x, [3, 3], [2, 2], [0, 0, 2, 2], ceil_mode=True, scale=[0.5, 0.5],
                       zero_point=[7, 7], out_name="y")
    text, weights = _build("qholes", [x], [y], quantized=True)
    out = execute(parse_mlir(text), weights, {"x": np.full((1, 1, 6, 6), 20, np.int8)})["y"]
    assert np.all(out[0, 0, 3, :] == 7) and out[0, 0, 0, 0] == 20


@pytest.mark.parametrize("pool", ["maxpool2d", "avgpool2d"])
def test_pool_scale_and_zero_point_pairs_are_per_tensor(pool: str) -> None:
    """TpuLang: scale=[in, out], zero_point=[in, out] quantize the input with the first and the output with
    the second, per tensor (we made a per-channel type of the pair)."""
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 2, 4, 4], name="x", dtype="int8")
    y = getattr(tpul, pool)(x, [2, 2], [2, 2], scale=[0.5, 0.25], zero_point=[3, -2], out_name="y")
    text, weights = _build(f"pair_{pool}", [x], [y], quantized=True)
    line = _line(text, "y")
    assert ("(tensor<1x2x4x4x!quant.uniform<i8:f32, 5.000000e-01:3>>) -> "
            "tensor<*x!quant.uniform<i8:f32, 2.500000e-01:-2>>") in line
    raw = np.random.default_rng(1).integers(-128, 128, (1, 2, 4, 4)).astype(np.int8)
    got = execute(parse_mlir(text), weights, {"x": raw})["y"]
    if pool == "maxpool2d":  # tpu-mlir and the bm1684x chip: the raw maximum, not requantized (issue 38)
        windows = raw.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 2, 2, 2, 4)
        np.testing.assert_array_equal(got, windows.max(axis=-1))
        return
    real = (raw.astype(np.float64) - 3) * 0.5
    windows = real.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 2, 2, 2, 4)
    q = windows.mean(axis=-1) / 0.25
    expected = np.clip(np.where(q >= 0, np.floor(q + 0.5), np.ceil(q - 0.5)) - 2, -128, 127)  # half away
    np.testing.assert_array_equal(got, expected.astype(np.int8))


def test_int8_maxpool_without_scale_is_unquantized_and_runs(tmp_path: Path) -> None:
    """TpuLang's maxpool2d makes a new output Tensor of the input's dtype and quantizes it only from
    scale=[in, out]; so a quantized int8 input gives a plain si8 result (a zero_point alone is ignored).
    `tpulang run` executes that file (it refused it: 'a maxpool that changes the quantization')."""
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 1, 4, 4], name="x", dtype="int8", scale=0.1, zero_point=4)
    y = tpul.maxpool2d(x, [2, 2], [2, 2], zero_point=[9, 9], out_name="y")
    mlir, npz = tpul.save("plainmax", [x], [y], quantized=True, out_dir=tmp_path)
    assert "-> tensor<*xsi8> loc(" in _line(mlir.read_text(), "y")
    raw = np.arange(-8, 8, dtype=np.int8).reshape(1, 1, 4, 4)
    np.savez(tmp_path / "in.npz", x=raw)
    assert main(["tpulang", "run", str(mlir), str(npz), str(tmp_path / "in.npz"), "--out",
                 str(tmp_path / "out.npz")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], [[[[-3, -1], [5, 7]]]])


@pytest.mark.parametrize("requant", ["requant_int", "requant_fp"])
def test_requant_then_dequant_with_scale_is_accepted(requant: str) -> None:
    """TpuLang's Tensor.quantization fills in a scale the tensor did not state: the requant result has only
    its offset, dequant_int_to_fp(scale, zp) gives it the scale (we refused: 'already quantized with scale
    1.0'). A different zero point is still refused, as TpuLang asserts."""
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 4], name="x", dtype="int32")
    if requant == "requant_int":
        q = tpul.requant_int(x, 3, -1, 5, 2, out_dtype="int8", out_name="q")  # round(x * 3 / 2) + 5
    else:
        q = tpul.requant_fp(x, 1.5, 5, "int8", out_name="q")
    y = tpul.dequant_int_to_fp(q, 0.25, 5, out_name="y")
    assert q.quant.scales == (0.25,) and q.quant.zero_points == (5,)
    with pytest.raises(TpuLangError, match="already quantized"):
        tpul.dequant_int_to_fp(q, 0.25, 6, out_name="other")
    text, weights = _build(f"{requant}_dequant", [x], [y], quantized=True)
    # TpuLang's requants copy the operand's shape (a graph input here): ranked (issue 38)
    assert "-> tensor<1x4x!quant.uniform<i8:f32, 2.500000e-01:5>>" in _line(text, "q")
    got = execute(parse_mlir(text), weights, {"x": np.array([[1, 2, -3, 40]], np.int32)})["y"]
    # requant_int rounds 1.5 x then adds 5 (-4.5 -> -5); requant_fp rounds 1.5 x + 5 (0.5 -> 1)
    third = -1.25 if requant == "requant_int" else -1.0
    np.testing.assert_array_equal(got, [[0.5, 0.75, third, 15.0]])


def test_cast_prints_to_and_a_ranked_result_like_tpulang() -> None:
    """TpuLang's requant_fp_to_int / dequant_int_to_fp build the result Tensor with the operand's shape
    (known for graph inputs, weights and the results of shape-copying ops such as relu; [] for other op
    results) and the Cast carries to = "" (TpuLang's own file: data/tpulang_1.30.2/casts_origin.mlir)."""
    tpul.init("bm1684x")
    x = tpul.Tensor([2, 3], name="x")
    q = tpul.requant_fp_to_int(x, 0.5, 3, 0, "uint8", out_name="q")
    r = tpul.relu(q, out_name="r")
    y = tpul.dequant_int_to_fp(r, 0.5, 3, out_name="y")
    text, _ = _build("casts", [x], [y], quantized=True)
    assert _line(text, "q").endswith('= "top.Cast"(%1) {round_mode = "HalfAwayFromZero", to = ""} : '
                                     "(tensor<2x3xf32>) -> tensor<2x3x!quant.uniform<u8:f32, "
                                     '5.000000e-01:3>> loc(#loc2)')
    assert _line(text, "y").endswith('{round_mode = "HalfAwayFromZero", to = ""} : '
                                     "(tensor<2x3x!quant.uniform<u8:f32, 5.000000e-01:3>>) -> "
                                     "tensor<2x3xf32> loc(#loc4)")


def test_pool_without_kernel_is_tpu_mlirs_global_pool() -> None:
    """TpuLang's kernel=None prints kernel_shape = [] (we printed the input's size); tpu-mlir's shape
    inference then pools globally with strides 1 and pads 0, whatever was given (tpuc-opt 1.30.2: a 5x7
    input with strides [2, 2] and pads [1, 1, 1, 1] gives 1x1; we gave 2x2)."""
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 3, 5, 7], name="x")
    avg = tpul.avgpool2d(x, None, [2, 2], [1, 1, 1, 1], out_name="avg")
    top = tpul.maxpool2d(x, None, [2, 2], [1, 1, 1, 1], out_name="max")
    assert avg.shape == top.shape == [1, 3, 1, 1]
    text, weights = _build("global_pools", [x], [avg, top], quantized=False)
    assert "kernel_shape = [], " in _line(text, "avg") and "kernel_shape = [], " in _line(text, "max")
    data = np.random.default_rng(3).standard_normal((1, 3, 5, 7)).astype(np.float32)
    out = execute(parse_mlir(text), weights, {"x": data})
    np.testing.assert_allclose(out["avg"], data.mean(axis=(2, 3), keepdims=True), atol=1e-6)
    np.testing.assert_array_equal(out["max"], data.max(axis=(2, 3), keepdims=True))


def test_relu_reshape_permute_pass_quantization_both_ways_like_tpulang() -> None:
    """TpuLang gives relu/reshape/permute results no quantization when called and runs a pass at compile
    time (TpuLangConverter.quantized_type_inference): input -> result, then result -> input, filling in only
    what is unstated. So a requant result (zero point only), relu, then a pool stating scale=[s, s] makes the
    requant result, the relu and the pool all scale s (we refused: relu had copied scale 1.0 as stated)."""
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 2, 4, 4], name="x", dtype="int32")
    q = tpul.requant_int(x, 1, 0, 6, 2, out_dtype="int8", out_name="q")
    r = tpul.relu(q, out_name="r")
    y = tpul.maxpool2d(r, [2, 2], [2, 2], scale=[0.5, 0.5], zero_point=[6, 6], out_name="y")
    text, weights = _build("assign_pass", [x], [y], quantized=True)
    relu = _line(text, "r")
    assert relu.count("!quant.uniform<i8:f32, 5.000000e-01:6>") == 2  # operand (the requant) and result
    data = np.arange(-16, 16, dtype=np.int32).reshape(1, 2, 4, 4)
    got = execute(parse_mlir(text), weights, {"x": data})["y"]
    expected = np.maximum(data + 6, 0).reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5))  # relu on raw values
    np.testing.assert_array_equal(got, expected)
    tpul.init("bm1684x")
    a = tpul.Tensor([1, 4], name="a", dtype="int8", scale=0.5, zero_point=1)
    b = tpul.relu(a, out_name="b")
    b.quantization(0.25, 1)  # a stated scale that differs from the input's: TpuLang asserts
    with pytest.raises(TpuLangError, match="already quantized"):
        tpul.build("conflict", [a], [b], quantized=True)
    tpul.deinit()
