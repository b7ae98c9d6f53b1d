"""SSD detection end to end on the Edge TPU path: two compiled segments on one accelerator -> SSD head.

No accelerator is attached here, so the device is the real driver over the recording transport double with a
scripted accelerator behind it (never presented as a device). The accelerator's answer for segment 1 is
crafted in its own tiled output layout: known class scores on a few anchors and zero box encodings, so each
expected detection is its anchor's box, worked out in this file from the model's anchor tensor, then scaled to
the original image. That checks the whole chain the CPU backend cannot run (no CPU twin of the two-segment
SSD exists): segment chaining by tensor name, output relayout, the CPU tail (DEQUANTIZE + box decoding + NMS),
labels with COCO's gaps, threshold changes and image-pixel coordinates.
"""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.edgetpu.device import EdgeTpuDevice
from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator
from libredgetpu_ros.edgetpu.transport import RecordingTransport
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.formats.layout import tile_output
from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

SEG0 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_0_of_2_edgetpu.tflite"
SEG1 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite"
IMAGE_W, IMAGE_H = 640, 480


def _anchor_corners(model) -> np.ndarray:
    """(N, 4) [ymin, xmin, ymax, xmax] of the anchors, from the constant (yc, xc, h, w) tensor itself."""
    (op,) = [o for o in model.operators if o.opcode_name == "TFLite_Detection_PostProcess"]
    tensor = model.tensors[op.inputs[2]]
    raw = model.buffer_data(tensor).astype(np.float64)
    q = tensor.quantization
    anchors = (raw - float(q.zero_point[0])) * float(q.scale[0]) if q is not None and q.scale.size else raw
    yc, xc, h, w = anchors.T
    return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=1)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


