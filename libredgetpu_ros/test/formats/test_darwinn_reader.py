"""DarwiNN executables inside the compiled fixtures: types, tokens, layers, DMA hints, parameter sizes."""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import pytest
from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.formats.darwinn import ExecutableType, read_package

POSENET = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"
SSD = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_{}_of_2_edgetpu.tflite"


def _package(fixture_path, rel):
    model = load_model(fixture_path(rel))
    (op,) = model.edgetpu_ops()
    return model, op, model.darwinn(op)


def test_posenet_executables(fixture_path):
    model, op, pkg = _package(fixture_path, POSENET)
    types = {e.type for e in pkg.executables}
    assert types == {ExecutableType.EXECUTION_ONLY, ExecutableType.PARAMETER_CACHING}
    eo, pc = pkg.execution_only, pkg.parameter_caching
    assert pkg.stand_alone is None and pkg.runnable is eo
    assert eo.parameter_caching_token == pc.parameter_caching_token != 0
    assert [la.shape[1:] for la in eo.output_layers] == [(31, 41, 17), (31, 41, 34), (31, 41, 64)]
    # Output layers are the Edge TPU op's output tensors, same names, same quantization.
    for la, t in zip(eo.output_layers, op.outputs, strict=True):
        tensor = model.tensors[t]
        assert la.name == tensor.name
        assert la.zero_point == tensor.quantization.zero_point[0]
        assert la.dequant_factor == pytest.approx(float(tensor.quantization.scale[0]))
    kinds = [h.kind for h in eo.dma_hints]
    assert kinds == ["instruction"] + ["descriptor"] * 5 + ["interrupt"]
    inputs = [h for h in eo.dma_hints if h.buffer_type == "input"]
    assert len(inputs) == 2 and inputs[0].offset < inputs[0].offset + inputs[0].size
    assert inputs[1].offset < inputs[0].offset + inputs[0].size  # overlapping pieces
    assert inputs[1].offset + inputs[1].size == 481 * 641 * 3 + 5
    outputs = [h.layer_name for h in eo.dma_hints if h.buffer_type == "output"]
    assert outputs == [la.name for la in eo.output_layers]
    assert len(pc.parameters) == next(h.size for h in pc.dma_hints if h.buffer_type == "parameter")


def test_deeplab_two_chunks_and_split_input(fixture_path):
    model, op, pkg = _package(fixture_path, "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite")
    eo = pkg.execution_only
    assert len(eo.instruction_bitstreams) == 2
    assert [h.chunk_index for h in eo.dma_hints if h.kind == "instruction"] == [0, 1]
    assert [la.shape[1:] for la in eo.output_layers] == [(33, 33, 256), (1, 1, 256)]
    (input_tensor,) = [model.tensors[i] for i in op.inputs]
    a, b = [h for h in eo.dma_hints if h.buffer_type == "input"]
    assert b.offset < a.offset + a.size  # the two pieces overlap
    assert b.offset + b.size - input_tensor.nbytes == 5  # and reach 5 bytes past the tensor
    # Interleaving: chunk 1 is sent after both input pieces.
    order = [(h.kind, h.buffer_type) for h in eo.dma_hints]
    assert order.index(("instruction", None), 1) > order.index(("descriptor", "input")) + 1


def test_ssd_segments_share_token_and_segment1_has_three_inputs(fixture_path):
    _, _, pkg0 = _package(fixture_path, SSD.format(0))
    _, _, pkg1 = _package(fixture_path, SSD.format(1))
    tokens = {e.parameter_caching_token for p in (pkg0, pkg1) for e in p.executables}
    assert len(tokens) == 1
    eo1 = pkg1.execution_only
    assert sorted(la.size_bytes for la in eo1.input_layers) == [25600, 128000, 207936]
    # Each input hint addresses offset 0 of its own layer.
    hints = [h for h in eo1.dma_hints if h.buffer_type == "input"]
    assert all(h.offset == 0 for h in hints)
    assert {h.layer_name: h.size for h in hints} == {la.name: la.size_bytes for la in eo1.input_layers}
    # Segment 0's outputs are segment 1's inputs (by name and size).
    eo0 = pkg0.execution_only
    sizes0 = {la.name: la.size_bytes for la in eo0.output_layers}
    assert sizes0 == {la.name: la.size_bytes for la in eo1.input_layers}


@pytest.mark.parametrize("n", [256, 512, 1024])
def test_dense_parameter_sizes_match_formula_and_sidecar(fixture_path, n):
    _, _, pkg = _package(fixture_path, f"matmul/dense_{n}_edgetpu.tflite")
    sidecar = json.loads(fixture_path(f"matmul/dense_{n}_edgetpu.json").read_text())
    pc = pkg.parameter_caching
    expected = math.ceil(n / 64) * (64 * 8 + 64 * n)
    assert len(pc.parameters) == expected == sidecar["param_size"]
    # The sidecar's per-group overhead bytes are the start of the real blob (independent extraction).
    overhead = base64.b64decode(sidecar["param_overhead"])
    assert bytes(pc.parameters[:64 * 8]) == overhead[:64 * 8]
    eo = pkg.execution_only
    assert len(eo.parameters) == 0
    assert eo.input_layers[0].shape == (1, 1, 1, n) and eo.output_layers[0].shape == (1, 1, 1, n)
    assert eo.output_layers[0].zero_point == sidecar["output_zero_point"]
    assert eo.output_layers[0].dequant_factor == pytest.approx(sidecar["output_scale"])


def test_read_package_accepts_bare_dwn1_and_rejects_other_bytes(fixture_path):
    _, op, pkg = _package(fixture_path, "matmul/dense_256_edgetpu.tflite")
    raw = op.custom_options_raw
    start = bytes(raw).find(b"DWN1") - 4
    bare = read_package(raw[start:])  # bare package; the trailing FlexBuffer bytes are never reached
    assert [e.type for e in bare.executables] == [e.type for e in pkg.executables]
    with pytest.raises(ModelFormatError, match="DarwiNN"):
        read_package(b"\x00" * 64)
    with pytest.raises(ModelFormatError):
        read_package(b"")


def test_field_offsets_are_inside_their_chunks(fixture_path):
    _, _, pkg = _package(fixture_path, POSENET)
    for exe in pkg.executables:
        for chunk in exe.instruction_bitstreams:
            assert chunk.field_offsets
            bits = np.array([f.offset_bit for f in chunk.field_offsets])
            assert bits.min() >= 0 and bits.max() < len(chunk.data) * 8
            assert {f.desc for f in chunk.field_offsets} <= {"input", "output", "parameter", "scratch"}
