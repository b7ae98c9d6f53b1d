"""Issue 18 item 2: small hostile files that hung the readers, crashed them or made them allocate gigabytes.

Each case runs in a forked worker capped at 1 GiB of address space and 10 s (``fuzz/harness.run_guarded``):
before the fix these ended as a hang, a MemoryError or a KeyError there; now each is a ``ModelFormatError``
naming the field, and the CLI prints one ``error:`` line and returns 2.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
from pathlib import Path

import flatbuffers.flexbuffers as flexbuffers
import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.errors import InputError
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.formats.flex import decode_flexbuffer

from .._helpers import load_helper, one_error_line

HERE = Path(__file__).resolve().parent


hostile = load_helper(HERE / "_hostile.py")
harness = load_helper(HERE.parent / "fuzz" / "harness.py", "_fuzz_harness")

POSENET = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"
DENSE = "matmul/dense_256_edgetpu.tflite"
SSD_HEAD = "ssd/ssd_mobilenet_v1_coco_quant_postprocess_head_layers.tflite"
TYPED = (InputError,)


def _refused(run, data: bytes, match: str) -> str:
    outcome = harness.run_guarded(run, data, TYPED, time_limit_s=10.0, memory_limit_mb=1024)
    assert outcome.kind == "refused", outcome
    assert match in outcome.message, outcome.message
    return outcome.message


def _inspect_json(data: bytes) -> None:
    from libredgetpu_ros.cli.inspect_cmd import summarize, to_json

    to_json(summarize(load_model(data)))


def _plan(data: bytes) -> None:
    from libredgetpu_ros.edgetpu.plan import plan_model

    plan_model(data)


def _cli_one_line_exit_2(argv: list[str]) -> None:
    """Run the CLI; raise unless it returned 2 with exactly one ``error:`` line on stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    one_error_line(code, err.getvalue())


def _cli_ok(path: Path, cmd: str, tmp_path: Path) -> None:
    """The CLI in a guarded worker: exit 2, one line (``accepted`` means the assertion inside held)."""
    outcome = harness.run_guarded(lambda _: _cli_one_line_exit_2([cmd, str(path)]), b"", (),
                                  time_limit_s=10.0, memory_limit_mb=1024)
    assert outcome.kind == "accepted", outcome


# -- FlexBuffers -----------------------------------------------------------------------------------------
def test_flexbuffer_dag_is_refused_by_the_decode_budget():
    dag = hostile.flex_dag(fanout=16, depth=12)  # ~700 bytes, 16**12 leaves if every reference is expanded
    assert len(dag) < 1200
    msg = _refused(lambda d: decode_flexbuffer(d, "dag"), dag, "decode budget")
    assert "dag" in msg


def test_model_with_flexbuffer_dag_options_exits_2(tmp_path):
    path = tmp_path / "dag.tflite"
    path.write_bytes(hostile.tflite_model(custom_options=hostile.flex_dag()))
    assert len(path.read_bytes()) < 2000
    _refused(load_model, path.read_bytes(), "operator 0 (MyOp)")
    for cmd in ("inspect", "plan"):
        _cli_ok(path, cmd, tmp_path)


def test_model_repeating_a_1mib_string_in_custom_options(tmp_path):
    data = hostile.tflite_model(custom_options=hostile.flex_repeated_string(1 << 20, refs=2000))
    assert len(data) < (1 << 20) + 16_000  # a 1 MB file, 2000 references: 2 GB if each is copied
    _refused(_inspect_json, data, "decode budget")


@pytest.mark.parametrize("n_opcodes,n_operators", [(4000, 1), (1, 4000)])
def test_model_repeating_a_1mib_custom_code(n_opcodes, n_operators):
    data = hostile.tflite_model(custom_code=b"x" * (1 << 20), n_opcodes=n_opcodes, n_operators=n_operators)
    assert len(data) < (1 << 20) + 40_000
    _refused(_inspect_json, data, "decode budget")


# -- DarwiNN sizes -----------------------------------------------------------------------------------------
def test_two_byte_change_to_an_output_layer_size_is_refused(fixture_path, tmp_path):
    data = bytearray(fixture_path(POSENET).read_bytes())
    pos = hostile.output_layer_size_pos(bytes(data), 1)
    assert struct.unpack_from("<i", data, pos)[0] == 45760
    data[pos + 2:pos + 4] = b"\xff\x7f"  # 2 bytes: size_bytes 45760 -> 2,147,463,872
    assert struct.unpack_from("<i", data, pos)[0] == 2_147_463_872
    msg = _refused(_plan, bytes(data), "size_bytes")
    assert "2147463872" in msg and "offset_2" in msg
    path = tmp_path / "big_output.tflite"
    path.write_bytes(data)
    _cli_ok(path, "plan", tmp_path)
    _cli_ok(path, "inspect", tmp_path)


