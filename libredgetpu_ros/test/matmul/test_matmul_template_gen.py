"""template-gen's own TFLite writer (checked with LiteRT and our reader) and the blob / template-gen CLI."""

from __future__ import annotations

import argparse
import json
import shutil
from types import ModuleType

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.cli import blob_cmd, template_gen_cmd
from libredgetpu_ros.errors import ConfigError, WeightsError
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.matmul.blob import parse_blob
from libredgetpu_ros.matmul.template import dense_quantization
from libredgetpu_ros.matmul.template_gen import DenseSpec, generate, write_uncompiled
from libredgetpu_ros.matmul.twin import dense_uint8


def _cli(module: ModuleType, argv: list[str]) -> int:
    """Run one subcommand module the way cli/main.py does (parser from add_arguments, then run)."""
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return module.run(parser.parse_args(argv))


@pytest.mark.parametrize("n", [64, 256])
def test_written_model_runs_in_litert_like_the_twin(n, tmp_path):
    path = write_uncompiled(DenseSpec(n, input_range=2.0, seed=n), tmp_path)
    model = load_model(path)
    quant, weights = dense_quantization(model, path)
    assert quant.input_scale == pytest.approx(4.0 / 255) and quant.input_zero_point == 127
    assert quant.weight_scales.shape == (n,)
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    assert inp["dtype"] == np.uint8 and out["dtype"] == np.uint8
    w_detail = next(d for d in interpreter.get_tensor_details() if d["name"] == "dense/weights")
    assert np.array_equal(interpreter.get_tensor(w_detail["index"]), weights)
    assert len(w_detail["quantization_parameters"]["scales"]) == n  # per-row
    xq = np.random.default_rng(0).integers(0, 256, size=(6, n), dtype=np.uint8)
    for sample, expected in zip(xq, dense_uint8(weights, xq, quant), strict=True):
        interpreter.set_tensor(inp["index"], sample[None, :])
        interpreter.invoke()
        assert np.array_equal(interpreter.get_tensor(out["index"])[0], expected)


def test_missing_compiler_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="x86-64") as info:
        generate(DenseSpec(128), tmp_path)
    assert (tmp_path / "dense_128.tflite").is_file() and "edgetpu_compiler -s" in str(info.value)
    with pytest.raises(WeightsError, match="multiple of 64") as info:
        _cli(template_gen_cmd, ["--sizes", "100", "--out", str(tmp_path), "--no-compile"])
    assert info.value.exit_code == 2


def test_blob_cli_writes_the_engine_blob(tmp_path, fixture_path, capsys):
    weights = np.random.default_rng(0).uniform(-0.2, 0.2, size=(256, 256)).astype(np.float32)
    np.save(tmp_path / "w.npy", weights)
    out = tmp_path / "w.blob"
    template = fixture_path("matmul/dense_256_edgetpu.tflite")
    code = _cli(blob_cmd, ["--template", str(template), "--weights", str(tmp_path / "w.npy"),
                           "--out", str(out), "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    scales = np.array(load_model(fixture_path("matmul/dense_256.tflite")).tensors[1].quantization.scale)
    rounded = np.rint(weights / scales[:, None])
    expected = np.clip(rounded, -128, 127).astype(np.int8)
    assert report["clipped_count"] == int(np.count_nonzero((rounded > 127) | (rounded < -128))) > 0
    assert np.array_equal(parse_blob(out.read_bytes(), 256, 256)[0], expected)
    np.save(tmp_path / "bad.npy", np.zeros((512, 512)))
    with pytest.raises(WeightsError, match=r"\(256, 256\)"):
        _cli(blob_cmd, ["--template", str(template), "--weights", str(tmp_path / "bad.npy"),
                        "--out", str(out)])
