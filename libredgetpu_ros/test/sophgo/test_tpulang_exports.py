"""Exports to TpuLang: the MobileNet v1 0.25 classifier against LiteRT, the Dense controller against the
MatMulEngine, and the engine's ``tpulang`` backend."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.matmul import MatMulEngine
from libredgetpu_ros.sophgo import kernels
from libredgetpu_ros.sophgo.emitter import emit_mlir, save_module
from libredgetpu_ros.sophgo.executor import execute
from libredgetpu_ros.sophgo.export_dense import (
    common_shift,
    dense_graph,
    engine_int8,
    export_engine,
    multiplier_shift,
)
from libredgetpu_ros.sophgo.export_tflite import LOGITS_NAME, PROBS_NAME, export_classifier
from libredgetpu_ros.sophgo.ir import TpuLangError
from libredgetpu_ros.sophgo.parser import load_mlir, parse_mlir

MODEL = "classify/mobilenet_v1_0.25_128_quant.tflite"
IMAGES = ("images/cat.bmp", "images/grace_hopper.bmp", "images/test_couple.jpg")
SYNTHETIC = 36


@pytest.fixture(scope="module")
def mobilenet(fixture_path, tmp_path_factory):
    """The export written to disk and parsed back (what `tpulang run` would execute)."""
    module, weights = export_classifier(fixture_path(MODEL))
    out = tmp_path_factory.mktemp("mobilenet")
    mlir_path, npz_path = save_module(module, weights, out)
    return load_mlir(mlir_path), dict(np.load(npz_path))


def _images(fixture_path) -> list[np.ndarray]:
    """The fixture photos at 128x128, then deterministic variants: crops, flips, rotations, colour and
    contrast changes, blends, noise and gradients (several ImageNet classes, not one)."""
    import cv2
    from libredgetpu_ros.perception.images import load_image

    big = [load_image(fixture_path(p)) for p in IMAGES]
    photos = [cv2.resize(img, (128, 128), interpolation=cv2.INTER_AREA) for img in big]
    rng = np.random.default_rng(2026)
    out = list(photos)
    for i in range(SYNTHETIC):
        base = big[i % len(big)]
        h, w = base.shape[:2]
        size = int(min(h, w) * rng.uniform(0.35, 1.0))
        y0, x0 = rng.integers(0, h - size + 1), rng.integers(0, w - size + 1)
        img = cv2.resize(base[y0:y0 + size, x0:x0 + size], (128, 128), interpolation=cv2.INTER_AREA)
        img = np.rot90(img, k=i % 4) if i % 3 == 0 else (img[:, ::-1] if i % 3 == 1 else img)
        gain = rng.uniform(0.6, 1.4, size=3)
        img = np.clip(img.astype(np.float32) * gain + rng.uniform(-30, 30), 0, 255)
        if i % 5 == 0:
            img = 0.5 * img + 0.5 * photos[(i + 1) % len(photos)]
        if i % 7 == 0:
            img = img + rng.normal(0, 12, img.shape)
        if i % 11 == 0:
            yy, xx = np.mgrid[0:128, 0:128]
            img = np.stack([xx * 2, yy * 2, (xx + yy)], axis=-1) * rng.uniform(0.5, 1.0)
        out.append(np.ascontiguousarray(np.clip(img, 0, 255).astype(np.uint8)))
    return out


def test_mobilenet_export_matches_litert(mobilenet, fixture_path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    module, weights = mobilenet
    interpreter = Interpreter(model_path=str(fixture_path(MODEL)))
    interpreter.allocate_tensors()
    index_in = interpreter.get_input_details()[0]["index"]
    detail = interpreter.get_output_details()[0]
    step = float(detail["quantization"][0])  # one output quantization step (1/256)
    images = _images(fixture_path)
    assert len(images) >= len(IMAGES) + 30
    classes = set()
    for i, rgb in enumerate(images):
        interpreter.set_tensor(index_in, rgb[None])
        interpreter.invoke()
        ref = interpreter.get_tensor(detail["index"])[0]
        ours = execute(module, weights, {"image": rgb[None]}, keep_all=True)
        probs = ours[PROBS_NAME][0]
        assert probs.dtype == np.float32
        # within one quantization step of LiteRT's uint8 softmax
        assert np.abs(probs - ref.astype(np.float32) * step).max() <= step, f"image {i}"
        # top-1 identical; where LiteRT's uint8 output ties, ours is one of the tied classes
        top = int(probs.argmax())
        assert ref[top] == ref.max(), f"image {i}: ours {top}, LiteRT {int(ref.argmax())}"
        if (ref == ref.max()).sum() == 1:
            assert top == int(ref.argmax()), f"image {i}"
        classes.add(top)
        logits = ours[LOGITS_NAME]
        assert logits.dtype == np.uint8 and logits.shape == (1, 1001)
    assert len(classes) >= 5  # the synthetic set really exercises different outputs


@pytest.mark.filterwarnings("ignore:Warning. Enabling .experimental_preserve_all_tensors")
def test_mobilenet_logits_bit_exact_with_litert(mobilenet, fixture_path) -> None:
    """The uint8 logits (last tensor before SOFTMAX) equal LiteRT's byte for byte."""
    from ai_edge_litert.interpreter import Interpreter

    module, weights = mobilenet
    interpreter = Interpreter(model_path=str(fixture_path(MODEL)), experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    logits_index = next(d["index"] for d in interpreter.get_tensor_details()
                        if d["name"] == "MobilenetV1/Logits/SpatialSqueeze1")
    for rgb in _images(fixture_path)[:8]:
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], rgb[None])
        interpreter.invoke()
        ours = execute(module, weights, {"image": rgb[None]}, keep_all=True)[LOGITS_NAME]
        np.testing.assert_array_equal(ours, interpreter.get_tensor(logits_index))


