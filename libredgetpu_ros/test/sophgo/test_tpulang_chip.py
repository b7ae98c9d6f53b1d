"""The executor against the deployed chip: outputs of tpu-mlir 1.30.2's bm1684x simulator recorded in
``data/bm1684x_cmodel.json`` (``tools/tpu_mlir_record.py``) for the graphs of ``chip_cases.py`` (issue 38),
plus the refusals where the chip does not compute what the graph says."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.sophgo.emitter import emit_mlir, save_module
from libredgetpu_ros.sophgo.executor import execute
from libredgetpu_ros.sophgo.ir import TpuLangError
from libredgetpu_ros.sophgo.parser import parse_mlir

from libredgetpu_ros import sophgo as tpul

HERE = Path(__file__).resolve().parent
RECORDED = json.loads((HERE / "data" / "bm1684x_cmodel.json").read_text())


def _cases():
    spec = importlib.util.spec_from_file_location("sophgo_chip_cases", HERE / "chip_cases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.CASES


CASES = _cases()


def _tpulang_cases():
    spec = importlib.util.spec_from_file_location("sophgo_tpulang_cases", HERE / "tpulang_cases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


TPULANG_CASES = _tpulang_cases()
TPULANG_DIR = HERE / "data" / "tpulang_1.30.2"


def test_every_tpulang_case_is_recorded() -> None:
    assert sorted(p.name for p in TPULANG_DIR.glob("*_origin.mlir")) == sorted(
        f"{name}_origin.mlir" for name in TPULANG_CASES)


@pytest.mark.parametrize("name", sorted(TPULANG_CASES))
def test_mlir_is_byte_identical_to_tpulangs(name: str) -> None:
    """Items 3 and 5: concat's result type, ranked results of shape-copying ops (relu, softmax, requants,
    casts) on graph inputs and chains of them, the signature's result type, as TpuLang 1.30.2 wrote them."""
    tpul.init("bm1684x")
    try:
        inputs, outputs = TPULANG_CASES[name](tpul)
        module, _ = tpul.build(name, inputs, outputs, quantized=True)
    finally:
        tpul.deinit()
    text = emit_mlir(module)
    assert text == (TPULANG_DIR / f"{name}_origin.mlir").read_text()
    assert emit_mlir(parse_mlir(text)) == text


