"""CPU twin vs LiteRT running the uncompiled templates, and vs float W @ x within the reported bound."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from libredgetpu_ros.matmul import MatMulEngine
from libredgetpu_ros.matmul.template import load_template
from libredgetpu_ros.matmul.tflite_writer import dense_template_tflite
from libredgetpu_ros.matmul.twin import dense_uint8, dequantize, quantize_input

SIZES = (256, 512, 1024)


def _litert(model: str | bytes, reference_kernels: bool = False) -> Interpreter:
    kind = (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if reference_kernels else OpResolverType.AUTO)
    if isinstance(model, bytes):
        interpreter = Interpreter(model_content=model, experimental_op_resolver_type=kind)
    else:
        interpreter = Interpreter(model_path=model, experimental_op_resolver_type=kind)
    interpreter.allocate_tensors()
    return interpreter


def _run(interpreter: Interpreter, xq: np.ndarray) -> np.ndarray:
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    rows = []
    for sample in xq:
        interpreter.set_tensor(inp["index"], sample[None, :])
        interpreter.invoke()
        rows.append(interpreter.get_tensor(out["index"])[0].copy())
    return np.stack(rows)


@pytest.mark.parametrize("n", SIZES)
def test_twin_equals_litert_on_the_template(n, fixture_path):
    path = fixture_path(f"matmul/dense_{n}.tflite")
    template = load_template(fixture_path(f"matmul/dense_{n}_edgetpu.tflite"))
    xq = np.random.default_rng(n).integers(0, 256, size=(16, n), dtype=np.uint8)
    twin = dense_uint8(template.weights, xq, template.quant)
    # LiteRT's default kernels (XNNPACK, float32 requantization): bit-exact.
    assert np.array_equal(twin, _run(_litert(str(path)), xq))
    # TFLite's builtin fixed-point kernels round a few outputs differently: within 1 LSB.
    reference = _run(_litert(str(path), reference_kernels=True), xq)
    assert np.abs(twin.astype(int) - reference.astype(int)).max() <= 1


def test_twin_equals_litert_with_swapped_weights(fixture_path):
    engine = MatMulEngine.from_template(fixture_path("matmul/dense_256_edgetpu.tflite"), backend="cpu")
    rng = np.random.default_rng(7)
    lo, hi = engine.weight_range()
    engine.set_weights(rng.uniform(lo[:, None], hi[:, None], size=(256, 256)))
    quant = engine.quantization
    int8 = np.rint(engine.get_weights()[0] / quant.weight_scales[:, None]).astype(np.int8)
    model = dense_template_tflite(int8, quant.weight_scales, quant.input_scale, quant.input_zero_point,
                                  quant.output_scale, quant.output_zero_point)
    x = rng.uniform(-1, 1, size=(8, 256))
    expected = dequantize(_run(_litert(model), quantize_input(x, quant)), quant.output_scale,
                          quant.output_zero_point)
    assert np.array_equal(engine.matmul(x), expected)


@pytest.mark.parametrize("n", SIZES)
def test_twin_matches_float_within_reported_bound(n, fixture_path):
    engine = MatMulEngine.from_template(fixture_path(f"matmul/dense_{n}_edgetpu.tflite"), backend="cpu")
    rng = np.random.default_rng(n + 1)
    lo, hi = engine.weight_range()
    weights = rng.uniform(lo[:, None] * 0.9, hi[:, None] * 0.9, size=(n, n))
    bias = rng.normal(0, 0.1, size=n)
    engine.set_weights(weights, bias=bias)
    x = rng.uniform(-1, 1, size=(8, n))
    exact = x @ weights.T + bias
    y = engine.matmul(x)
    bound = engine.error_bound(x)
    out_lo, out_hi = engine.quantization.output_range()
    inside = (exact - bias > out_lo + engine.quantization.output_scale) & (
        exact - bias < out_hi - engine.quantization.output_scale)
    assert inside.mean() > 0.99  # the check below must cover nearly every output
    assert np.all(np.abs(y - exact)[inside] <= bound[inside] * (1 + 1e-6) + 1e-6)
    # The bound is informative, not vacuous: under 10% of the output span (it grows with N: a worst case).
    assert bound.max() < 0.1 * (out_hi - out_lo)


def test_single_vector_and_batch_agree(fixture_path):
    engine = MatMulEngine.from_template(fixture_path("matmul/dense_256_edgetpu.tflite"), backend="cpu")
    x = np.random.default_rng(3).uniform(-1, 1, size=(4, 256)).astype(np.float32)
    batch = engine.matmul(x)
    assert batch.shape == (4, 256)
    for i in range(4):
        assert np.array_equal(engine.matmul(x[i]), batch[i])
