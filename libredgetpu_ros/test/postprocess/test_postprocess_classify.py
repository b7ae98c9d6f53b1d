"""Classifier top-k vs LiteRT's own output on the fixture images; label files in both formats."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.errors import InputError, ModelFormatError
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.postprocess.classify import Classifier
from libredgetpu_ros.postprocess.labels import parse_labels, read_labels

MODELS = ["classify/mobilenet_v1_0.25_128_quant", "classify/mobilenet_v2_1.0_224_quant"]
IMAGES = ["images/cat.bmp", "images/grace_hopper.bmp", "images/test_couple.jpg"]
LABELS = ["labels/imagenet_labels.txt", "labels/imagenet_labels_edgetpu_repo.txt"]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("labels", LABELS)
def test_top1_matches_litert(name, labels, fixture_path):
    cpu = fixture_path(name + ".tflite")
    interpreter = Interpreter(str(cpu))
    interpreter.allocate_tensors()
    out = interpreter.get_output_details()[0]
    size = tuple(int(v) for v in interpreter.get_input_details()[0]["shape"][1:3])
    label_map = read_labels(fixture_path(labels))
    for compiled in (cpu, fixture_path(name + "_edgetpu.tflite")):
        classifier = Classifier.from_model(load_model(compiled), labels=label_map)
        assert classifier.input_names == [out["name"]]
        for image in IMAGES:
            rgb = cv2.cvtColor(cv2.imread(str(fixture_path(image))), cv2.COLOR_BGR2RGB)
            resized = cv2.resize(rgb, size[::-1])
            interpreter.set_tensor(interpreter.get_input_details()[0]["index"], resized[None])
            interpreter.invoke()
            raw = interpreter.get_tensor(out["index"])
            scale, zero = out["quantization"]
            top = classifier.top_k({out["name"]: raw}, k=3)
            expected = int(np.argmax(raw[0]))
            assert top[0].class_id == expected
            assert top[0].score == pytest.approx((int(raw[0, expected]) - zero) * scale, rel=1e-6)
            assert top[0].label == label_map[expected]
            assert [t.score for t in top] == sorted((t.score for t in top), reverse=True)
    if "v2" in name:  # a known answer: Grace Hopper wears a military uniform (id 653 incl. background)
        assert label_map[653].startswith("military uniform")


def test_threshold_and_bad_input(fixture_path):
    classifier = Classifier.from_model(load_model(fixture_path(MODELS[0] + ".tflite")))
    name = classifier.input_names[0]
    raw = np.zeros((1, classifier.num_classes), np.uint8)
    raw[0, 5] = 200
    top = classifier.top_k({name: raw}, k=3, threshold=0.1)
    assert [(c.class_id, c.label) for c in top] == [(5, "class 5")]
    with pytest.raises(InputError, match="lack tensor"):
        classifier.top_k({"other": raw})
    with pytest.raises(InputError, match="shape"):
        classifier.top_k({name: raw[:, :10]})
    with pytest.raises(ModelFormatError, match="class-score tensor"):
        Classifier.from_model(load_model(fixture_path("posenet/posenet_mobilenet_v1_075_481_641_quant.tflite")))


def test_label_formats(fixture_path, tmp_path):
    plain = read_labels(fixture_path("labels/imagenet_labels.txt"))
    prefixed = read_labels(fixture_path("labels/imagenet_labels_edgetpu_repo.txt"))
    assert plain == prefixed and len(plain) == 1001 and plain[0] == "background"
    coco = read_labels(fixture_path("labels/coco_labels.txt"))
    assert coco[0] == "person" and 11 not in coco and coco[89] == "toothbrush" and len(coco) < 90
    assert parse_labels("0:cat\n2: dog\n") == {0: "cat", 2: "dog"}
    assert parse_labels("cat\n\ndog\n") == {0: "cat", 2: "dog"}
    with pytest.raises(InputError, match="twice"):
        parse_labels("0 a\n0 b\n")
    with pytest.raises(InputError, match="no labels"):
        parse_labels("\n\n")
    with pytest.raises(InputError, match="does not exist"):
        read_labels(tmp_path / "missing.txt")
    # Issue 30: a FIFO (the perception node's configure blocked on it), a 5,000-digit id (int() refused it:
    # ValueError), a repeated line of 100,000 characters (echoed whole).
    import os

    os.mkfifo(tmp_path / "fifo.txt")
    with pytest.raises(InputError, match="is a FIFO, not a regular file"):
        read_labels(tmp_path / "fifo.txt")
    assert parse_labels("1" * 5000 + " a\n2 b\n")[1] == "2 b"  # not an id: a plain file
    with pytest.raises(InputError, match="twice") as info:
        parse_labels("0 " + "x" * 100_000 + "\n0 y\n")
    assert len(str(info.value)) < 400
