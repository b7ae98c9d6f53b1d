"""``libredgetpu-ros tpulang replay|run`` and ``libredgetpu-ros export-tpulang dense|classifier``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.matmul import MatMulEngine

CASE = "q_conv_int_zp_requant"


def test_replay_then_run_reproduces_the_case(fixtures_dir: Path, tmp_path: Path, capsys) -> None:
    folder = fixtures_dir / "tpulang" / CASE
    assert main(["tpulang", "replay", str(folder / f"{CASE}.json"), "--out", str(tmp_path), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    mlir = Path(written["mlir"])
    assert mlir.read_bytes() == (folder / f"{CASE}_origin.mlir").read_bytes()
    out = tmp_path / "out.npz"
    assert main(["tpulang", "run", str(mlir), written["weights"], str(folder / f"{CASE}_in.npz"),
                 "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["outputs"] == {"qconv_relu": {"dtype": "int8", "shape": [1, 4, 9, 9]}}
    got, ref = np.load(out), np.load(folder / f"{CASE}_ref_out.npz")
    assert set(got.files) == set(ref.files)
    np.testing.assert_array_equal(got["qconv_relu"], ref["qconv_relu"])
    assert main(["tpulang", "run", str(mlir), written["weights"], str(folder / f"{CASE}_in.npz"),
                 "--out", str(out), "--all"]) == 0
    assert set(np.load(out).files) == {"x", "qconv_w", "qconv_b", "qconv", "qconv_rq", "qconv_relu"}


def test_replay_errors(tmp_path: Path, capsys) -> None:
    assert main(["tpulang", "replay", str(tmp_path / "none.json"), "--out", str(tmp_path)]) == 2
    assert "CASE.json" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"case": "c", "mode": "f32", "inputs": [], "weights": [], "outputs": ["y"],
                               "ops": [{"tpulang_func": "gelu", "args": {}}]}))
    assert main(["tpulang", "replay", str(bad), "--out", str(tmp_path)]) == 2
    assert "ops[0] (gelu): unsupported TpuLang function" in capsys.readouterr().err


def test_export_dense_with_weights(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(1)
    engine = MatMulEngine.from_template(256, backend="cpu")
    lo, hi = engine.weight_range()
    weights = rng.uniform(lo[:, None], hi[:, None], size=(256, 256)).astype(np.float32)
    bias = rng.uniform(-1, 1, 256).astype(np.float32)
    np.save(tmp_path / "w.npy", weights)
    np.save(tmp_path / "b.npy", bias)
    assert main(["export-tpulang", "dense", "--template", "256", "--weights", str(tmp_path / "w.npy"),
                 "--bias", str(tmp_path / "b.npy"), "--batch", "3", "--out", str(tmp_path / "out"),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["module"] == "dense_256" and summary["inputs"] == {"x": [3, 256]}
    x = rng.uniform(-1, 1, size=(3, 256)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["tpulang", "run", summary["mlir"], summary["weights"], str(tmp_path / "in.npz"),
                 "--out", str(tmp_path / "y.npz")]) == 0
    engine.set_weights(weights, bias)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npz")["y"], engine.matmul(x))


def test_export_dense_reports_clipped_weights_and_strict_refuses(tmp_path: Path, capsys) -> None:
    """Issue 38 item 8: weights beyond the template's int8 range were clipped without a word."""
    engine = MatMulEngine.from_template(256, backend="cpu")
    lo, hi = engine.weight_range()
    small = np.zeros((3, 5), np.float32)
    small[0, 0], small[2, 4], small[1, 1] = hi[0] + 0.5, lo[2] - 0.25, hi[1] * 0.5  # two outside, one in
    np.save(tmp_path / "w.npy", small)
    args = ["export-tpulang", "dense", "--template", "256", "--weights", str(tmp_path / "w.npy"), "--json"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    clipped = json.loads(captured.out)["clipped_weights"]
    assert clipped["count"] == 2 and clipped["max_error"] == pytest.approx(0.5, rel=1e-5)
    assert "warning: 2 weight(s) outside the template's int8 range were clipped" in captured.err
    assert main([*args, "--strict", "--out", str(tmp_path / "b")]) == 2
    assert "2 weight(s) outside the template's int8 range would be clipped" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    np.save(tmp_path / "w.npy", np.clip(small, lo[:3, None], hi[:3, None]))
    assert main([*args, "--strict", "--out", str(tmp_path / "c")]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["clipped_weights"] == {"count": 0, "max_error": 0.0}
    assert "warning" not in captured.err


def test_export_classifier(fixture_path, tmp_path: Path, capsys) -> None:
    model = fixture_path("classify/mobilenet_v1_0.25_128_quant.tflite")
    assert main(["export-tpulang", "classifier", str(model), "--out", str(tmp_path), "--name", "mnet",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"] == {"image": [1, 128, 128, 3]} and summary["outputs"] == ["probabilities"]
    assert Path(summary["mlir"]).name == "mnet_origin.mlir"
    assert Path(summary["weights"]).name == "mnet_top_quantized_all_origin_weight.npz"


def test_export_dense_embeds_a_small_controller(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(4)
    small = rng.uniform(-0.05, 0.05, (3, 5)).astype(np.float32)
    np.save(tmp_path / "w.npy", small)
    assert main(["export-tpulang", "dense", "--template", "256", "--weights", str(tmp_path / "w.npy"),
                 "--out", str(tmp_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    x = np.zeros((1, 256), np.float32)
    x[0, :5] = rng.uniform(-1, 1, 5)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["tpulang", "run", summary["mlir"], summary["weights"], str(tmp_path / "in.npz"),
                 "--out", str(tmp_path / "y.npz")]) == 0
    engine = MatMulEngine.from_template(256, backend="cpu")
    full = np.zeros((256, 256), np.float32)
    full[:3, :5] = small
    engine.set_weights(full)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npz")["y"], engine.matmul(x))


@pytest.mark.parametrize("argv, message", [
    (["export-tpulang", "classifier", "missing.tflite", "--out", "x"], "model missing.tflite does not exist"),
    (["export-tpulang", "dense", "--template", "256", "--batch", "0", "--out", "x"], "--batch must be >= 1"),
])
def test_export_errors(argv: list[str], message: str, capsys) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_export_refuses_unsupported_ops(fixture_path, tmp_path: Path, capsys) -> None:
    model = fixture_path("classify/mobilenet_v2_1.0_224_quant.tflite")  # has ADD
    assert main(["export-tpulang", "classifier", str(model), "--out", str(tmp_path)]) == 2
    assert "not supported by the TpuLang export" in capsys.readouterr().err


def test_replay_and_run_a_concat_of_differently_quantized_inputs(tmp_path: Path, capsys) -> None:
    """Issue 38 item 3: replay accepts concat's scales/zero_points (it refused them) and writes TpuLang's own
    file byte for byte; ``tpulang run`` runs TpuLang's file (it refused it) with the simulator's numbers."""
    data = Path(__file__).resolve().parent / "data"
    tpulang_file = data / "tpulang_1.30.2" / "concat_plain_origin.mlir"
    spec = {"case": "concat_plain", "mode": "quantized", "weights": [], "outputs": ["cat"],
            "inputs": [{"name": "a", "shape": [1, 2, 2, 3], "dtype": "int8"},
                       {"name": "b", "shape": [1, 1, 2, 3], "dtype": "int8"}],
            "ops": [{"tpulang_func": "concat",
                     "args": {"inputs": [{"tensor": "a"}, {"tensor": "b"}], "scales": [0.05, 0.2, 0.1],
                              "zero_points": [0, 3, 0], "axis": 1, "out_name": "cat"}}]}
    (tmp_path / "concat_plain.json").write_text(json.dumps(spec))
    assert main(["tpulang", "replay", str(tmp_path / "concat_plain.json"), "--out", str(tmp_path / "r"),
                 "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert Path(written["mlir"]).read_bytes() == tpulang_file.read_bytes()
    a = (-128 + (np.arange(12) * 53) % 256).reshape(1, 2, 2, 3).astype(np.int8)  # chip_cases' inputs
    b = (-128 + (np.arange(6) * 97) % 256).reshape(1, 1, 2, 3).astype(np.int8)
    np.savez(tmp_path / "in.npz", a=a, b=b)
    assert main(["tpulang", "run", str(tpulang_file), written["weights"], str(tmp_path / "in.npz"), "--out",
                 str(tmp_path / "out.npz")]) == 0
    chip = json.loads((data / "bm1684x_cmodel.json").read_text())["cases"]["concat_plain"]["outputs"]["cat"]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["cat"].ravel(), chip["values"])
