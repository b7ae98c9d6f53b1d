"""Small TpuLang graphs whose outputs on tpu-mlir 1.30.2's bm1684x simulator are recorded in
``data/bm1684x_cmodel.json`` (by ``tools/tpu_mlir_record.py``): the executor must give exactly these numbers.

Each builder returns ``(module, weights, feed)``; inputs are fixed integers/floats (no RNG stream to drift).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from libredgetpu_ros import sophgo as tpul

Case = tuple[object, dict, dict]


def _build(name: str, inputs: list, outputs: list, quantized: bool) -> tuple[object, dict]:
    try:
        return tpul.build(name, inputs, outputs, quantized)
    finally:
        tpul.deinit()


def _ramp(shape: tuple[int, ...], lo: int, hi: int, step: int, dtype: str) -> np.ndarray:
    """Deterministic integers covering [lo, hi) in a scrambled order (step coprime with the span)."""
    count = int(np.prod(shape))
    span = hi - lo
    return (lo + (np.arange(count) * step) % span).reshape(shape).astype(dtype)


def maxpool_scale_1x1() -> Case:
    """Issue 38 item 1's minimal case: kernel 1, scale 0.0292 -> 0.0822 (the chip: the maximum unchanged)."""
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 1, 2, 2], name="x", dtype="int8")
    y = tpul.maxpool2d(x, [1, 1], [1, 1], [0, 0, 0, 0], scale=[0.0292, 0.0822], zero_point=[0, 0],
                       out_name="pool")
    module, weights = _build("maxpool_scale_1x1", [x], [y], True)
    return module, weights, {"x": np.array([[[[-100, 5], [77, 127]]]], np.int8)}


def maxpool_scale_padded() -> Case:
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 2, 5, 5], name="x", dtype="int8")
    y = tpul.maxpool2d(x, [2, 2], [2, 2], [1, 1, 0, 0], scale=[0.05, 0.11], zero_point=[3, -4],
                       out_name="pool")
    module, weights = _build("maxpool_scale_padded", [x], [y], True)
    return module, weights, {"x": _ramp((1, 2, 5, 5), -128, 128, 37, "int8")}


def _concat(name: str, dtype: str, result_dtype: str, scales: list[float], zps: list[int]) -> Case:
    tpul.init("bm1684x")
    a = tpul.Tensor([1, 2, 2, 3], name="a", dtype=dtype)
    b = tpul.Tensor([1, 1, 2, 3], name="b", dtype=dtype)
    y = tpul.concat([a, b], scales=scales, zero_points=zps, axis=1, dtype=result_dtype, out_name="cat")
    module, weights = _build(name, [a, b], [y], True)
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    return module, weights, {"a": _ramp((1, 2, 2, 3), lo, hi, 53, dtype),
                             "b": _ramp((1, 1, 2, 3), lo, hi, 97, dtype)}


def concat_unquantized_result() -> Case:
    """TpuLang's default dtype="float32": the result is a plain si8, the raw integers concatenated."""
    return _concat("concat_plain", "int8", "float32", [0.05, 0.2, 0.1], [0, 3, 0])


def concat_int8() -> Case:
    return _concat("concat_int8", "int8", "int8", [0.05, 0.083, 0.0711], [-9, -10, -7])


def concat_uint8() -> Case:
    return _concat("concat_uint8", "uint8", "uint8", [0.061, 0.0906, 0.0747], [146, 153, 113])


def conv_quant_per_channel() -> Case:
    """A per-channel conv_quant where a float product of the scales rounds one value differently from the
    chip's QuantizeMultiplier fixed point (found by search; the old executor gave 1 step off there)."""
    w = np.array([[[[89, 35, 2], [-59, -50, -118], [-109, -124, -84]],
                   [[80, 38, 105], [0, 27, 120], [58, 33, 11]]],
                  [[[15, 111, -57], [80, 43, -128], [-28, 91, 13]],
                   [[-120, 67, 58], [88, -84, -106], [92, -123, 10]]],
                  [[[-108, -52, -5], [-20, -25, -121], [-127, -97, -126]],
                   [[43, 6, 37], [-63, 29, 67], [-30, -11, 127]]]], np.int8)
    x = np.array([[[[6, -32, -49, -20], [-4, 56, 99, -110], [111, 8, -37, 44], [18, -63, -46, 56]],
                   [[24, 1, -42, 66], [-28, -44, 99, -61], [-70, 54, 31, -116], [-107, -32, 85, -26]]]],
                 np.int8)
    tpul.init("bm1684x")
    xi = tpul.Tensor([1, 2, 4, 4], name="x", dtype="int8")
    wi = tpul.Tensor(name="w", ttype="coeff", dtype="int8", data=w)
    bi = tpul.Tensor(name="b", ttype="coeff", dtype="int32", data=np.array([1829, 2885, -723], np.int32))
    y = tpul.conv_quant(xi, wi, bi, pad=[1, 1, 1, 1], input_scale=0.0222,
                        weight_scale=[0.01336, 0.01408, 0.00839], output_scale=0.3747, input_zp=2,
                        output_zp=4, out_name="cq")
    module, weights = _build("conv_quant_pc", [xi], [y], True)
    return module, weights, {"x": x}