def _pick_anchors(corners: np.ndarray) -> tuple[int, int, int]:
    """Two well-separated anchors inside the image, and a third overlapping the first (IoU > 0.6)."""
    inside = np.flatnonzero((corners[:, :2] > 0.1).all(axis=1) & (corners[:, 2:] < 0.9).all(axis=1))
    first = int(inside[len(inside) // 3])
    twin = next(int(i) for i in inside if i != first and _iou(corners[first], corners[i]) > 0.6)
    far = next(int(i) for i in inside[::-1] if _iou(corners[first], corners[i]) == 0.0)
    return first, twin, far


class _Accelerator(SimulatedAccelerator):
    """Answers each segment's run with its own output bytes: zeros for segment 0, the crafted ones for 1.

    A run is recognised by its first input message (USB header, tag 1) and its length; its outputs are queued
    only then, so a read the driver rounds up to 32 KiB returns short at the end of a run, as a device does.
    """

    def __init__(self, runs: dict[int, bytes]) -> None:
        super().__init__()
        self.runs = runs
        self.frames_started = 0

    def __call__(self, call):
        header = call.kind == "bulk_write" and call.length == 8 and call.data is not None
        if header and call.data[4] == 1:
            length = int.from_bytes(call.data[:4], "little")
            if length in self.runs:
                assert not self.output, "the previous run's outputs were not all read"
                self.queue_output(self.runs[length])
                self.frames_started += length == min(self.runs)
        return super().__call__(call)


def _first_input_size(exe) -> int:
    hint = next(h for h in exe.dma_hints if h.kind == "descriptor" and h.buffer_type == "input")
    return hint.size


@pytest.fixture()
def scenario(fixture_path):
    seg0, seg1 = load_model(fixture_path(SEG0)), load_model(fixture_path(SEG1))
    corners = _anchor_corners(seg1)
    first, twin, far = _pick_anchors(corners)
    exe = seg1.darwinn(seg1.edgetpu_ops()[0]).execution_only
    by_name = {layer.name: layer for layer in exe.output_layers}
    boxes_layer, scores_layer = by_name["Squeeze1"], by_name["convert_scores"]
    n = corners.shape[0]
    # Box encodings at the zero point decode to the anchor itself; scores are uint8 with scale 1/256.
    encodings = np.full((1, n, 4), boxes_layer.zero_point, np.uint8)
    scores = np.zeros((1, n, 91), np.uint8)
    scores[0, first, 18] = 250  # column 18 = class id 17 (column 0 is the background)
    scores[0, twin, 18] = 240   # same object, lower score: suppressed by NMS
    scores[0, far, 1] = 128     # class id 0
    device_bytes = {"Squeeze1": tile_output(encodings.reshape(1, n, 4), boxes_layer, boxes_layer.size_bytes),
                    "convert_scores": tile_output(scores.reshape(1, n, 91), scores_layer,
                                                  scores_layer.size_bytes)}
    # The device sends outputs in DMA-hint order, which need not be the graph's output order.
    order = [h.layer_name for h in exe.dma_hints if h.kind == "descriptor" and h.buffer_type == "output"]
    assert sorted(order) == sorted(device_bytes)
    seg1_bytes = b"".join(device_bytes[name].tobytes() for name in order)
    seg0_exe = seg0.darwinn(seg0.edgetpu_ops()[0]).execution_only
    seg0_in, seg1_first_in = seg0_exe.input_layers[0].size_bytes, _first_input_size(exe)
    assert seg0_in != seg1_first_in
    sim = _Accelerator({seg0_in: bytes(sum(layer.size_bytes for layer in seg0_exe.output_layers)),
                        seg1_first_in: seg1_bytes})
    device = EdgeTpuDevice.open(transport_factory=lambda: RecordingTransport(
        sim, bus_path="scripted-ssd", keep_payloads=False))
    config = PipelineConfig(model=[fixture_path(SEG0), fixture_path(SEG1)], backend="edgetpu", device=device,
                            labels=fixture_path("labels/coco_labels.txt"), score_threshold=0.3)
    pipeline = PerceptionPipeline.from_config(config)
    try:
        yield pipeline, sim, corners, (first, twin, far), fixture_path
    finally:
        pipeline.close()
        device.close()


def _expected_box(corner: np.ndarray) -> tuple[float, float, float, float]:
    ymin, xmin, ymax, xmax = corner
    return (xmin * IMAGE_W, ymin * IMAGE_H, xmax * IMAGE_W, ymax * IMAGE_H)


def test_two_segments_decode_to_anchor_boxes_in_image_pixels(scenario) -> None:
    pipeline, sim, corners, (first, _twin, far), fixture_path = scenario
    labels = fixture_path("labels/coco_labels.txt").read_text().splitlines()
    assert pipeline.task == "detect" and pipeline.backend_name == "edgetpu"
    rgb = np.random.default_rng(3).integers(0, 256, (IMAGE_H, IMAGE_W, 3), dtype=np.uint8)

    result = pipeline.process(rgb)
    assert sim.frames_started == 1 and not sim.output  # every byte the device sent was read
    assert [(d.class_id, d.label) for d in result.detections] == [(17, labels[17]), (0, labels[0])]
    assert labels[17] == "dog" and labels[0] == "person"
    np.testing.assert_allclose([d.score for d in result.detections], [250 / 256, 128 / 256], atol=1e-6)
    # Anchor boxes in original image pixels; box decoding runs in float32 (1e-4 of the image size).
    for det, anchor in zip(result.detections, (first, far), strict=True):
        np.testing.assert_allclose(det.box, _expected_box(corners[anchor]), atol=1e-4 * IMAGE_W)
    assert set(result.timings) >= {"preprocess", "inference", "postprocess", "total"}

    # A threshold change applies from the next frame on.
    pipeline.set_options(score_threshold=0.9)
    assert [d.class_id for d in pipeline.process(rgb).detections] == [17]


def test_segments_without_an_accelerator_say_why(fixture_path, monkeypatch) -> None:
    from libredgetpu_ros.backends import edgetpu as edgetpu_backend
    from libredgetpu_ros.cli.main import main
    from libredgetpu_ros.errors import ConfigError, DeviceNotFoundError

    segments = [fixture_path(SEG0), fixture_path(SEG1)]
    with pytest.raises(ConfigError, match="no CPU twin; the cpu backend cannot run them"):
        PerceptionPipeline.from_config(PipelineConfig(model=segments, backend="cpu"))
    monkeypatch.setattr(edgetpu_backend, "edgetpu_available", lambda: False)
    with pytest.raises(DeviceNotFoundError, match="no Edge TPU accelerator is attached"):
        PerceptionPipeline.from_config(PipelineConfig(model=segments, backend="auto"))
    image = str(fixture_path("images/cat.bmp"))
    joined = ",".join(str(p) for p in segments)
    assert main(["infer", "--model", joined, "--image", image, "--backend", "cpu"]) == 2
    assert main(["infer", "--model", joined, "--image", image]) == 3
