"""DeepLab end to end on the CPU backend against LiteRT running the full uncompiled model (its own ArgMax)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.perception.images import load_image
from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

MODEL = "deeplab/deeplabv3_mnv2_pascal_quant"


@pytest.fixture(scope="module")
def pipeline(fixture_path):
    cfg = PipelineConfig(model=fixture_path(f"{MODEL}_edgetpu.tflite"), backend="cpu",
                         labels=fixture_path("labels/pascal_voc_segmentation_labels.txt"))
    with PerceptionPipeline.from_config(cfg) as p:
        yield p


@pytest.mark.parametrize("image", ["grace_hopper.bmp", "cat.bmp", "test_couple.jpg"])
def test_mask_agrees_with_litert_argmax(pipeline, fixture_path, image):
    rgb = load_image(fixture_path(f"images/{image}"))
    result = pipeline.process(rgb)
    assert result.task == "segment"
    assert result.mask.shape == rgb.shape[:2] and result.mask.dtype == np.uint8

    full = Interpreter(model_path=str(fixture_path(f"{MODEL}.tflite")))
    full.allocate_tensors()
    # The documented choice: INTER_AREA when shrinking both sides, INTER_LINEAR otherwise.
    shrink = rgb.shape[1] >= pipeline.input_size[0] and rgb.shape[0] >= pipeline.input_size[1]
    flag = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    resized = cv2.resize(rgb, pipeline.input_size, interpolation=flag)
    full.set_tensor(full.get_input_details()[0]["index"], resized[None])
    full.invoke()
    reference = full.get_tensor(full.get_output_details()[0]["index"])[0].astype(np.uint8)
    reference = cv2.resize(reference, (rgb.shape[1], rgb.shape[0]), interpolation=cv2.INTER_NEAREST_EXACT)
    assert (result.mask == reference).mean() >= 0.995
    histogram = result.mask_histogram(pipeline.labels)
    assert sum(histogram.values()) == rgb.shape[0] * rgb.shape[1]
