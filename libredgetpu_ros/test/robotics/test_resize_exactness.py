"""robotics/resize_kernels.py gives cv2.resize(INTER_AREA)'s bytes, and fit_image takes it for camera frames.

Every size pair the package meets (camera sizes 320×240, 640×480, 640×360, 800×600, 1280×720 and odd ones to
the templates' 32×32, 64×64, 96×96, 128×128, 224×224 and non-square sizes), one and three channels,
writable and read-only, on random, extreme (0/255 noise, flat, ramps) and real frames (photos, rendered
scenes): equal bit for bit. The check has power: one weight moved by one float32 step changes some byte.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from libredgetpu_ros.robotics import resize_kernels

CAMERAS = [(240, 320), (480, 640), (360, 640), (600, 800), (720, 1280), (239, 321), (77, 100), (100, 64),
           (64, 333), (65, 65), (481, 641)]
TEMPLATES = [(64, 64), (32, 32), (96, 96), (128, 128), (224, 224), (48, 64), (47, 63), (64, 1)]


@pytest.fixture(scope="module", autouse=True)
def compiled() -> None:
    if not resize_kernels.warm_up():
        pytest.skip("numba is not installed: fit_image resizes with OpenCV")


def _opencv(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    out = cv2.resize(np.ascontiguousarray(frame), (width, height), interpolation=cv2.INTER_AREA)
    return out.reshape(height, width, frame.shape[2])


def _frames(height: int, width: int, channels: int, rng: np.random.Generator) -> list[np.ndarray]:
    shape = (height, width, channels)
    ramp = (np.arange(height * width * channels) % 256).astype(np.uint8).reshape(shape)
    frames = [rng.integers(0, 256, shape, dtype=np.uint8),
              rng.integers(0, 2, shape, dtype=np.uint8) * np.uint8(255),  # sums far from any rounding step
              np.full(shape, 255, np.uint8), ramp]
    read_only = frames[0].copy()
    read_only.flags.writeable = False  # a ROS rgb8 frame is a read-only view of the message
    return [*frames, read_only]


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("camera", CAMERAS, ids=lambda s: f"{s[1]}x{s[0]}")
def test_area_shrink_is_opencvs_bit_for_bit(camera: tuple[int, int], channels: int) -> None:
    rng = np.random.default_rng(camera[0] * 7 + camera[1] + channels)
    compared = 0
    for height, width in TEMPLATES:
        if height > camera[0] or width > camera[1]:
            continue
        for frame in _frames(*camera, channels, rng):
            got = resize_kernels.shrink(frame, height, width)
            want = _opencv(frame, height, width)
            if got is None:  # OpenCV's integer-ratio path, left to OpenCV
                assert resize_kernels.plan(*camera, height, width, channels) is None
                continue
            compared += 1
            assert got.shape == want.shape and got.dtype == np.uint8
            assert np.array_equal(got, want), (camera, (height, width), channels,
                                               int(np.count_nonzero(got != want)))
    assert compared


def test_real_frames_are_opencvs_bit_for_bit() -> None:
    """Photos (fixture photos, crops of camera size) and the scene kit's rendered camera frames."""
    from libredgetpu_ros.scenes import presets, textures

    frames = []
    for name in textures.FIXTURE_PHOTOS:
        photo = np.clip(np.rint(textures.photo(name, 720)), 0, 255).astype(np.uint8)
        frames += [photo[:240, :320], photo[100:580, 40:680], photo[:, :]]
    wall = textures.natural(3, 256, color=True)
    for size in ((320, 240), (640, 480)):
        frames += [f.image for f in presets.spot_scene((230, 30, 30), 12 * size[0] / 320, wall, size=size,
                                                       velocity_px=(300, 0), frames=3)]
        frames += [f.image for f in presets.motion_scene("approach", textures.natural(4, 256), size=size,
                                                         frames=3)]
    compared = 0
    for frame in frames:
        frame = frame if frame.ndim == 3 else frame[:, :, None]
        for image in (frame, np.ascontiguousarray(cv2.cvtColor(np.ascontiguousarray(frame),
                                                               cv2.COLOR_RGB2GRAY)[:, :, None])
                      if frame.shape[2] == 3 else frame):
            for height, width in ((64, 64), (32, 32), (96, 96)):
                got = resize_kernels.shrink(image, height, width)
                if got is not None:
                    compared += 1
                    assert np.array_equal(got, _opencv(image, height, width)), (image.shape, height, width)
    assert compared >= 60


