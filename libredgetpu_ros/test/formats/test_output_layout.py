"""relayout_output / fix_int8_sign against hand-built tiled buffers and the fixtures' real layouts."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.formats.darwinn import DataType, Layer, OutputLayout
from libredgetpu_ros.formats.layout import fix_int8_sign, is_dense, relayout_output, tile_output


def _doc_example_layer() -> Layer:
    """The 2x2-tile, 4x5x32 example documented in libedgetpu executable.fbs (OutputLayout comment)."""
    i32 = lambda v: np.array(v, np.int32)  # noqa: E731
    layout = OutputLayout(
        y_coordinate_to_linear_tile_id_map=i32([0, 0, 2, 2]),
        x_coordinate_to_linear_tile_id_map=i32([0, 0, 0, 1, 1]),
        linearized_tile_byte_offset=i32([0, 192, 320, 512]),
        x_coordinate_to_local_byte_offset=i32([0, 32, 64, 0, 32]),
        y_coordinate_to_local_y_offset=i32([0, 1, 0, 1]),
        x_coordinate_to_local_y_row_size=i32([96, 96, 96, 64, 64]),
    )
    return Layer("doc", 640, (1, 4, 5, 32), 0, 1.0, DataType.FIXED_POINT8, output_layout=layout)


def test_documented_tile_example_relayouts_to_dense():
    layer = _doc_example_layer()
    dense = np.random.default_rng(0).integers(0, 256, (4, 5, 32), dtype=np.uint8)
    # Build the device buffer by hand from the documented tiling: tile0 = rows 0-1 x cols 0-2 (2x3x32 at 0),
    # tile1 = rows 0-1 x cols 3-4 (2x2x32 at 192), tile2 = rows 2-3 x cols 0-2 (at 320), tile3 (at 512).
    device = np.concatenate([dense[0:2, 0:3].ravel(), dense[0:2, 3:5].ravel(),
                             dense[2:4, 0:3].ravel(), dense[2:4, 3:5].ravel()])
    assert device.size == 640
    assert not is_dense(layer)
    np.testing.assert_array_equal(relayout_output(device.tobytes(), layer), dense)
    np.testing.assert_array_equal(tile_output(dense, layer), device)


def test_short_buffer_is_rejected():
    from libredgetpu_ros.errors import ModelFormatError

    with pytest.raises(ModelFormatError, match="needs 640 bytes"):
        relayout_output(b"\x00" * 639, _doc_example_layer())


@pytest.mark.parametrize("rel", [
    "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite",
    "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite",
    "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_0_of_2_edgetpu.tflite",
    "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite",
])
def test_real_layouts_are_injective_and_round_trip(fixture_path, rel):
    model = load_model(fixture_path(rel))
    eo = model.darwinn(model.edgetpu_ops()[0]).execution_only
    rng = np.random.default_rng(1)
    for layer in eo.output_layers:
        dense = rng.integers(0, 256, (layer.y_dim, layer.x_dim, layer.z_dim), dtype=np.uint8)
        device = tile_output(dense, layer, size=layer.size_bytes)
        # Every dense byte lands on its own device byte inside the padded layer size (no overlap, no overrun).
        marks = tile_output(np.ones_like(dense), layer, size=layer.size_bytes)
        assert int(marks.sum()) == dense.size
        np.testing.assert_array_equal(relayout_output(device, layer), dense)


def test_posenet_heatmap_is_z_padded(fixture_path):
    """17 heatmap channels are stored in 20-byte slots: a plain reshape would be wrong."""
    model = load_model(fixture_path("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"))
    heat = model.darwinn(model.edgetpu_ops()[0]).execution_only.output_layers[0]
    assert heat.size_bytes > 31 * 41 * 17 and not is_dense(heat)


def test_dense_layers_are_plain_reshapes(fixture_path):
    model = load_model(fixture_path("classify/mobilenet_v2_1.0_224_quant_edgetpu.tflite"))
    layer = model.darwinn(model.edgetpu_ops()[0]).execution_only.output_layers[0]
    assert is_dense(layer)
    raw = np.arange(1008, dtype=np.uint8)
    out = relayout_output(raw, layer)
    assert out.shape == (1, 1, 1001) and np.shares_memory(out, raw)


def test_fix_int8_sign():
    cpu = np.array([-128, -1, 0, 1, 127], np.int8)
    device = (cpu.view(np.uint8) ^ 0x80).astype(np.uint8)
    np.testing.assert_array_equal(fix_int8_sign(device), cpu)
    with pytest.raises(TypeError):
        fix_int8_sign(cpu)
