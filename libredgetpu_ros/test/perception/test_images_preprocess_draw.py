"""Image decoding/encodings, input quantization and resize, drawing."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.backends.base import TensorSpec
from libredgetpu_ros.errors import ImageError, ModelFormatError
from libredgetpu_ros.perception.draw import annotate, colorize_mask, pascal_palette
from libredgetpu_ros.perception.images import load_image, to_rgb
from libredgetpu_ros.perception.preprocess import InputTransform
from libredgetpu_ros.perception.results import PerceptionResult
from libredgetpu_ros.postprocess.results import ClassScore, Detection, Keypoint, Pose

RNG = np.random.default_rng(7)
IMG = RNG.integers(0, 256, (5, 7, 3), dtype=np.uint8)


def _spec(dtype=np.uint8, scale=1 / 128, zero=128, shape=(1, 4, 6, 3)) -> TensorSpec:
    return TensorSpec(0, "input", shape, np.dtype(dtype), scale, zero)


@pytest.mark.parametrize(("encoding", "raw"), [
    ("rgb8", IMG),
    ("bgr8", IMG[:, :, ::-1]),
    ("rgba8", np.dstack([IMG, np.full(IMG.shape[:2], 9, np.uint8)])),
    ("bgra8", np.dstack([IMG[:, :, ::-1], np.full(IMG.shape[:2], 9, np.uint8)])),
])
def test_to_rgb_colour_encodings(encoding, raw):
    np.testing.assert_array_equal(to_rgb(np.ascontiguousarray(raw), encoding), IMG)


def test_to_rgb_mono_and_errors():
    gray = IMG[:, :, 0]
    np.testing.assert_array_equal(to_rgb(gray, "mono8"), np.repeat(gray[:, :, None], 3, axis=2))
    with pytest.raises(ImageError, match="HxWx3"):
        to_rgb(IMG[:, :, :2], "rgb8")
    with pytest.raises(ImageError, match="unsupported image encoding 'yuv422'"):
        to_rgb(IMG, "yuv422")
    with pytest.raises(ImageError, match="uint8"):
        to_rgb(IMG.astype(np.uint16), "rgb8")


def test_load_image_rgb_order_and_errors(fixture_path, tmp_path):
    import cv2

    path = tmp_path / "x.png"
    cv2.imwrite(str(path), IMG[:, :, ::-1])  # OpenCV writes BGR
    np.testing.assert_array_equal(load_image(path), IMG)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(ImageError, match=r"bad\.png"):
        load_image(bad)
    with pytest.raises(ImageError, match="does not exist"):
        load_image(tmp_path / "missing.jpg")


def test_nearest_resize_is_pils(fixture_path):
    """Google's PoseNet examples resize with PIL NEAREST (pixel-centre sampling); Pillow comes with
    matplotlib in the dev environment."""
    from PIL import Image

    t = InputTransform.for_input(_spec(shape=(1, 481, 641, 3)), "nearest")
    for image in (RNG.integers(0, 256, (1278, 1920, 3), dtype=np.uint8),
                  load_image(fixture_path("images/test_couple.jpg"))):
        pil = np.asarray(Image.fromarray(image).resize((641, 481), Image.NEAREST))
        np.testing.assert_array_equal(t(image)[0], pil)


def test_quantization_raw_and_mapped():
    pixels = np.arange(256, dtype=np.uint8).reshape(1, 256, 1).repeat(3, axis=2)
    raw = InputTransform.for_input(_spec(shape=(1, 1, 256, 3)), "area")
    assert raw.raw_pixels
    np.testing.assert_array_equal(raw(pixels)[0], pixels)
    signed = InputTransform.for_input(_spec(np.int8, 1 / 128, 0, (1, 1, 256, 3)), "area")
    np.testing.assert_array_equal(signed(pixels)[0].astype(int), pixels.astype(int) - 128)
    coarse = InputTransform.for_input(_spec(np.uint8, 2 / 128, 64, (1, 1, 256, 3)), "area")
    expected = np.clip(np.rint((pixels.astype(float) - 128) / 2) + 64, 0, 255)
    np.testing.assert_array_equal(coarse(pixels)[0], expected)
    with pytest.raises(ModelFormatError, match=r"\[1, H, W, 3\]"):
        InputTransform.for_input(_spec(shape=(1, 1001)), "area")


def test_pascal_palette_known_colours():
    palette = pascal_palette()
    assert palette[0].tolist() == [0, 0, 0]
    assert palette[1].tolist() == [128, 0, 0]
    assert palette[15].tolist() == [192, 128, 128]  # person
    mask = np.array([[0, 15], [1, 0]], np.uint8)
    assert colorize_mask(mask)[0, 1].tolist() == [192, 128, 128]


def test_annotate_draws_every_kind():
    rgb = np.zeros((200, 300, 3), np.uint8)
    keypoints = [Keypoint(f"k{i}", i, 50.0 + 5 * i, 100.0, 0.9) for i in range(17)]
    mask = np.zeros((200, 300), np.uint8)
    mask[150:, :50] = 15
    result = PerceptionResult(task="pose", image_size=(300, 200), backend="cpu",
                              poses=[Pose(keypoints, 0.9)],
                              detections=[Detection(1, "person", 0.8, (200.0, 20.0, 280.0, 90.0))],
                              classes=[ClassScore(3, "cat", 0.7)], mask=mask)
    out = annotate(rgb, result)
    assert out.shape == rgb.shape and not np.shares_memory(out, rgb) and not rgb.any()
    assert out[100, 50:130].any()  # skeleton row
    assert out[20:91, 200].any()  # box edge
    assert (out[175, 25] == [96, 64, 64]).all()  # half-blended person colour over black
    assert not out[120:140, 150:190].any()  # untouched background
