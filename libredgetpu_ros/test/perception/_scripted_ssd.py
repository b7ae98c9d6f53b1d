"""The two-segment SSD on a scripted accelerator: the real driver over the recording transport double, with
a scripted device behind it (never presented as a device). Shared by the in-process pipeline test and the
cross-process node test (``test/ros/_scripted_ssd_node.py``).

The accelerator's answer for segment 1 is crafted in its own tiled output layout: known class scores on a few
anchors and zero box encodings, so each expected detection is its anchor's box, worked out here from the
model's anchor tensor, then scaled to the original image.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from libredgetpu_ros.edgetpu.device import EdgeTpuDevice
from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator
from libredgetpu_ros.edgetpu.transport import RecordingTransport
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.formats.layout import tile_output

SEG0 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_0_of_2_edgetpu.tflite"
SEG1 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite"
LABELS = "labels/coco_labels.txt"
# (anchor role, score column = class id + 1, uint8 score; scale 1/256)
FIRST_CLASS, FIRST_SCORE = 17, 250  # "dog"
TWIN_SCORE = 240  # same object, lower score: suppressed by NMS
FAR_CLASS, FAR_SCORE = 0, 128  # "person"


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


class ScriptedAccelerator(SimulatedAccelerator):
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


@dataclass
class ScriptedSsd:
    device: Any  # an open EdgeTpuDevice on the scripted accelerator (close it)
    sim: ScriptedAccelerator
    corners: np.ndarray  # (N, 4) anchor corners, normalised [ymin, xmin, ymax, xmax]
    anchors: tuple[int, int, int]  # (first, twin, far)
    models: list[Path]
    labels: Path

    def expected_box(self, anchor: int, width: int, height: int) -> tuple[float, float, float, float]:
        """(xmin, ymin, xmax, ymax) in pixels of a ``width`` x ``height`` image."""
        ymin, xmin, ymax, xmax = self.corners[anchor]
        return (xmin * width, ymin * height, xmax * width, ymax * height)


def scripted_ssd(fixture_path: Callable[[str], Path]) -> ScriptedSsd:
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
    scores[0, first, FIRST_CLASS + 1] = FIRST_SCORE  # column 0 is the background
    scores[0, twin, FIRST_CLASS + 1] = TWIN_SCORE
    scores[0, far, FAR_CLASS + 1] = FAR_SCORE
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
    sim = ScriptedAccelerator({seg0_in: bytes(sum(layer.size_bytes for layer in seg0_exe.output_layers)),
                               seg1_first_in: seg1_bytes})
    device = EdgeTpuDevice.open(transport_factory=lambda: RecordingTransport(
        sim, bus_path="scripted-ssd", keep_payloads=False))
    return ScriptedSsd(device, sim, corners, (first, twin, far), [fixture_path(SEG0), fixture_path(SEG1)],
                       fixture_path(LABELS))