def test_a_wrong_weight_is_caught() -> None:
    """The comparison above fails on a wrong table: any one weight of a 320×240 -> 64×64 plan made 0.4 %
    too large (each in turn: a first tap of every column, every row tap) changes some output byte of four
    random frames. (Errors of ~1e-4 are not seen: every exact output of this pair is a multiple of 1/75, at
    least 1/150 from a rounding step, so float32 rounding never decides a byte here.)"""
    tables = resize_kernels.plan(240, 320, 64, 64, 1)
    assert tables is not None
    rng = np.random.default_rng(11)
    frames = [rng.integers(0, 256, (240, 320), dtype=np.uint8) for _ in range(4)]
    wants = [_opencv(f[:, :, None], 64, 64).reshape(64, 64) for f in frames]
    out = np.empty((64, 64), np.uint8)
    wrong = np.float32(1 + 1 / 256)

    def differs(xw: np.ndarray, yal: np.ndarray) -> bool:
        for frame, want in zip(frames, wants, strict=True):
            resize_kernels.area(cv2.transpose(frame), 1, tables.xs, tables.xn, xw, tables.ysi, yal,
                                tables.yofs, out)
            if not np.array_equal(out, want):
                return True
        return False

    assert not differs(tables.xw, tables.yal)
    for i in range(tables.xw.shape[0]):
        xw = tables.xw.copy()
        xw[i, 0] *= wrong
        assert differs(xw, tables.yal), f"column {i}"
    for j in range(tables.yal.size):
        yal = tables.yal.copy()
        yal[j] *= wrong
        assert differs(tables.xw, yal), f"row tap {j}"


def test_fit_image_takes_the_compiled_path_for_a_camera_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's frame (a read-only rgb8 view, 320×240 or 640×480) is fitted without cv2.resize (nor
    cv2.cvtColor for a one-channel template: image_kernels' luma), to a colour and to a one-channel template,
    and gives OpenCV's bytes; an integer ratio and an enlargement still take OpenCV."""
    from libredgetpu_ros.robotics import image_kernels
    from libredgetpu_ros.robotics.image import fit_image

    assert image_kernels.warm_up()  # as a one-channel template's TemplateRunner does

    rng = np.random.default_rng(5)
    frames = []
    for height, width in ((240, 320), (480, 640)):
        frame = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        view = np.frombuffer(frame.tobytes(), np.uint8).reshape(frame.shape)
        assert not view.flags.writeable
        # what ros/image_msgs.image_to_rgb hands over: rgb8 as a read-only view, rgb8 with padded rows as a
        # read-only strided view, bgr8 as a new RGB array
        padded = np.frombuffer(np.pad(frame.reshape(height, -1), ((0, 0), (0, 8))).tobytes(), np.uint8)
        strided = np.lib.stride_tricks.as_strided(padded, (height, width, 3), (width * 3 + 8, 3, 1),
                                                  writeable=False)
        bgr = np.ascontiguousarray(frame[:, :, ::-1])
        frames += [view, strided, np.ascontiguousarray(bgr[:, :, [2, 1, 0]])]
    grey = {id(f): cv2.cvtColor(np.ascontiguousarray(f), cv2.COLOR_RGB2GRAY)[:, :, None] for f in frames}
    wants = {(id(f), c): _opencv(np.ascontiguousarray(f) if c == 3 else grey[id(f)], 64, 64)
             for f in frames for c in (1, 3)}
    resize = cv2.resize

    def refused(*args: object, **kwargs: object) -> np.ndarray:
        raise AssertionError("OpenCV called for a camera frame")

    monkeypatch.setattr(cv2, "resize", refused)
    monkeypatch.setattr(cv2, "cvtColor", refused)
    for frame in frames:
        for channels in (1, 3):
            got = fit_image(frame, 64, 64, channels)
            assert got.flags.c_contiguous and np.array_equal(got, wants[id(frame), channels])
    monkeypatch.setattr(cv2, "resize", resize)
    square = rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)  # 2x: OpenCV's integer-ratio path
    assert np.array_equal(fit_image(square, 64, 64, 3), _opencv(square, 64, 64))
    small = rng.integers(0, 256, (32, 48, 3), dtype=np.uint8)
    assert np.array_equal(fit_image(small, 64, 64, 3),
                          cv2.resize(small, (64, 64), interpolation=cv2.INTER_LINEAR))


def test_without_the_kernel_fit_image_uses_opencv(monkeypatch: pytest.MonkeyPatch) -> None:
    from libredgetpu_ros.robotics.image import fit_image

    frame = np.random.default_rng(6).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    compiled = fit_image(frame, 64, 64, 3)
    monkeypatch.setattr(resize_kernels, "_warm", False)
    assert resize_kernels.shrink(frame, 64, 64) is None
    assert np.array_equal(fit_image(frame, 64, 64, 3), compiled)
