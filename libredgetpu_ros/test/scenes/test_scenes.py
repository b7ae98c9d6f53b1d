"""The scene kit's truth is the world's: every truth field checked against the rendered pixels or against
geometry worked out by hand (docs/scenes.md)."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.scenes import (
    Backdrop,
    Effects,
    Motion,
    PinholeCamera,
    Surface,
    presets,
    render,
    render_sequence,
    textures,
)


def test_pinhole_projection_and_field_of_view() -> None:
    cam = PinholeCamera.from_fov(64, 48, 90.0)
    assert cam.f_px == pytest.approx(32.0)
    assert cam.hfov_deg == pytest.approx(90.0)
    u, v, z = cam.project(np.array([1.0, -0.5, 2.0]))
    assert (u, v, z) == pytest.approx((31.5 + 16.0, 23.5 - 8.0, 2.0))
    turned = cam.moved((0.0, 0.0, 0.0), yaw_deg=90.0)  # turned left: what was on the left is ahead
    assert turned.project(np.array([-3.0, 0.0, 0.0]))[:2] == pytest.approx(cam.centre)
    assert math.isnan(cam.project(np.array([0.0, 0.0, -1.0]))[0])
    with pytest.raises(ConfigError):
        PinholeCamera(64, 64, 0.0)


def test_a_square_target_covers_what_its_distance_says() -> None:
    """coverage and radius_px of a square target at 2 m equal f * size / depth, measured in the pixels."""
    cam = PinholeCamera(80, 80, 40.0)
    target = Surface(textures.solid((200, 30, 30)), (0.0, 0.0, 2.0), 1.0)
    frame = render_sequence(cam, [target], 1, backdrop=Backdrop(textures.natural(1, 128)))[0]
    side_px = 40.0 * 1.0 / 2.0
    assert frame.truth.radius_px == pytest.approx(side_px / 2)
    assert frame.truth.coverage == pytest.approx(side_px ** 2 / 80 ** 2, rel=0.1)
    red = (frame.image[..., 0] > 150) & (frame.image[..., 1] < 80)
    assert red.sum() == pytest.approx(side_px ** 2, rel=0.1)
    ys, xs = np.nonzero(red)
    assert (xs.mean(), ys.mean()) == pytest.approx((frame.truth.u, frame.truth.v), abs=0.5)


def test_approach_truth_ttc_depth_and_apparent_growth() -> None:
    """Approaching at 1 m/s from 5 m: TTC = depth = 5 - t; the texture's scale between frames equals the
    depth ratio (measured by matching a rescaled centre crop)."""
    frames = presets.motion_scene("approach", textures.natural(4, 256), size=(96, 96), frames=31, noise=0.0)
    for f in frames:
        assert f.truth.depth == pytest.approx(5.0 - f.stamp_s)
        assert f.truth.ttc_s == pytest.approx(f.truth.depth)
        assert f.truth.offset == pytest.approx((0.0, 0.0))
    a, b = frames[0].gray().astype(np.float32), frames[30].gray().astype(np.float32)
    scale = frames[0].truth.depth / frames[30].truth.depth  # 5 / 4
    errors = {}
    for s in (1.0, 1.15, scale, 1.35):
        grown = cv2.resize(a, None, fx=s, fy=s, interpolation=cv2.INTER_LINEAR)
        c, h = grown.shape[0] // 2, 24
        errors[s] = float(np.abs(grown[c - h:c + h, c - h:c + h] - b[48 - h:48 + h, 48 - h:48 + h]).mean())
    assert min(errors, key=errors.get) == scale


@pytest.mark.parametrize("kind", ["recede", "lateral", "static"])
def test_scenes_without_a_coming_contact_have_infinite_ttc(kind: str) -> None:
    frames = presets.motion_scene(kind, textures.natural(5, 128), frames=4, target_m=1.5)
    assert all(math.isinf(f.truth.ttc_s) for f in frames)
    if kind == "lateral":  # the camera moves right: the target moves left by f * 1 m/s * t / 5 m
        f_px = PinholeCamera.from_fov(64, 64, 60.0).f_px
        assert frames[3].truth.u == pytest.approx(31.5 - f_px * 0.1 / 5.0)


def test_pan_moves_the_backdrop_right_by_f_times_the_angle() -> None:
    """A left turn of 2 deg at 30 deg/s moves the content right by f * tan(2 deg) at the image centre (the
    central columns; towards the edges a rotation moves pixels further, f * tan(angle + 2 deg) - u)."""
    frames = presets.pan_scene(textures.natural(6, 1024), 30.0, size=(128, 128), frames=5, noise=0.0)
    assert [f.truth.yaw_deg for f in frames] == pytest.approx([0, 1, 2, 3, 4])
    a, b = (np.float32(f.gray()[:, 44:84]) for f in (frames[0], frames[2]))
    (dx, dy), _ = cv2.phaseCorrelate(a, b)
    f_px = PinholeCamera.from_fov(128, 128, 60.0).f_px
    assert dx == pytest.approx(f_px * math.tan(math.radians(2.0)), abs=0.3)
    assert abs(dy) < 0.3


def test_spot_scene_disc_where_the_truth_says_and_moving() -> None:
    frames = presets.spot_scene((255, 0, 0), 10.0, textures.natural(7, 256, color=True), start_px=(-40, 20),
                                velocity_px=(300, 0), frames=3, noise=0.0)
    for f in frames:
        red = (f.image[..., 0] > 200) & (f.image[..., 1] < 60) & (f.image[..., 2] < 60)
        ys, xs = np.nonzero(red)
        assert red.sum() == pytest.approx(math.pi * 100, rel=0.15)
        assert (xs.mean(), ys.mean()) == pytest.approx((f.truth.u, f.truth.v), abs=0.5)
    assert frames[2].truth.u - frames[0].truth.u == pytest.approx(20.0)
    assert frames[0].truth.offset == pytest.approx((-40 / 159.5, 20 / 119.5))
    empty = presets.spot_scene(None, 10.0, textures.natural(7, 256, color=True), frames=1)
    assert empty[0].truth is None


def test_effects_noise_blur_light_and_determinism() -> None:
    cam = PinholeCamera(64, 64, 50.0)
    grey = [Surface(textures.solid(100.0), (0.0, 0.0, 1.0), 1.0, shape="plane")]
    noisy = render_sequence(cam, grey, 2, effects=Effects(noise=2.0, seed=3))
    again = render_sequence(cam, grey, 2, effects=Effects(noise=2.0, seed=3))
    assert np.array_equal(noisy[1].image, again[1].image)
    assert np.std(noisy[0].image.astype(float)) == pytest.approx(2.0, rel=0.1)
    lit = render_sequence(cam, grey, 1, effects=Effects(gain=1.5, offset=10.0))[0]
    assert np.all(lit.image == 160)
    flick = render_sequence(cam, grey, 6, effects=Effects(flicker=0.2, seed=1))
    means = [float(f.image.mean()) for f in flick]
    assert max(means) - min(means) > 5 and all(80 <= m <= 120 for m in means)
    edge = [Surface(textures.checkerboard(2, 64), (0.0, 0.0, 1.0), 64 / 50.0)]
    sharp = render_sequence(cam, edge, 1)[0].gray().astype(float)
    blurred = render_sequence(cam, edge, 1, effects=Effects(blur=2.0))[0].gray().astype(float)
    assert np.abs(np.diff(blurred, axis=1)).max() < 0.5 * np.abs(np.diff(sharp, axis=1)).max()


def test_stamps_gaps_and_surface_motion() -> None:
    cam = PinholeCamera(32, 32, 30.0)
    target = Surface(textures.natural(8, 64), (0.0, 0.0, 3.0), 1.0, velocity=(0.0, 0.0, -0.5))
    frames = render_sequence(cam, [target], 4, fps=10.0, gaps={2: 1.0}, motion=Motion(velocity=(0, 0, 0.5)))
    assert [f.stamp_s for f in frames] == pytest.approx([0.0, 0.1, 1.2, 1.3])
    assert frames[1].truth.ttc_s == pytest.approx((3.0 - 0.1) / 1.0)  # both move: closing at 1 m/s
    with pytest.raises(ConfigError):
        render_sequence(cam, [target], 0)
    with pytest.raises(ConfigError):
        Surface(textures.natural(8, 64), (0, 0, 1), 1.0, shape="sphere")


def test_photos_licensed_loaded_and_held_out_kept_apart() -> None:
    assert not set(textures.TUNING_PHOTOS) & set(textures.HELD_OUT_PHOTOS)
    assert len(textures.HELD_OUT_PHOTOS) >= 5
    for name in textures.TUNING_PHOTOS + textures.HELD_OUT_PHOTOS:
        assert name in textures.PHOTO_LICENCES
        image = textures.photo(name, size=48)
        assert image.shape == (48, 48, 3) and image.dtype == np.float32 and image.std() > 5
    assert textures.photo("camera", size=32, gray=True).shape == (32, 32)
    with pytest.raises(ConfigError):
        textures.photo("lena")


def test_natural_texture_has_a_power_law_spectrum() -> None:
    """beta = 2: the power per octave of the radial spectrum falls as 1/f^2 (slope -2 on log-log)."""
    tex = textures.natural(9, 256) - 128.0
    power = np.abs(np.fft.fft2(tex)) ** 2
    f = np.hypot(*np.meshgrid(np.fft.fftfreq(256), np.fft.fftfreq(256)))
    bands = [(f > lo) & (f <= 2 * lo) for lo in (1 / 64, 1 / 32, 1 / 16, 1 / 8)]
    density = [power[b].mean() for b in bands]
    slopes = np.diff(np.log2(density))
    assert slopes == pytest.approx([-2.0, -2.0, -2.0], abs=0.25)


def test_render_index_map_says_which_surface() -> None:
    cam = PinholeCamera(40, 40, 40.0)
    near = Surface(textures.solid(250.0), (0.0, 0.0, 2.0), 0.5, shape="disc")
    far = Surface(textures.solid(50.0), (0.0, 0.0, 4.0), 10.0)
    image, index = render(cam, [far, near])
    assert index[20, 20] == 1 and index[0, 0] == 0
    assert image[20, 20, 0] == pytest.approx(250.0) and image[0, 0, 0] == pytest.approx(50.0)