def test_mobilenet_export_is_a_quantized_module(mobilenet) -> None:
    module, weights = mobilenet
    assert module.state == "TOP_QUANTIZED"
    assert module.weight_file == "mobilenet_top_quantized_all_origin_weight.npz"
    kinds = {node.kind for node in module.ops}
    assert kinds == {"top.Input", "top.Weight", "top.Permute", "top.Conv", "top.RequantFp", "top.AvgPool",
                     "top.Reshape", "top.Cast", "top.Softmax"}
    assert len(weights) == 2 * 28  # 28 convolutions: weight + bias each
    assert module.outputs == [PROBS_NAME]


@pytest.mark.parametrize("size", [256, 512])
def test_dense_export_equals_engine_matmul(size: int) -> None:
    engine = MatMulEngine.from_template(size, backend="cpu")
    rng = np.random.default_rng(size)
    lo, hi = engine.weight_range()
    for batch, with_bias in ((1, False), (7, True)):
        weights = rng.uniform(lo[:, None], hi[:, None], size=(size, size)).astype(np.float32)
        bias = rng.uniform(-2, 2, size).astype(np.float32) if with_bias else None
        engine.set_weights(weights, bias)
        module, arrays = export_engine(engine, batch=batch)
        module = parse_mlir(emit_mlir(module))  # run what the file says
        # inputs beyond the input range saturate in both
        x = rng.uniform(-1.5, 1.5, size=(batch, size)).astype(np.float32)
        ours = execute(module, arrays, {"x": x})["y"]
        np.testing.assert_array_equal(ours, engine.matmul(x))


def test_dense_export_file_names_and_weights(tmp_path: Path) -> None:
    engine = MatMulEngine.from_template(256, backend="cpu")
    weights, bias, version = engine_int8(engine)
    assert version == 0 and bias is None
    module, arrays = export_engine(engine, name="ctrl")
    mlir_path, npz_path = save_module(module, arrays, tmp_path)
    assert mlir_path.name == "ctrl_origin.mlir"
    assert npz_path.name == "ctrl_top_quantized_all_origin_weight.npz"
    stored = dict(np.load(npz_path))
    assert list(stored) == ["dense_w"]
    np.testing.assert_array_equal(stored["dense_w"], weights.T)
    text = mlir_path.read_text()
    # what tpu-mlir 1.30.2 deploys for bm1684x: a per-tensor weight type, the per-row scales in one fused
    # per-channel requant_int (requant_fp lowers per tensor only), no requant_fp at all
    assert "tensor<256x256x!quant.uniform<i8:f32, 1.000000e+00>>" in text
    assert "top.RequantFp" not in text
    scaled, add_zero_point = [node for node in module.ops if node.kind == "top.RequantInt"]
    # per-row multipliers over one shift, fused into the matmul, to int16 ...
    assert scaled.attrs["fuse_rq"] is True and scaled.attrs["round_mode"] == "HalfToEven"
    (shift,) = scaled.attrs["rshift"]
    exact = [Fraction(int(m), 2**int(shift)) for m in scaled.attrs["multiplier"]]
    assert exact == [Fraction(float(m)) for m in engine.quantization.multipliers()]
    assert scaled.result.dtype == "int16"
    # ... then the zero point added after rounding, per tensor
    assert add_zero_point.attrs["multiplier"] == [1] and add_zero_point.attrs["rshift"] == [0]
    assert add_zero_point.result.quant.zero_points[0] == engine.quantization.output_zero_point


def test_common_shift_is_exact_or_refused() -> None:
    assert common_shift([3, 5, 1], [2, 4, 0]) == ([12, 5, 16], 4)
    with pytest.raises(TpuLangError, match="int32"):
        common_shift([2**23 + 1, 1], [40, 0])


@pytest.mark.parametrize("size", [256, 512, 1024])
def test_multiplier_shift_is_the_float32_multiplier_exactly(size: int) -> None:
    multipliers = MatMulEngine.from_template(size, backend="cpu").quantization.multipliers()
    rng = np.random.default_rng(size)
    extra = rng.uniform(1e-7, 0.999, 2000).astype(np.float32)
    for values in (multipliers, extra, np.array([0.5, 2.0**-40, np.nextafter(np.float32(1), 0)], np.float32)):
        mul, shift = multiplier_shift(values)
        assert all(0 < m < 2**24 and s >= 0 for m, s in zip(mul, shift, strict=True))
        expected = [Fraction(float(v)) for v in values]
        assert [Fraction(m, 2**s) for m, s in zip(mul, shift, strict=True)] == expected
        assert all(m % 2 == 1 or s == 0 for m, s in zip(mul, shift, strict=True))  # the smallest exact shift
    for bad in ([0.0], [1.0], [np.nan], [-0.25]):
        with pytest.raises(TpuLangError, match="multipliers"):
            multiplier_shift(np.array(bad, np.float32))