def test_every_case_is_recorded() -> None:
    assert sorted(RECORDED["cases"]) == sorted(CASES)
    assert "tpu-mlir 1.30.2" in RECORDED["provenance"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_executor_equals_the_bm1684x_simulator(name: str) -> None:
    module, weights, feed = CASES[name]()
    text = emit_mlir(module)
    assert emit_mlir(parse_mlir(text)) == text
    recorded = RECORDED["cases"][name]
    assert "outputs" in recorded, recorded.get("tpu_mlir_fails")
    ours = execute(parse_mlir(text), weights, feed)
    for key, want in recorded["outputs"].items():
        got = ours[key]
        assert str(got.dtype) == want["dtype"] and list(got.shape) == want["shape"], key
        values = np.array([np.nan if v is None else v for v in want["values"]], dtype=want["dtype"])
        if got.dtype.kind == "f":
            np.testing.assert_allclose(got.ravel(), values, atol=1e-5, rtol=1e-5, equal_nan=True)
        else:
            np.testing.assert_array_equal(got.ravel(), values)


def test_int8_maxpool_with_scale_is_the_plain_max_like_the_chip() -> None:
    """Item 1: the issue's minimal case; requantizing the maximum (the old rule) moved it 76 steps."""
    module, weights, feed = CASES["maxpool_scale_1x1"]()
    got = execute(module, weights, feed)["pool"]
    np.testing.assert_array_equal(got, feed["x"])


@pytest.mark.parametrize("op", ["matmul", "matmul_int"])
@pytest.mark.parametrize("flag", ["output_transpose", "input_transpose"])
def test_output_and_input_transpose_are_refused_naming_the_flag(op: str, flag: str) -> None:
    """Item 2: tpu-mlir 1.30.2 ignores output_transpose on bm1684x (the chip returns the untransposed
    product), and input_transpose likewise (found by tools/tpu_mlir_families.py: the chip multiplies the
    untransposed input, 3/3 square cases; other shapes fail its shape inference), so a graph asking for
    either is refused when built; right_transpose deploys and stays."""
    tpul.init("bm1684x")
    try:
        dtype = "float32" if op == "matmul" else "int8"
        x = tpul.Tensor([2, 8, 8], name="x", dtype=dtype)
        w = tpul.Tensor(name="w", ttype="coeff", dtype=dtype, data=np.ones((3, 8), dtype))
        with pytest.raises(TpuLangError, match=f"{flag}=True is not supported"):
            getattr(tpul, op)(x, w, right_transpose=True, **{flag: True}, out_name="y")
        getattr(tpul, op)(x, w, right_transpose=True, out_name="ok")
    finally:
        tpul.deinit()


def test_output_transpose_in_a_file_is_refused_by_run(tmp_path: Path, capsys) -> None:
    """...and a file that carries it (e.g. written by TpuLang) is refused by ``tpulang run``, exit 2."""
    tpul.init("bm1684x")
    x = tpul.Tensor([2, 3, 8], name="x")
    w = tpul.Tensor(name="w", ttype="coeff", data=np.ones((3, 8), np.float32))
    y = tpul.matmul(x, w, right_transpose=True, out_name="y")
    module, weights = tpul.build("mmt", [x], [y], quantized=False)
    tpul.deinit()
    text = emit_mlir(module).replace("output_transpose = false", "output_transpose = true")
    assert "output_transpose = true" in text
    mlir, npz = save_module(parse_mlir(text), weights, tmp_path)
    np.savez(tmp_path / "in.npz", x=np.ones((2, 3, 8), np.float32))
    code = main(["tpulang", "run", str(mlir), str(npz), str(tmp_path / "in.npz"), "--out",
                 str(tmp_path / "out.npz")])
    assert code == 2
    assert "output_transpose=True is not supported" in capsys.readouterr().err


def test_concat_of_differently_quantized_inputs_prints_tpulangs_unquantized_result() -> None:
    """Item 3: TpuLang gives the concat result no quantization unless ``dtype`` is given: with none
    downstream the function returns ``tensor<*xsi8>`` (pretty form); with dtype="int8" the last pair."""
    module, _, _ = CASES["concat_plain"]()
    text = emit_mlir(module)
    assert "return %3 : tensor<*xsi8>" in text and "!quant.uniform<i8:f32, 2.000000e-01:3>" in text
    module, _, _ = CASES["concat_int8"]()
    assert "-> tensor<*x!quant.uniform<i8:f32, 7.110000e-02:-7>>" in emit_mlir(module)


def test_concat_needs_one_pair_per_input_and_the_result() -> None:
    tpul.init("bm1684x")
    try:
        a = tpul.Tensor([1, 2], name="a", dtype="int8")
        b = tpul.Tensor([1, 2], name="b", dtype="int8")
        with pytest.raises(TpuLangError, match="scales needs 3 values"):
            tpul.concat([a, b], scales=[0.1, 0.2], zero_points=[0, 0, 0], axis=1, dtype="int8")
    finally:
        tpul.deinit()


@pytest.mark.parametrize("pool", ["maxpool2d", "avgpool2d"])
def test_padded_strided_pool_as_wide_as_its_input_is_refused(pool: str) -> None:
    """Item 6: random seed 5's two float pools (kernel [1, 3] on a 3-wide input, stride 2, padded):
    tpu-mlir's bm1684x backend computes neither that pool nor any padding of it (sweeps of sizes, kernels,
    strides and pads, float and int8: such padded, strided, input-wide kernels differ, no other), so it is
    refused when built; stride 1 or no padding there is accepted."""
    tpul.init("bm1684x")
    try:
        x = tpul.Tensor([1, 1, 6, 3], name="x")
        with pytest.raises(TpuLangError, match="deploys it wrong on bm1684x"):
            getattr(tpul, pool)(x, [1, 3], [2, 2], [0, 1, 0, 2], out_name="y")
        getattr(tpul, pool)(x, [1, 3], [2, 1], [0, 1, 0, 2], out_name="stride_1")
        getattr(tpul, pool)(x, [1, 3], [2, 2], [0, 0, 0, 0], out_name="unpadded")
        with pytest.raises(TpuLangError, match="deploys it wrong on bm1684x"):  # int8 maxpools fail there
            getattr(tpul, pool)(x, [1, 3], [2, 2], [0, 0, 0, 2], out_name="end_pad")
    finally:
        tpul.deinit()


def _requant_relu_avgpool(relu_is_output: bool):
    tpul.init("bm1684x")
    try:
        x = tpul.Tensor([1, 2, 5, 5], name="acc", dtype="int32")
        rq = tpul.requant_int(x, [23121, 11889], [-8, -19], 6, 2, out_dtype="int8", out_name="rq")
        r = tpul.relu(rq, out_name="relu")
        y = tpul.avgpool2d(r, [2, 3], [2, 2], [0, 0, 1, 1], scale=[0.5, 0.5], zero_point=[6, 6],
                           out_name="pool")
        module, weights = tpul.build("rq_relu_pool", [x], [r, y] if relu_is_output else [y], quantized=True)
    finally:
        tpul.deinit()
    return module, weights, {"acc": np.arange(-600, 1400, 40, dtype=np.int32).reshape(1, 2, 5, 5)}


def test_requant_relu_padded_avgpool_is_refused_unless_the_relu_is_an_output() -> None:
    """Item 6: random seed 6's rand_q21. tpu-mlir deploys requant_int -> relu -> a padded
    count_include_pad=False avgpool wrong (the same graph with the relu also an output gives our numbers on
    its simulator): refused when run, accepted with the relu as an output."""
    module, weights, feed = _requant_relu_avgpool(False)
    with pytest.raises(TpuLangError, match="deploys that chain wrong on bm1684x"):
        execute(module, weights, feed)
    module, weights, feed = _requant_relu_avgpool(True)
    assert execute(module, weights, feed)["pool"].shape == (1, 2, 3, 2)