def test_input_hint_reaching_past_its_layer_is_refused(fixture_path, tmp_path):
    data = bytearray(fixture_path(POSENET).read_bytes())
    pos = hostile.input_hint_size_pos(bytes(data))
    data[pos + 2:pos + 4] = b"\xff\x7f"  # the input DMA hint now reaches ~2.1 GB: zero padding to allocate
    msg = _refused(_plan, bytes(data), "DMA hint")
    assert "input" in msg
    path = tmp_path / "big_padding.tflite"
    path.write_bytes(data)
    _cli_ok(path, "plan", tmp_path)


def test_plan_caps_the_activations_of_all_edgetpu_ops_together(fixture_path):
    """Each executable may move up to 256 MiB; two Edge TPU ops sharing a package whose three output layers
    claim 64 MiB each would have the dry run allocate ~390 MiB of activations twice over: refused."""
    data = bytearray(fixture_path(POSENET).read_bytes())
    for i in range(3):
        pos = hostile.output_layer_size_pos(bytes(data), i)
        data[pos:pos + 4] = struct.pack("<i", 64 << 20)
    options = bytes(load_model(bytes(data)).edgetpu_ops()[0].custom_options_raw)
    two_ops = hostile.tflite_model(custom_code=b"edgetpu-custom-op", custom_options=options, n_operators=2)
    _refused(_plan, two_ops, "bytes of activations")


def test_plan_when_the_edgetpu_op_inputs_vanish(fixture_path, tmp_path):
    data = bytearray(fixture_path(DENSE).read_bytes())
    pos = hostile.operator_inputs_count_pos(bytes(data), 0)
    assert struct.unpack_from("<I", data, pos)[0] == 1
    data[pos:pos + 4] = struct.pack("<I", 0)
    msg = _refused(_plan, bytes(data), "input tensors")
    assert "operator 0" in msg
    path = tmp_path / "no_inputs.tflite"
    path.write_bytes(data)
    _cli_ok(path, "plan", tmp_path)


def test_infer_exits_2_on_a_hostile_model(fixture_path, tmp_path):
    path = tmp_path / "dag.tflite"
    path.write_bytes(hostile.tflite_model(custom_options=hostile.flex_dag()))
    image = str(fixture_path("images/cat.bmp"))
    outcome = harness.run_guarded(
        lambda _: _cli_one_line_exit_2(["infer", "--model", str(path), "--image", image, "--backend", "cpu"]),
        b"", (), time_limit_s=20.0, memory_limit_mb=1536)
    assert outcome.kind == "accepted", outcome


def test_inspect_with_thousands_of_edgetpu_ops_sharing_one_table():
    """3000 Edge TPU ops (one Operator table referenced 3000 times, consuming its own output), a 12 KB file:
    inspect walked the graph once per Edge TPU op, cubic in the op count (a hang); the count is now capped
    (256) and each walk visits a tensor once."""
    from libredgetpu_ros.formats.darwinn import read_package

    package = hostile.minimal_darwinn_package()
    assert read_package(package).runnable.type.name == "STAND_ALONE"
    data = hostile.tflite_model(custom_code=b"edgetpu-custom-op", custom_options=package, n_operators=3000)
    _refused(_inspect_json, data, "3000 edgetpu-custom-op operators")
    many = hostile.tflite_model(custom_code=b"edgetpu-custom-op", custom_options=package, n_operators=256)
    outcome = harness.run_guarded(_inspect_json, many, TYPED, time_limit_s=10.0, memory_limit_mb=1024)
    assert outcome.kind == "accepted", outcome  # within the 10 s hang limit (about 0.1 s here)


# -- inspect --json on every decoded value type ----------------------------------------------------------
def test_inspect_json_with_a_blob_custom_option(fixture_path, tmp_path, capsys):
    data = fixture_path(SSD_HEAD).read_bytes()
    op = next(o for o in load_model(data).operators if o.custom_options_raw is not None)
    fbb = flexbuffers.Builder()
    with fbb.Map():
        fbb.Blob("blob", b"\x00\x01\xfe")
        fbb.Int("max_detections", 10)
    path = tmp_path / "blob.tflite"
    path.write_bytes(hostile.replace_custom_options(data, op.index, bytes(fbb.Finish())))
    assert load_model(path).operators[op.index].custom_options["blob"] == b"\x00\x01\xfe"
    assert main(["inspect", "--json", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["operators"][op.index]["custom_options"] == {"blob": "0x0001fe", "max_detections": 10}
    assert main(["inspect", str(path)]) == 0
    assert "'blob': b'\\x00\\x01\\xfe'" in capsys.readouterr().out


def test_the_budget_leaves_real_models_a_wide_margin(fixtures_dir):
    """Well-formed files read each byte about once: every fixture spends <= 1.1x its size (budget: 4x + a
    constant), its custom options FlexBuffers too."""
    from libredgetpu_ros.formats.flex import FlexReader

    for path in sorted(fixtures_dir.glob("*/*.tflite")):
        model = load_model(path)
        for op in model.edgetpu_ops():
            model.darwinn(op)
        assert model._buf.spent <= 1.1 * len(model.data), path.name  # white box: the model's Buffer
        for op in model.operators:
            if op.custom_options_raw is not None:
                reader = FlexReader(op.custom_options_raw, path.name, keep_views=True)
                reader.root()
                assert reader.spent <= 1.1 * reader.size, (path.name, op.index)
