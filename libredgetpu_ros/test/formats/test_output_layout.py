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


def _reference_relayout(src: np.ndarray, layer: Layer) -> np.ndarray:
    """The previous implementation (one (y, x, z) byte index, gathered at once): the bit-exact reference."""
    from libredgetpu_ros.formats.layout import element_offsets

    z_bytes = layer.z_dim * layer.element_size
    if is_dense(layer):
        return src[:layer.y_dim * layer.x_dim * z_bytes].reshape(layer.y_dim, layer.x_dim, z_bytes)
    starts = element_offsets(layer) * layer.element_size
    return src[starts[:, :, None] + np.arange(z_bytes, dtype=np.int64)[None, None, :]]


def _fixture_output_layers(fixtures_dir) -> list[Layer]:
    layers = []
    for path in sorted(fixtures_dir.glob("*/*_edgetpu.tflite")):
        model = load_model(path)
        for op in model.edgetpu_ops():
            for exe in model.darwinn(op).executables:
                layers += exe.output_layers
    return layers


def test_relayout_is_bit_exact_with_the_reference_on_every_fixture_layer(fixtures_dir):
    """The row-gather relayout vs the previous byte-index one, on random device bytes (padding included),
    for every output layer shape of the fixtures (tiled and dense), twice (the second call is cached)."""
    layers = _fixture_output_layers(fixtures_dir)
    shapes = {(la.y_dim, la.x_dim, la.z_dim) for la in layers}
    assert {(10, 10, 1280), (19, 19, 576), (1, 1917, 91), (31, 41, 17), (33, 33, 256)} <= shapes
    rng = np.random.default_rng(5)
    for layer in layers:
        for _ in range(2):
            src = rng.integers(0, 256, layer.size_bytes + 7, dtype=np.uint8)
            out = relayout_output(src, layer)
            ref = _reference_relayout(src, layer)
            assert out.dtype == np.uint8 and out.shape == ref.shape
            np.testing.assert_array_equal(out, ref, err_msg=layer.name)


def test_relayout_is_bit_exact_on_random_tilings():
    """Hand-made tilings (tile sizes that do not divide the dims, z padding) against the reference."""
    rng = np.random.default_rng(9)
    for _ in range(50):
        y, x, z = (int(v) for v in rng.integers(1, 40, 3))
        ty, tx = int(rng.integers(1, y + 1)), int(rng.integers(1, x + 1))
        zpad = z + int(rng.integers(0, 5))
        tiles_y, tiles_x = -(-y // ty), -(-x // tx)
        tile_bytes = [min(ty, y - (t // tiles_x) * ty) * min(tx, x - (t % tiles_x) * tx) * zpad
                      for t in range(tiles_y * tiles_x)]
        i32 = lambda v: np.asarray(v, np.int32)  # noqa: E731
        layout = OutputLayout(
            y_coordinate_to_linear_tile_id_map=i32([(j // ty) * tiles_x for j in range(y)]),
            x_coordinate_to_linear_tile_id_map=i32([i // tx for i in range(x)]),
            linearized_tile_byte_offset=i32(np.concatenate([[0], np.cumsum(tile_bytes)[:-1]])),
            x_coordinate_to_local_byte_offset=i32([(i % tx) * zpad for i in range(x)]),
            y_coordinate_to_local_y_offset=i32([j % ty for j in range(y)]),
            x_coordinate_to_local_y_row_size=i32([min(tx, x - (i // tx) * tx) * zpad for i in range(x)]),
        )
        layer = Layer("t", sum(tile_bytes), (1, y, x, z), 0, 1.0, DataType.FIXED_POINT8, output_layout=layout)
        src = rng.integers(0, 256, layer.size_bytes, dtype=np.uint8)
        np.testing.assert_array_equal(relayout_output(src, layer), _reference_relayout(src, layer))
        dense = rng.integers(0, 256, (y, x, z), dtype=np.uint8)
        np.testing.assert_array_equal(relayout_output(tile_output(dense, layer), layer), dense)