def test_dense_requant_differs_from_the_twin_only_at_float32_ties() -> None:
    """The export rounds acc * M exactly; the twin rounds the float32 product first. Where they differ the
    exact product lies within float32's rounding of a tie (half a float32 step of |acc * M|)."""
    quant = MatMulEngine.from_template(512, backend="cpu").quantization
    multipliers = quant.multipliers()
    mul, shift = multiplier_shift(multipliers)
    rng = np.random.default_rng(7)
    acc = rng.integers(-2**23, 2**23, size=(400, quant.rows)).astype(np.int64)
    twin = np.rint(acc.astype(np.float32) * multipliers).astype(np.int64)
    m, s = np.array(mul, np.int64), np.array(shift, np.int64)
    exact = kernels.round_div(acc * m, np.left_shift(np.int64(1), s), "HalfToEven")
    differ = twin != exact
    assert np.all(np.abs(twin - exact) <= 1)
    product = acc[differ].astype(np.float64) * multipliers.astype(np.float64)[np.nonzero(differ)[1]]
    distance_to_tie = np.abs(np.abs(product - np.floor(product)) - 0.5)
    assert np.all(distance_to_tie <= np.spacing(np.abs(product).astype(np.float32)))


def test_tpulang_backend_equals_cpu_backend_across_swaps() -> None:
    cpu = MatMulEngine.from_template(256, backend="cpu")
    tpu = MatMulEngine.from_template(256, backend="tpulang")
    assert tpu.backend == "tpulang"
    rng = np.random.default_rng(5)
    lo, hi = cpu.weight_range()
    x = rng.uniform(-1, 1, size=(4, 256)).astype(np.float32)
    np.testing.assert_array_equal(tpu.matmul(x), cpu.matmul(x))  # template weights
    for _ in range(3):
        weights = rng.uniform(lo[:, None], hi[:, None], size=(256, 256)).astype(np.float32)
        bias = rng.uniform(-1, 1, 256).astype(np.float32)
        assert tpu.set_weights(weights, bias).version == cpu.set_weights(weights, bias).version
        y, version = tpu.matmul_versioned(x[0])
        np.testing.assert_array_equal(y, cpu.matmul(x[0]))
        np.testing.assert_array_equal(tpu.matmul(x), cpu.matmul(x))
        assert version == tpu.version
    raw = rng.integers(-128, 128, size=(256, 256), dtype=np.int8)
    tpu.set_weights_raw(raw)
    cpu.set_weights_raw(raw)
    np.testing.assert_array_equal(tpu.matmul(x), cpu.matmul(x))
    tpu.close()


def test_exports_leave_the_callers_graph_alone() -> None:
    from libredgetpu_ros import sophgo as tpul

    tpul.init("bm1684x")
    x = tpul.Tensor([1, 4], name="x")
    y = tpul.relu(x, out_name="y")
    engine = MatMulEngine.from_template(256, backend="cpu")
    export_engine(engine)  # builds its own graph meanwhile
    module, _ = tpul.build("mine", [x], [y], quantized=False)
    tpul.deinit()
    assert [node.name for node in module.ops] == ["x", "y"]


def test_dense_graph_refuses_bad_weights() -> None:
    engine = MatMulEngine.from_template(256, backend="cpu")
    with pytest.raises(TpuLangError, match="int8"):
        dense_graph(np.zeros((256, 256), np.float32), engine.quantization)
    with pytest.raises(TpuLangError, match="bias has shape"):
        dense_graph(np.zeros((256, 256), np.int8), engine.quantization, bias=np.zeros(3))


def test_avgpool_half_away_from_zero_equals_tflite_half_up_for_every_uint8_window_sum() -> None:
    """The export's AvgPool rounds half away from zero (bm1684x codegen refuses HalfUp). For uint8 inputs the
    window sums are never negative, where both modes agree; checked for every sum of every window size up to
    16x16 against TFLite's integer average ``(sum + count / 2) / count``."""
    for count in range(1, 257):
        sums = np.arange(0, 255 * count + 1, dtype=np.int64)
        tflite = (sums + count // 2) // count
        away = kernels.round_div(sums, count, "HalfAwayFromZero")
        np.testing.assert_array_equal(away, kernels.round_div(sums, count, "HalfUp"))
        np.testing.assert_array_equal(away, tflite)


def test_mobilenet_export_emits_only_what_bm1684x_deploys(mobilenet) -> None:
    module, _ = mobilenet
    pools = [node for node in module.ops if node.kind == "top.AvgPool"]
    assert pools and all(node.attrs["round_mode"] == "HalfAwayFromZero" for node in pools)
    assert not [node.name for node in module.ops if node.attrs.get("round_mode") == "HalfUp"]
