"""SSD decoder vs LiteRT's TFLite_Detection_PostProcess on the CPU head model, random raw inputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.errors import InputError, ModelFormatError
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.postprocess.ssd import SsdDecoder, decode_boxes, nms_single_class, postprocess

HEAD = "ssd/ssd_mobilenet_v1_coco_quant_postprocess_head_layers.tflite"
SEGMENT_1 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite"
DRAWS = 50
BOX_TOL = 1e-4


def _draw(rng, details):
    """Raw predictor maps: box codes anywhere in 0..255, class logits mostly low with a few hot cells,
    so every draw yields detections, overlaps for NMS and score ties."""
    feed = {}
    for d in details:
        shape = tuple(d["shape"])
        if "ClassPredictor" in d["name"]:
            raw = rng.integers(0, 160, size=shape, dtype=np.uint8)
            hot = rng.random(shape) < rng.uniform(0.0005, 0.004)
            raw[hot] = rng.integers(190, 256, size=int(hot.sum()), dtype=np.uint8)
        else:
            raw = rng.integers(0, 256, size=shape, dtype=np.uint8)
        feed[d["name"]] = raw
    return feed


@pytest.fixture(scope="module")
def head(fixture_path):
    path = fixture_path(HEAD)
    interpreter = Interpreter(str(path))
    interpreter.allocate_tensors()
    return SsdDecoder.from_model(load_model(path), labels=fixture_path("labels/coco_labels.txt")), interpreter


def test_options_and_anchors_from_model(head):
    decoder, _ = head
    o = decoder.options
    assert (o.max_detections, o.num_classes, o.use_regular_nms) == (20, 90, False)
    assert (o.y_scale, o.x_scale, o.h_scale, o.w_scale) == (10.0, 10.0, 5.0, 5.0)
    assert decoder.num_anchors == 1917 and len(decoder.input_names) == 12


def test_matches_litert_on_random_raw_inputs(head):
    decoder, interpreter = head
    details = interpreter.get_input_details()
    outputs = interpreter.get_output_details()
    total = 0
    for seed in range(DRAWS):
        feed = _draw(np.random.default_rng(seed), details)
        for d in details:
            interpreter.set_tensor(d["index"], feed[d["name"]])
        interpreter.invoke()
        boxes, classes, scores, count = (interpreter.get_tensor(d["index"]) for d in outputs)
        n = int(count[0])
        raw = decoder.decode_raw(feed)
        assert raw.count == n, seed
        np.testing.assert_array_equal(raw.classes[:n], classes[0, :n], err_msg=f"seed {seed}")
        np.testing.assert_allclose(raw.scores[:n], scores[0, :n], atol=1e-6, err_msg=f"seed {seed}")
        np.testing.assert_allclose(raw.boxes[:n], boxes[0, :n], atol=BOX_TOL, err_msg=f"seed {seed}")
        total += n
    assert total > DRAWS * 5  # the draws really exercise detection and NMS


def test_general_path_equals_fast_path(head):
    """The fused per-row lookup path and the op-by-op path give identical outputs."""
    decoder, interpreter = head
    feed = _draw(np.random.default_rng(123), interpreter.get_input_details())
    fast = decoder.decode_raw(feed)
    encodings, class_scores = decoder._op_inputs(feed)
    boxes = decode_boxes(encodings, decoder.anchors, decoder.options)
    slow = postprocess(boxes, class_scores, decoder.options)
    assert fast.count == slow.count
    np.testing.assert_array_equal(fast.classes, slow.classes)
    np.testing.assert_array_equal(fast.boxes, slow.boxes)


def test_detections_use_coco_labels_with_gaps(head):
    decoder, interpreter = head
    feed = _draw(np.random.default_rng(7), interpreter.get_input_details())
    detections = decoder.decode(feed)
    raw = decoder.decode_raw(feed)
    assert len(detections) == raw.count > 0
    for det, box in zip(detections, raw.boxes, strict=False):
        assert det.box == pytest.approx((box[1], box[0], box[3], box[2]))
        assert det.label == decoder.labels.get(det.class_id, f"class {det.class_id}")
    assert decoder.labels[0] == "person" and 11 not in decoder.labels and decoder.labels[12] == "stop sign"


def test_regular_nms_sorted_and_bounded(head):
    decoder, interpreter = head
    feed = _draw(np.random.default_rng(9), interpreter.get_input_details())
    encodings, class_scores = decoder._op_inputs(feed)
    options = dataclasses.replace(decoder.options, use_regular_nms=True)
    regular = postprocess(decode_boxes(encodings, decoder.anchors, options), class_scores, options)
    assert 0 < regular.count <= options.max_detections
    assert (np.diff(regular.scores[:regular.count]) <= 0).all()
    assert (regular.scores[:regular.count] >= options.nms_score_threshold).all()


def test_segment_1_builds_from_edgetpu_model(fixture_path):
    model = load_model(fixture_path(SEGMENT_1))
    decoder = SsdDecoder.from_model(model)
    edgetpu = next(op for op in model.operators if op.opcode_name == "edgetpu-custom-op")
    assert set(decoder.input_names) == {model.tensors[i].name for i in edgetpu.outputs}
    for spec in decoder.specs:
        assert spec.shape[1] == decoder.num_anchors == 1917
    assert decoder.options.nms_score_threshold == pytest.approx(1e-8)


def test_bad_input(head, fixture_path):
    decoder, interpreter = head
    feed = _draw(np.random.default_rng(1), interpreter.get_input_details())
    del feed[decoder.input_names[3]]
    with pytest.raises(InputError, match="lack tensor"):
        decoder.decode(feed)
    with pytest.raises(ModelFormatError, match="TFLite_Detection_PostProcess"):
        SsdDecoder.from_model(load_model(fixture_path("classify/mobilenet_v1_0.25_128_quant.tflite")))


def _greedy_nms_scalar(boxes, scores, max_out, score_threshold, iou_threshold):
    """The op's NonMaxSuppressionSingleClassHelper loop, box by box in float32 (the reference)."""
    f = np.float32
    above = [i for i in range(len(scores)) if scores[i] >= f(score_threshold)]
    order = sorted(above, key=lambda i: -scores[i])  # stable, like the op's sort
    active = [True] * len(order)
    selected = []
    for a, i in enumerate(order):
        if len(selected) >= max_out:
            break
        if not active[a]:
            continue
        selected.append(i)
        for b in range(a + 1, len(order)):
            if not active[b]:
                continue
            bi, bj = boxes[i], boxes[order[b]]
            area_i = (bi[2] - bi[0]) * (bi[3] - bi[1])
            area_j = (bj[2] - bj[0]) * (bj[3] - bj[1])
            if area_i <= 0 or area_j <= 0:
                continue
            inter = (max(min(bi[2], bj[2]) - max(bi[0], bj[0]), f(0))
                     * max(min(bi[3], bj[3]) - max(bi[1], bj[1]), f(0)))
            if inter / (area_i + area_j - inter) > f(iou_threshold):
                active[b] = False
    return selected


@pytest.mark.parametrize("seed", range(6))
def test_chunked_nms_equals_scalar_greedy(seed):
    """Clusters of near-duplicate boxes (long suppression chains, many chunks before max_out is reached),
    empty boxes and score ties."""
    rng = np.random.default_rng(seed)
    centres = rng.random((12, 2)).astype(np.float32)
    n = 700
    c = centres[rng.integers(0, len(centres), n)] + rng.normal(0, 0.02, (n, 2)).astype(np.float32)
    size = rng.uniform(0.05, 0.3, (n, 2)).astype(np.float32)
    boxes = np.concatenate([c - size / 2, c + size / 2], axis=1).astype(np.float32)
    flat = rng.random(n) < 0.05
    boxes[flat, 2] = boxes[flat, 0]  # zero height: IoU 0 with everything
    scores = np.round(rng.random(n), 2).astype(np.float32)  # ties
    for max_out, iou in ((20, 0.6), (100, 0.3), (5, 0.9)):
        ours = nms_single_class(boxes, scores, max_out, 0.1, iou)
        assert ours.tolist() == _greedy_nms_scalar(boxes, scores, max_out, 0.1, iou), (max_out, iou)