def _avgpool(name: str, shape: tuple, kernel: list, stride: list, pads: list, include_pad: bool,
             scale: list, zero_point: list, round_mode: str = "half_away_from_zero") -> Case:
    tpul.init("bm1684x")
    x = tpul.Tensor(list(shape), name="x", dtype="int8")
    y = tpul.avgpool2d(x, kernel, stride, pads, count_include_pad=include_pad, scale=scale,
                       zero_point=zero_point, round_mode=round_mode, out_name="pool")
    module, weights = _build(name, [x], [y], True)
    return module, weights, {"x": _ramp(shape, -128, 128, 71, "int8")}


def avgpool_pads_zp() -> Case:
    """Item 4: zero point -4, pads, count_include_pad False (the chip: the raw mean of the real cells)."""
    return _avgpool("avgpool_pads_zp", (1, 2, 5, 5), [3, 3], [2, 2], [1, 1, 1, 1], False, [0.1, 0.1],
                    [-4, -4])


def avgpool_pads_counted() -> Case:
    """count_include_pad True: pad cells are a raw 0 (not the zero point), divided by the kernel size."""
    return _avgpool("avgpool_pads_counted", (1, 2, 5, 5), [3, 3], [2, 2], [1, 1, 1, 1], True, [0.1, 0.1],
                    [-4, -4])


def avgpool_rescale_one_pad_row() -> Case:
    """A scale change with one pad row: the chip ignores the scales there (raw mean)."""
    return _avgpool("avgpool_rescale_pad", (1, 1, 4, 3), [2, 3], [1, 1], [1, 0, 0, 0], False, [0.05, 0.11],
                    [2, -3])


def avgpool_rescale_counted() -> Case:
    return _avgpool("avgpool_rescale_counted", (1, 1, 4, 3), [2, 3], [1, 1], [1, 0, 0, 0], True,
                    [0.05, 0.11], [2, -3], "half_to_even")


def avgpool_rescale_stride_remainder() -> Case:
    """No pads, but the stride leaves a remainder (6 - 1) % 2: the backend pads, so the raw-mean rule."""
    return _avgpool("avgpool_rescale_rem", (1, 1, 5, 6), [3, 1], [1, 2], [0, 0, 0, 0], False, [0.1397, 0.124],
                    [8, -8])


def avgpool_rescale_exact_grid() -> Case:
    """No pads and an exact window grid: requantized with tpu-mlir's scale and offset."""
    return _avgpool("avgpool_rescale_grid", (1, 1, 4, 5), [2, 1], [2, 1], [0, 0, 0, 0], False,
                    [0.1071, 0.1887], [-10, 2])


CASES: dict[str, Callable[[], Case]] = {
    "maxpool_scale_1x1": maxpool_scale_1x1,
    "maxpool_scale_padded": maxpool_scale_padded,
    "concat_plain": concat_unquantized_result,
    "concat_int8": concat_int8,
    "concat_uint8": concat_uint8,
    "conv_quant_pc": conv_quant_per_channel,
    "avgpool_pads_zp": avgpool_pads_zp,
    "avgpool_pads_counted": avgpool_pads_counted,
    "avgpool_rescale_pad": avgpool_rescale_one_pad_row,
    "avgpool_rescale_counted": avgpool_rescale_counted,
    "avgpool_rescale_rem": avgpool_rescale_stride_remainder,
    "avgpool_rescale_grid": avgpool_rescale_exact_grid,
}
