"""Conformance with Sophgo's TpuLang (tpu-mlir 1.30.2) on the public fixture cases.

Every case is rebuilt from its CASE.json through our Python API: the origin MLIR must be byte-identical, the
weight npz equal (keys, dtype, shape, values; byte-identical too); the executor (on the MLIR file tpu-mlir
wrote) must give the reference outputs (f32: atol = rtol = 1e-5; integers exactly) and every intermediate in
CASE_ref_all.npz.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.sophgo.emitter import emit_mlir, uses_generic_form
from libredgetpu_ros.sophgo.executor import execute
from libredgetpu_ros.sophgo.parser import load_mlir
from libredgetpu_ros.sophgo.replay import load_case, replay_case, replay_to_dir

from libredgetpu_ros import sophgo as tpul

CASES = ("f32_add_concat_reshape_permute", "f32_conv_bias_relu", "f32_conv_s2_asym_maxpool",
         "f32_dwconv_dil2_avgpool", "f32_mlp_softmax", "q_conv_int_zp_requant", "q_conv_quant_perchannel",
         "q_matmul_int_requant")


@pytest.fixture(scope="module")
def tpulang_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "tpulang"


def _assert_npz_equal(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    assert list(ours) == list(theirs)
    for key, expected in theirs.items():
        assert ours[key].dtype == expected.dtype, key
        assert ours[key].shape == expected.shape, key
        np.testing.assert_array_equal(ours[key], expected, err_msg=key)


def _assert_close(name: str, got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape, name
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5, err_msg=name)
    else:
        assert got.dtype == expected.dtype, name
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_every_public_case_is_listed(tpulang_dir: Path) -> None:
    assert sorted(p.name for p in tpulang_dir.iterdir() if p.is_dir()) == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_replay_writes_identical_mlir_and_equal_npz(case: str, tpulang_dir: Path, tmp_path: Path) -> None:
    folder = tpulang_dir / case
    spec = load_case(folder / f"{case}.json")
    mlir_path, npz_path = replay_to_dir(folder / f"{case}.json", tmp_path)
    assert mlir_path.name == f"{case}_origin.mlir"
    assert npz_path.name == spec["module_weight_file"]
    assert mlir_path.read_bytes() == (folder / f"{case}_origin.mlir").read_bytes()
    _assert_npz_equal(dict(np.load(npz_path)), dict(np.load(folder / npz_path.name)))
    assert npz_path.read_bytes() == (folder / npz_path.name).read_bytes()  # even the zip headers
    module, _ = replay_case(folder / f"{case}.json")
    assert uses_generic_form(module) == (spec["print_form"] == "generic")
    # Our inferred shapes are the ones tpu-mlir's shape inference found.
    for call in spec["ops"]:
        declared = call["output"]["mlir_type_shape_infer"]
        dims = declared[len("tensor<"):].split("x")[:len(module.shapes[call["output"]["name"]])]
        assert [int(d) for d in dims] == list(module.shapes[call["output"]["name"]])


@pytest.mark.parametrize("case", CASES)
def test_executor_matches_references(case: str, tpulang_dir: Path) -> None:
    folder = tpulang_dir / case
    module = load_mlir(folder / f"{case}_origin.mlir")
    weights = dict(np.load(folder / module.weight_file))
    values = execute(module, weights, dict(np.load(folder / f"{case}_in.npz")), keep_all=True)
    ref_out = dict(np.load(folder / f"{case}_ref_out.npz"))
    assert set(ref_out) == set(module.outputs)
    for name, expected in ref_out.items():
        _assert_close(name, values[name], expected)
    ref_all = dict(np.load(folder / f"{case}_ref_all.npz"))
    assert ref_all
    for name, expected in ref_all.items():
        _assert_close(name, values[name], expected)


@pytest.mark.parametrize("path", [*sorted(CASES), "convf", "convq", "q2"])
def test_parse_then_emit_is_identity(path: str, tpulang_dir: Path) -> None:
    folder = tpulang_dir / path if path in CASES else tpulang_dir
    file = folder / f"{path}_origin.mlir"
    assert emit_mlir(load_mlir(file)) == file.read_text()


def test_loose_examples_rebuilt_by_hand(tpulang_dir: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two earlier single examples rebuilt with TpuLang calls: conv + relu f32, u8 per-channel conv_int."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 3, 8, 8], name="in")
    w = tpul.Tensor(name="w", ttype="coeff", data=rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    out = tpul.relu(tpul.conv(x, w, pad=[1, 1, 1, 1], out_name="conv_out"), out_name="relu_out")
    tpul.compile_f32("convf", [x], [out])
    tpul.deinit()
    assert (tmp_path / "convf_origin.mlir").read_bytes() == (tpulang_dir / "convf_origin.mlir").read_bytes()
    assert (tmp_path / "convf_top_f32_all_origin_weight.npz").is_file()

    tpul.init("bm1684x")
    x = tpul.Tensor([1, 3, 8, 8], name="in", dtype="uint8", scale=0.05, zero_point=3)
    w = tpul.Tensor(name="w", ttype="coeff", data=np.ones((4, 3, 3, 3), np.int8), dtype="int8",
                    scale=[0.01, 0.02, 0.03, 0.04], zero_point=0)
    acc = tpul.conv_int(x, w, stride=[2, 2], pad=[1, 1, 1, 1], out_name="conv_out")
    rq = tpul.requant_int(acc, [1, 1, 1, 1], [-8, -8, -8, -8], 0, 2, out_name="rq")
    tpul.compile("q2", [x], [rq])
    tpul.deinit()
    assert (tmp_path / "q2_origin.mlir").read_bytes() == (tpulang_dir / "q2_origin.mlir").read_bytes()
