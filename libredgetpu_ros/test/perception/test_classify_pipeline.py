"""Classifiers end to end on the CPU backend: top-1 equals LiteRT running the full uncompiled model."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.perception.images import load_image
from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig


@pytest.mark.parametrize("name", ["mobilenet_v1_0.25_128_quant", "mobilenet_v2_1.0_224_quant"])
@pytest.mark.parametrize("image", ["cat.bmp", "grace_hopper.bmp"])
def test_top1_equals_litert_full_model(fixture_path, name, image):
    cfg = PipelineConfig(model=fixture_path(f"classify/{name}_edgetpu.tflite"), backend="cpu",
                         labels=fixture_path("labels/imagenet_labels.txt"), top_k=3)
    rgb = load_image(fixture_path(f"images/{image}"))
    with PerceptionPipeline.from_config(cfg) as pipeline:
        assert pipeline.task == "classify"
        result = pipeline.process(rgb)
        w, h = pipeline.input_size
        resized = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)  # the documented pre-processing
    full = Interpreter(model_path=str(fixture_path(f"classify/{name}.tflite")))
    full.allocate_tensors()
    full.set_tensor(full.get_input_details()[0]["index"], resized[None])
    full.invoke()
    out = full.get_output_details()[0]
    scale, zero = out["quantization"]
    probs = (full.get_tensor(out["index"])[0].astype(np.float32) - zero) * scale
    assert len(result.classes) == 3
    assert result.classes[0].class_id == int(np.argmax(probs))
    assert result.classes[0].score == pytest.approx(float(probs.max()), abs=1e-6)
    assert result.classes[0].label == pipeline.labels[result.classes[0].class_id]


def test_top_k_sets_the_class_count_even_with_max_results(fixture_path):
    """The node always passes max_results (its default 10, for poses/detections); a classifier must still
    report top_k classes (it reported max_results before), also after a runtime change."""
    cfg = PipelineConfig(model=fixture_path("classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"),
                         backend="cpu", score_threshold=0.0, max_results=10, top_k=3)
    rgb = load_image(fixture_path("images/cat.bmp"))
    with PerceptionPipeline.from_config(cfg) as pipeline:
        assert len(pipeline.process(rgb).classes) == 3
        pipeline.set_options(score_threshold=0.0, max_results=10, top_k=7)
        assert len(pipeline.process(rgb).classes) == 7


def test_missing_model_file_says_what_to_do(tmp_path):
    """A missing file named like a catalogue model's gets that model's fetch command; any other missing file
    gets where the catalogue is listed (nothing is downloaded)."""
    from libredgetpu_ros.errors import InputError
    from libredgetpu_ros.models.catalogue import CATALOGUE

    entry = next(e for e in CATALOGUE.values() if e.edgetpu is not None)
    with pytest.raises(InputError, match=f"it is catalogue model {entry.name}: run `libredgetpu-ros models "
                                         f"fetch {entry.name}`"):
        PipelineConfig(model=str(tmp_path / entry.edgetpu.name)).model_paths()
    with pytest.raises(InputError, match=r"a catalogue name .*models list"):
        PipelineConfig(model=str(tmp_path / "mine_edgetpu.tflite")).model_paths()
    assert not list(tmp_path.iterdir())
