"""Malformed input: every corruption ends in ModelFormatError (never IndexError, struct.error, a hang or a
huge allocation), the CLI turns it into one error line and exit code 2."""

from __future__ import annotations

import contextlib
import struct

import numpy as np
import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.formats import load_model

from .._helpers import one_error_line

SMALL_TPU = "matmul/dense_256_edgetpu.tflite"  # 100 KB, with an Edge TPU op
SMALL_CPU = "ssd/ssd_mobilenet_v1_coco_quant_postprocess_head_layers.tflite"  # 16 KB, FlexBuffer custom op


def _parse_everything(data: bytes | bytearray) -> None:
    """Parse like a consumer would: model, every tensor's data, every Edge TPU package."""
    model = load_model(data)
    for t in model.tensors:
        model.buffer_data(t)
    for op in model.edgetpu_ops():
        model.darwinn(op)


@pytest.fixture(scope="module")
def tpu_bytes(fixture_path) -> bytes:
    return fixture_path(SMALL_TPU).read_bytes()


@pytest.fixture(scope="module")
def cpu_bytes(fixture_path) -> bytes:
    return fixture_path(SMALL_CPU).read_bytes()


def test_empty_and_tiny():
    for data in (b"", b"\x00", b"TFL3", b"\x00" * 7):
        with pytest.raises(ModelFormatError, match="too short"):
            load_model(data)


def test_wrong_magic(cpu_bytes):
    bad = bytearray(cpu_bytes)
    bad[4:8] = b"TFL2"
    with pytest.raises(ModelFormatError, match="identifier"):
        load_model(bad)


def test_missing_file(tmp_path):
    with pytest.raises(ModelFormatError, match=r"nope\.tflite does not exist"):
        load_model(tmp_path / "nope.tflite")


@pytest.mark.parametrize("name", [SMALL_TPU, SMALL_CPU])
def test_truncated_at_many_lengths(fixture_path, name):
    data = fixture_path(name).read_bytes()
    # The last few bytes of a file may be padding nothing refers to (the SSD head ends in 8 such bytes), so
    # cutting them leaves a valid flatbuffer; every cut that loses referenced bytes must be reported.
    end = len(data) - 16
    lengths = sorted(set(np.linspace(0, end, 60, dtype=int).tolist()) | {8, 16, 64})
    for n in lengths:
        with pytest.raises(ModelFormatError):
            _parse_everything(data[:n])


def test_root_offset_outside_file(cpu_bytes):
    bad = bytearray(cpu_bytes)
    bad[0:4] = struct.pack("<I", len(bad) + 100)
    with pytest.raises(ModelFormatError, match="outside"):
        load_model(bad)


def test_absurd_vector_length_is_refused_before_allocation(cpu_bytes):
    model = load_model(cpu_bytes)
    lay = model.subgraph_layout()
    bad = bytearray(cpu_bytes)
    bad[lay.operators_vector:lay.operators_vector + 4] = struct.pack("<I", 0x7FFFFFFF)
    with pytest.raises(ModelFormatError, match="operators: vector of 2147483647"):
        load_model(bad)


def test_output_index_out_of_range(cpu_bytes):
    lay = load_model(cpu_bytes).subgraph_layout()
    bad = bytearray(cpu_bytes)
    bad[lay.outputs_vector + 4:lay.outputs_vector + 8] = struct.pack("<i", 10_000)
    with pytest.raises(ModelFormatError, match=r"SubGraph\.outputs refers to tensor 10000"):
        load_model(bad)


def test_bit_flips_at_many_positions(tpu_bytes):
    rng = np.random.default_rng(7)
    positions = np.concatenate([np.arange(0, 256), rng.integers(0, len(tpu_bytes), 300)])
    for pos in positions.tolist():
        bad = bytearray(tpu_bytes)
        bad[pos] ^= 1 << int(rng.integers(0, 8))
        # Either it still parses (a flip inside tensor data) or it is reported as malformed.
        with contextlib.suppress(ModelFormatError):
            _parse_everything(bad)


# Random mutations (seeded, under per-case time and memory limits) are in test/fuzz/test_fuzz_readers.py.


def test_cli_inspect_bad_file_prints_one_line_and_returns_2(tmp_path, capsys, cpu_bytes):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(cpu_bytes[:200])
    one_error_line(main(["inspect", str(bad)]), capsys.readouterr().err, "bad.tflite")


def test_cli_inspect_json_on_cpu_and_tpu_models(fixture_path, capsys):
    import json

    assert main(["inspect", "--json", str(fixture_path(SMALL_CPU))]) == 0
    cpu = json.loads(capsys.readouterr().out)
    assert cpu["edgetpu"] == [] and len(cpu["inputs"]) == 12
    assert main(["inspect", "--json", str(fixture_path(SMALL_TPU))]) == 0
    tpu = json.loads(capsys.readouterr().out)
    (op,) = tpu["edgetpu"]
    assert {e["type"] for e in op["executables"]} == {"PARAMETER_CACHING", "EXECUTION_ONLY"}
    pc = next(e for e in op["executables"] if e["type"] == "PARAMETER_CACHING")
    assert pc["parameter_bytes"] == 67584 and pc["parameter_caching_token"].startswith("0x")
    assert main(["inspect", str(fixture_path(SMALL_TPU))]) == 0
    assert "dma hints:" in capsys.readouterr().out
