"""TFLite reader against the real fixture models and LiteRT's own view of them."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.formats import Quantization, load_model

POSENET_TPU = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"
POSENET_DECODER = "posenet/posenet_mobilenet_v1_075_481_641_decoder.tflite"
DEEPLAB_TPU = "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite"
SSD_HEAD = "ssd/ssd_mobilenet_v1_coco_quant_postprocess_head_layers.tflite"
SSD_SEG1 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite"

# Every model fixture; CPU ones (no custom Edge TPU / PoseNet op) are also checked against LiteRT.
ALL_MODELS = [
    "classify/mobilenet_v1_0.25_128_quant.tflite",
    "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite",
    "classify/mobilenet_v2_1.0_224_quant.tflite",
    "classify/mobilenet_v2_1.0_224_quant_edgetpu.tflite",
    "deeplab/deeplabv3_mnv2_pascal_quant.tflite",
    DEEPLAB_TPU,
    "matmul/dense_256.tflite",
    "matmul/dense_256_edgetpu.tflite",
    "matmul/dense_512.tflite",
    "matmul/dense_512_edgetpu.tflite",
    "matmul/dense_1024.tflite",
    "matmul/dense_1024_edgetpu.tflite",
    POSENET_DECODER,
    "posenet/posenet_mobilenet_v1_075_481_641_quant.tflite",
    "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder.tflite",
    POSENET_TPU,
    SSD_HEAD,
    "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_0_of_2_edgetpu.tflite",
    SSD_SEG1,
    # The single-file detector pair (catalogue entry ssd_mobilenet_v2_coco)
    "ssd/mobilenet_ssd_v2_coco_quant_postprocess.tflite",
    "ssd/mobilenet_ssd_v2_coco_quant_postprocess_edgetpu.tflite",
    # LibrEdgeTPU's robotics templates (compiled, their uncompiled twins; docs/robotics.md)
    "robotics/embedding/mobilenet_v1_1.0_224_quant_embedding_extractor.tflite",
    "robotics/embedding/mobilenet_v1_1.0_224_quant_embedding_extractor_edgetpu.tflite",
    "robotics/looming/looming_128x128_3x3.tflite",
    "robotics/looming/looming_128x128_3x3_edgetpu.tflite",
    "robotics/looming/looming_64x64_3x3.tflite",
    "robotics/looming/looming_64x64_3x3_edgetpu.tflite",
    "robotics/optical_flow/gabor_128x128_7k_4o_2s.tflite",
    "robotics/optical_flow/gabor_128x128_7k_4o_2s_edgetpu.tflite",
    "robotics/optical_flow/gabor_128x128_p4.tflite",
    "robotics/optical_flow/gabor_128x128_p4_edgetpu.tflite",
    "robotics/optical_flow/gabor_64x64_7k_4o_2s.tflite",
    "robotics/optical_flow/gabor_64x64_7k_4o_2s_edgetpu.tflite",
    "robotics/optical_flow/gabor_64x64_p4.tflite",
    "robotics/optical_flow/gabor_64x64_p4_edgetpu.tflite",
    "robotics/pattern/pattern_128x128_16x16_1ch.tflite",
    "robotics/pattern/pattern_128x128_16x16_3ch.tflite",
    "robotics/pattern/pattern_128x128_32x32_1ch.tflite",
    "robotics/pattern/pattern_64x64_16x16_1ch.tflite",
    "robotics/pattern/pattern_64x64_8x8_1ch.tflite",
    "robotics/pattern/pattern_64x64_8x8_3ch.tflite",
    "robotics/tracker/bright_128x128.tflite",
    "robotics/tracker/bright_128x128_edgetpu.tflite",
    "robotics/tracker/bright_16x16.tflite",
    "robotics/tracker/bright_16x16_edgetpu.tflite",
    "robotics/tracker/bright_64x64.tflite",
    "robotics/tracker/bright_64x64_edgetpu.tflite",
    "robotics/tracker/color_blue_64x64.tflite",
    "robotics/tracker/color_blue_64x64_edgetpu.tflite",
    "robotics/tracker/color_cyan_64x64.tflite",
    "robotics/tracker/color_cyan_64x64_edgetpu.tflite",
    "robotics/tracker/color_green_64x64.tflite",
    "robotics/tracker/color_green_64x64_edgetpu.tflite",
    "robotics/tracker/color_magenta_64x64.tflite",
    "robotics/tracker/color_magenta_64x64_edgetpu.tflite",
    "robotics/tracker/color_red_128x128.tflite",
    "robotics/tracker/color_red_128x128_edgetpu.tflite",
    "robotics/tracker/color_red_64x64.tflite",
    "robotics/tracker/color_red_64x64_edgetpu.tflite",
    "robotics/tracker/color_white_64x64.tflite",
    "robotics/tracker/color_white_64x64_edgetpu.tflite",
    "robotics/tracker/color_yellow_64x64.tflite",
    "robotics/tracker/color_yellow_64x64_edgetpu.tflite",
]
CPU_MODELS = [
    "classify/mobilenet_v1_0.25_128_quant.tflite",
    "classify/mobilenet_v2_1.0_224_quant.tflite",
    "deeplab/deeplabv3_mnv2_pascal_quant.tflite",
    "matmul/dense_256.tflite",
    "posenet/posenet_mobilenet_v1_075_481_641_quant.tflite",
    SSD_HEAD,
    "ssd/mobilenet_ssd_v2_coco_quant_postprocess.tflite",
]


def test_fixture_list_is_complete(fixtures_dir):
    on_disk = {str(p.relative_to(fixtures_dir)) for p in fixtures_dir.glob("**/*.tflite")}
    assert on_disk == set(ALL_MODELS)


@pytest.mark.parametrize("rel", ALL_MODELS)
def test_every_fixture_parses_completely(fixture_path, rel):
    model = load_model(fixture_path(rel))
    assert model.num_subgraphs == 1
    assert model.tensors and model.operators and model.inputs and model.outputs
    for t in model.tensors:
        data = model.buffer_data(t)
        if data is not None:
            assert data.shape == t.shape and data.dtype == t.dtype
            assert np.shares_memory(data, np.frombuffer(model.data, np.uint8))  # a view, not a copy
    for op in model.edgetpu_ops():
        package = model.darwinn(op)
        assert package.executables
        whole = np.frombuffer(model.data, np.uint8)
        for e in package.executables:
            if len(e.parameters):
                assert np.shares_memory(np.frombuffer(e.parameters, np.uint8), whole)


@pytest.mark.parametrize("rel", CPU_MODELS)
def test_tensors_match_litert(fixture_path, rel):
    from ai_edge_litert.interpreter import Interpreter

    path = fixture_path(rel)
    model = load_model(path)
    details = Interpreter(model_path=str(path)).get_tensor_details()
    assert len(details) == len(model.tensors)
    for d in details:
        t = model.tensors[d["index"]]
        assert t.name == d["name"]
        assert t.shape == tuple(d["shape"].tolist())
        assert t.dtype == np.dtype(d["dtype"])
        qp = d["quantization_parameters"]
        if t.quantization is None:
            assert qp["scales"].size == 0
        else:
            np.testing.assert_array_equal(t.quantization.scale, qp["scales"])
            np.testing.assert_array_equal(t.quantization.zero_point, qp["zero_points"])
            assert t.quantization.quantized_dimension == qp["quantized_dimension"]


def test_constant_weights_equal_litert_values(fixture_path):
    """buffer_data returns the same constants LiteRT loads (Dense(256) weights and shapes)."""
    from ai_edge_litert.interpreter import Interpreter

    path = fixture_path("matmul/dense_256.tflite")
    model = load_model(path)
    interp = Interpreter(model_path=str(path))
    interp.allocate_tensors()
    checked = 0
    for t in model.tensors:
        data = model.buffer_data(t)
        if data is not None:
            np.testing.assert_array_equal(data, interp.get_tensor(t.index))
            checked += 1
    assert checked >= 1


def test_posenet_graph(fixture_path):
    model = load_model(fixture_path(POSENET_TPU))
    assert [op.opcode_name for op in model.operators] == ["edgetpu-custom-op", "PosenetDecoderOp"]
    tpu = model.edgetpu_ops()[0]
    names = [model.tensors[i].name for i in tpu.outputs]
    assert names == ["MobilenetV1/heatmap_2/BiasAdd", "MobilenetV1/offset_2/BiasAdd", "concat"]
    shapes = [model.tensors[i].shape for i in tpu.outputs]
    assert shapes == [(1, 31, 41, 17), (1, 31, 41, 34), (1, 31, 41, 64)]
    decoder = model.cpu_ops_after(tpu)
    assert [op.opcode_name for op in decoder] == ["PosenetDecoderOp"]
    assert model.cpu_ops_before(tpu) == []
    assert model.producer(tpu.outputs[0]) is tpu
    assert model.consumers(tpu.outputs[0]) == decoder
    assert tpu.custom_options is None and tpu.custom_options_raw is not None


def test_posenet_decoder_options(fixture_path):
    op = load_model(fixture_path(POSENET_DECODER)).operators[0]
    assert op.opcode_name == "PosenetDecoderOp"
    opts = op.custom_options
    assert opts["max_detections"] == 20
    assert opts["score_threshold"] == pytest.approx(0.2)
    assert opts["stride"] == 16
    assert opts["nms_radius"] == pytest.approx(10.0)


def test_deeplab_cpu_tail(fixture_path):
    model = load_model(fixture_path(DEEPLAB_TPU))
    tpu = model.edgetpu_ops()[0]
    tail = model.cpu_ops_after(tpu)
    assert [op.opcode_name for op in tail] == ["RESIZE_BILINEAR", "QUANTIZE", "CONCATENATION", "CONV_2D",
                                               "CONV_2D", "RESIZE_BILINEAR", "RESIZE_BILINEAR", "ARG_MAX"]
    assert tail == model.cpu_ops()
    assert [model.tensors[i].shape for i in tpu.outputs] == [(1, 33, 33, 256), (1, 1, 1, 256)]
    concat = tail[2]
    assert concat.builtin_options == {"axis": 3, "fused_activation_function": "NONE"}
    conv = tail[3]
    assert conv.builtin_options["stride_w"] == 1 and conv.builtin_options["padding"] in ("SAME", "VALID")
    resize = tail[-2]
    assert set(resize.builtin_options) == {"align_corners", "half_pixel_centers"}
    argmax = tail[-1]  # its output_type option must agree with its output tensor's type
    assert argmax.builtin_options == {"output_type": model.tensors[argmax.outputs[0]].type_name}


def test_ssd_head_postprocess_options(fixture_path):
    model = load_model(fixture_path(SSD_HEAD))
    assert len(model.inputs) == 12 and len(model.outputs) == 4
    (post,) = [op for op in model.operators if op.opcode_name == "TFLite_Detection_PostProcess"]
    opts = post.custom_options
    assert opts["max_detections"] == 20
    assert opts["max_classes_per_detection"] == 1
    assert opts["detections_per_class"] == 100
    assert opts["use_regular_nms"] is False
    assert opts["nms_score_threshold"] == pytest.approx(0.3)
    assert opts["nms_iou_threshold"] == pytest.approx(0.6)
    assert opts["num_classes"] == 90
    assert (opts["y_scale"], opts["x_scale"], opts["h_scale"], opts["w_scale"]) == (10.0, 10.0, 5.0, 5.0)
    anchors = model.tensors[post.inputs[2]]
    assert model.buffer_data(anchors).shape == (1917, 4)
    reshape = model.operators[0]
    assert reshape.opcode_name == "RESHAPE"


def test_tensor_by_name_and_missing_name(fixture_path):
    model = load_model(fixture_path(POSENET_TPU))
    assert model.tensor_by_name("concat").shape == (1, 31, 41, 64)
    with pytest.raises(ModelFormatError, match="no_such_tensor"):
        model.tensor_by_name("no_such_tensor")


def test_quantization_dequantize_per_tensor_and_per_channel(fixture_path):
    q = Quantization(np.array([0.5], np.float32), np.array([10], np.int64))
    np.testing.assert_array_equal(q.dequantize(np.array([10, 12, 8], np.uint8)), [0.0, 1.0, -1.0])
    # Per-channel: the uncompiled Dense weights, one scale per output row along axis 0 (NOTES.md).
    model = load_model(fixture_path("matmul/dense_256.tflite"))
    (fc,) = [op for op in model.operators if op.opcode_name == "FULLY_CONNECTED"]
    w = model.tensors[fc.inputs[1]]
    assert w.quantization.per_channel and w.quantization.scale.size == 256
    assert w.quantization.quantized_dimension == 0
    q8 = model.buffer_data(w)
    real = w.quantization.dequantize(q8)
    np.testing.assert_allclose(real, q8.astype(np.float32) * w.quantization.scale[:, None], rtol=1e-7)


def test_loading_from_bytes_is_zero_copy(fixture_path):
    raw = bytearray(fixture_path(POSENET_TPU).read_bytes())
    model = load_model(raw)
    assert model.path is None
    tpu = model.edgetpu_ops()[0]
    params = model.darwinn(tpu).parameter_caching.parameters
    raw_view = np.frombuffer(raw, np.uint8)
    assert np.shares_memory(np.frombuffer(params, np.uint8), raw_view)
    assert np.shares_memory(np.frombuffer(tpu.custom_options_raw, np.uint8), raw_view)


def test_subgraph_layout_points_at_the_vectors(fixture_path):
    """The positions documented for the twin cutter really hold the outputs/operators vectors."""
    model = load_model(fixture_path(DEEPLAB_TPU))
    lay = model.subgraph_layout()
    data = np.frombuffer(model.data, np.uint8)

    def u32(pos: int) -> int:
        return int(data[pos:pos + 4].view("<u4")[0])

    assert lay.outputs_field + u32(lay.outputs_field) == lay.outputs_vector
    assert lay.operators_field + u32(lay.operators_field) == lay.operators_vector
    n_out = u32(lay.outputs_vector)
    outputs = data[lay.outputs_vector + 4:lay.outputs_vector + 4 + 4 * n_out].view("<i4").tolist()
    assert outputs == model.outputs
    assert u32(lay.operators_vector) == lay.operators_count == len(model.operators)
