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
from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

from ._scripted_ssd import SEG0, SEG1, scripted_ssd

IMAGE_W, IMAGE_H = 640, 480


@pytest.fixture()
def scenario(fixture_path):
    ssd = scripted_ssd(fixture_path)
    config = PipelineConfig(model=ssd.models, backend="edgetpu", device=ssd.device, labels=ssd.labels,
                            score_threshold=0.3)
    pipeline = PerceptionPipeline.from_config(config)
    try:
        yield pipeline, ssd.sim, ssd, ssd.anchors, fixture_path
    finally:
        pipeline.close()
        ssd.device.close()


def test_two_segments_decode_to_anchor_boxes_in_image_pixels(scenario) -> None:
    pipeline, sim, ssd, (first, _twin, far), fixture_path = scenario
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
        np.testing.assert_allclose(det.box, ssd.expected_box(anchor, IMAGE_W, IMAGE_H), atol=1e-4 * IMAGE_W)
    assert set(result.timings) >= {"preprocess", "inference", "postprocess", "total"}

    # A threshold change applies from the next frame on.
    pipeline.set_options(score_threshold=0.9)
    assert [d.class_id for d in pipeline.process(rgb).detections] == [17]


def test_segments_without_an_accelerator_say_why(fixture_path, monkeypatch) -> None:
    from libredgetpu_ros.backends import edgetpu as edgetpu_backend
    from libredgetpu_ros.cli.main import main
    from libredgetpu_ros.errors import ConfigError, DeviceError, DeviceNotFoundError

    from libredgetpu_ros import backends

    segments = [fixture_path(SEG0), fixture_path(SEG1)]
    with pytest.raises(ConfigError, match="no CPU twin; the cpu backend cannot run them"):
        PerceptionPipeline.from_config(PipelineConfig(model=segments, backend="cpu"))
    monkeypatch.setattr(edgetpu_backend, "edgetpu_available", lambda: False)
    with pytest.raises(DeviceNotFoundError, match="have no CPU twin and no Edge TPU attached"):
        PerceptionPipeline.from_config(PipelineConfig(model=segments, backend="auto"))
    # listed but failing to open: auto's one resolution (backends.choose) says so, no fall back to a CPU
    # that cannot run the segments
    monkeypatch.setattr(edgetpu_backend, "edgetpu_available", lambda: True)

    def unplugged(*args, **kwargs):
        raise DeviceError("USB transfer failed: unplugged")

    monkeypatch.setattr(backends, "_open_edgetpu", unplugged)
    with pytest.raises(DeviceNotFoundError, match="no CPU twin and the Edge TPU failed to open: USB"):
        PerceptionPipeline.from_config(PipelineConfig(model=segments, backend="auto"))
    monkeypatch.setattr(edgetpu_backend, "edgetpu_available", lambda: False)
    image = str(fixture_path("images/cat.bmp"))
    joined = ",".join(str(p) for p in segments)
    assert main(["infer", "--model", joined, "--image", image, "--backend", "cpu"]) == 2
    assert main(["infer", "--model", joined, "--image", image]) == 3
