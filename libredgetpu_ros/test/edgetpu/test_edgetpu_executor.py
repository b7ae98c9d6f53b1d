"""The executor's transfers against each fixture model's DMA hints, and output reassembly."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.edgetpu.executor import execute, schedule
from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator
from libredgetpu_ros.edgetpu.transport import RecordingTransport
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.formats.layout import relayout_output

MODELS = [
    "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite",
    "classify/mobilenet_v2_1.0_224_quant_edgetpu.tflite",
    "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite",
    "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite",
    "ssd/mobilenet_ssd_v2_coco_quant_postprocess_edgetpu.tflite",
    "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_0_of_2_edgetpu.tflite",
    "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite",
    "matmul/dense_256_edgetpu.tflite",
    "matmul/dense_512_edgetpu.tflite",
    "matmul/dense_1024_edgetpu.tflite",
]
TAG = {"input": 1, "parameter": 2}


def package_of(path):
    model = load_model(path)
    return model, model.darwinn(model.edgetpu_ops()[0])


def _bulk_messages(calls):
    """(tag, payload) for each header + payload sequence on 0x01, in order; and the inbound reads."""
    messages, i, out = [], 0, [c for c in calls if c.kind == "bulk_write"]
    while i < len(out):
        header = out[i].data
        assert out[i].endpoint == 0x01 and len(header) == 8 and header[5:] == b"\0\0\0"
        length, tag = int.from_bytes(header[:4], "little"), header[4]
        i += 1
        payload = bytearray()
        while len(payload) < length:
            assert out[i].length <= r.MAX_BULK_OUT_CHUNK
            payload += out[i].data
            i += 1
        assert len(payload) == length
        messages.append((tag, bytes(payload)))
    return messages


@pytest.mark.parametrize("relative", MODELS)
def test_transfers_follow_dma_hints(fixture_path, relative) -> None:
    model, package = package_of(fixture_path(relative))
    op = model.edgetpu_ops()[0]
    for exe in (package.parameter_caching, package.execution_only):
        rng = np.random.default_rng(7)
        tensors = {model.tensors[i].name: model.tensors[i] for i in op.inputs}
        inputs = [
            rng.integers(
                0,
                256,
                tensors[layer.name].nbytes if layer.name in tensors else layer.size_bytes,
                dtype=np.uint8,
            )
            for layer in exe.input_layers
        ]
        out_total = sum(h.size for h in exe.dma_hints if h.kind == "descriptor" and h.buffer_type == "output")
        transport = RecordingTransport(SimulatedAccelerator(outputs=bytes(out_total)))
        execute(transport, exe, inputs)
        messages = _bulk_messages(transport.calls)
        # independent reference: walk the hints and cut the expected bytes ourselves
        expected = []
        for hint in exe.dma_hints:
            if hint.kind == "instruction":
                expected.append((0, bytes(exe.instruction_bitstreams[hint.chunk_index].data)))
            elif hint.kind == "descriptor" and hint.buffer_type == "input":
                idx = [layer.name for layer in exe.input_layers].index(hint.layer_name)
                data = inputs[idx].tobytes() + bytes(hint.offset + hint.size)
                expected.append((1, data[hint.offset : hint.offset + hint.size]))
            elif hint.kind == "descriptor" and hint.buffer_type == "parameter":
                expected.append((2, bytes(exe.parameters[hint.offset : hint.offset + hint.size])))
        assert [t for t, _ in messages] == [t for t, _ in expected]
        assert all(a == b for (_, a), (_, b) in zip(messages, expected, strict=True))
        reads = [c for c in transport.calls if c.kind == "bulk_read" and c.endpoint == 0x81]
        assert all(c.length == r.BULK_IN_CHUNK for c in reads)  # 32 KiB pieces, never one large read
        statuses = [c for c in transport.calls if c.kind == "bulk_read" and c.endpoint == 0x82]
        assert len(statuses) == sum(h.kind == "interrupt" for h in exe.dma_hints) == 1
        assert transport.calls[-1].endpoint == 0x82  # the status packet ends the executable


def test_split_inputs_padding_and_interleaved_instructions(fixture_path) -> None:
    _, deeplab = package_of(fixture_path("deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite"))
    steps = schedule(deeplab.execution_only, input_sizes=[513 * 513 * 3])
    kinds = [
        (s.source, s.layer_index if s.source == "instructions" else s.offset)
        for s in steps
        if s.action == "write"
    ]
    assert kinds == [("instructions", 0), ("input", 0), ("input", 386288), ("instructions", 1)]
    pieces = [s for s in steps if s.source == "input"]
    assert pieces[0].offset + pieces[0].size > pieces[1].offset  # overlapping pieces
    assert [p.padded for p in pieces] == [0, 5]
    _, posenet = package_of(
        fixture_path("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite")
    )
    pieces = [s for s in schedule(posenet.execution_only, input_sizes=[481 * 641 * 3]) if s.source == "input"]
    assert [(p.offset, p.size, p.padded) for p in pieces] == [(0, 488448, 0), (451904, 473064, 5)]


def test_ssd_segment1_maps_each_hint_to_its_own_layer(fixture_path) -> None:
    _, seg1 = package_of(
        fixture_path("ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite")
    )
    exe = seg1.execution_only
    inputs = [np.full(layer.size_bytes, i + 1, np.uint8) for i, layer in enumerate(exe.input_layers)]
    transport = RecordingTransport(SimulatedAccelerator(outputs=bytes(7672 + 176368)))
    execute(transport, exe, inputs)
    sent = [(t, p) for t, p in _bulk_messages(transport.calls) if t == 1]
    assert len(sent) == 3
    sizes = sorted(len(p) for _, p in sent)
    assert sizes == [25600, 128000, 207936]
    for _, payload in sent:  # every piece is a whole layer, never a cut of the first input
        layer = next(i for i, lay in enumerate(exe.input_layers) if lay.size_bytes == len(payload))
        assert set(payload) == {layer + 1}


@pytest.mark.parametrize("chunks", [[1000, 70000, 5], [32768], [300000], [4096, 131072]])
def test_outputs_reassembled_from_odd_usb_chunks(fixture_path, chunks) -> None:
    _, posenet = package_of(
        fixture_path("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite")
    )
    exe = posenet.execution_only
    rng = np.random.default_rng(3)
    truth = [rng.integers(0, 256, layer.size_bytes, dtype=np.uint8) for layer in exe.output_layers]
    stream = b"".join(t.tobytes() for t in truth)  # hint order == layer order for PoseNet
    transport = RecordingTransport(SimulatedAccelerator(outputs=stream + bytes(1000), chunk_sizes=chunks))
    raw = execute(transport, exe, [np.zeros(481 * 641 * 3, np.uint8)])
    for got, want, layer in zip(raw, truth, exe.output_layers, strict=True):
        assert got == want.tobytes()
        np.testing.assert_array_equal(relayout_output(got, layer), relayout_output(want, layer))
