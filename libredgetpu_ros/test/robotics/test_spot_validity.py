"""Spot tracker validity against rendered scenes with a known answer (libredgetpu_ros/scenes, docs/scenes.md):
no target -> never valid; a target too large for the template's int8 softmax -> never valid; small targets
on textured walls -> valid and within 0.1 of the truth; two targets -> not valid; the servo error is zero
whenever the result is not valid."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.robotics.spot import SpotTracker
from libredgetpu_ros.robotics.spot_validity import REASONS, SpotValidity, ValidityLimits
from libredgetpu_ros.scenes import presets, textures

# (template variant, disc colour): the bright variant follows a white disc
VARIANTS = {"bright": (255, 255, 255), "red": (230, 30, 30), "green": (30, 220, 30), "white": (255, 255, 255)}


@pytest.fixture(scope="module")
def trackers():
    opened = {name: SpotTracker.from_template(64, name, backend="cpu") for name in VARIANTS}
    opened["red_128"] = SpotTracker.from_template(128, "red", backend="cpu")
    yield opened
    for tracker in opened.values():
        tracker.close()


def _gray(texture: np.ndarray) -> np.ndarray:
    return np.repeat(texture[..., None], 3, axis=-1)


def _walls(variant: str) -> dict[str, np.ndarray]:
    """Textured backgrounds; a bright spot needs a wall darker than it (white in the wall: rivals)."""
    if variant in ("bright", "white"):
        return {"natural_gray_dim": _gray(textures.natural(11, 256, contrast=0.5)),
                "grass": textures.photo("grass", 256), "brick": textures.photo("brick", 256)}
    return {"natural_color": textures.natural(12, 256, color=True),
            "natural_gray": _gray(textures.natural(13, 256)),
            "grass": textures.photo("grass", 256), "astronaut": textures.photo("astronaut", 256)}


def _assert_no_command(result) -> None:
    assert not result.valid
    assert result.x_offset is None and result.y_offset is None
    assert result.servo_error(3.0) == (0.0, 0.0) and result.direction() == "none"
    assert result.reason in REASONS and result.reason != "ok"


@pytest.mark.parametrize("variant", [*VARIANTS, "red_128"])
def test_uniform_frames_are_never_valid(trackers, variant) -> None:
    """Black, grey, white and fully coloured frames: LibrEdgeTPU's decode reads (0, -1) "up" on them."""
    tracker = trackers[variant]
    for value in ((0, 0, 0), (128, 128, 128), (255, 255, 255), (230, 30, 30), (30, 220, 30)):
        result = tracker.track(np.full((240, 320, 3), value, np.uint8))
        _assert_no_command(result)
    assert tracker.track(np.zeros((240, 320, 3), np.uint8)).reason == "no_target"
    if variant == "red":
        assert tracker.track(np.full((240, 320, 3), (230, 30, 30), np.uint8)).reason == "target_too_large"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_textured_frames_without_the_target_are_never_valid(trackers, variant) -> None:
    tracker = trackers[variant]
    walls = {"natural_gray": _gray(textures.natural(21, 256)),
             "camera": _gray(textures.photo("camera", 256, True)),
             "gravel": _gray(textures.photo("gravel", 256, True))}
    if variant == "bright":  # a bright-spot tracker on a textured wall with no spot: its whitest texture wins
        walls["natural_color"] = textures.natural(22, 256, color=True)
    for name, wall in walls.items():
        for frame in presets.spot_scene(None, 10, wall, frames=2, seed=3):
            result = tracker.track(frame.image)
            assert not result.valid, (name, result)
            _assert_no_command(result)


@pytest.mark.parametrize("variant", [*VARIANTS, "red_128"])
def test_targets_covering_30_percent_or_more_are_never_valid(trackers, variant) -> None:
    tracker = trackers[variant]
    colour = VARIANTS.get(variant, VARIANTS["red"])
    wall = _gray(textures.natural(31, 256, contrast=0.4))
    for radius in (86, 100, 130):
        for frame in presets.spot_scene(colour, radius, wall, start_px=(-20, 10), velocity_px=(300, 0),
                                        frames=3, seed=radius):
            assert frame.truth.coverage >= 0.3
            _assert_no_command(tracker.track(frame.image))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_small_targets_on_textured_walls_are_valid_and_right(trackers, variant) -> None:
    """Radius 8-15 px in 320x240, moving across textured walls, noise sigma 2: valid and within 0.1 of the
    truth on >= 95 % of frames (every frame here)."""
    tracker, colour = trackers[variant], VARIANTS[variant]
    good = total = 0
    worst = 0.0
    for w, (name, wall) in enumerate(_walls(variant).items()):
        for radius in (8, 11, 15):
            frames = presets.spot_scene(colour, radius, wall, start_px=(-100 + 20 * w, 70 - 10 * radius),
                                        velocity_px=(1500, -300 + 40 * radius), frames=4,
                                        seed=w * 100 + radius)
            for frame in frames:
                result = tracker.track(frame.image)
                total += 1
                if result.valid:
                    error = max(abs(result.x_offset - frame.truth.offset[0]),
                                abs(result.y_offset - frame.truth.offset[1]))
                    worst = max(worst, error)
                    good += error <= 0.1
                    assert result.reason == "ok" and 0 < result.coverage < 0.25 and result.mass >= 0.9
                    assert result.servo_error(2.0) == (-2.0 * result.x_offset, -2.0 * result.y_offset)
                else:
                    print(name, radius, result)
    assert good >= 0.95 * total, (good, total, worst)


def test_two_targets_are_ambiguous(trackers) -> None:
    """Two red discs: the soft argmax lands between them (LibrEdgeTPU reports that midpoint)."""
    tracker = trackers["red"]
    image = presets.spot_scene((230, 30, 30), 12, _gray(textures.natural(41, 256)), start_px=(-90, 0),
                               frames=1)[0].image.copy()
    other = presets.spot_scene((230, 30, 30), 12, _gray(textures.natural(41, 256)), start_px=(90, 0),
                               frames=1)[0].image
    image[:, 160:] = other[:, 160:]
    result = tracker.track(image)
    assert result.reason == "ambiguous"
    assert abs(result.measured[0]) < 0.2  # the device's reading: between the two, on neither
    _assert_no_command(result)


def test_a_large_target_on_the_128_template_is_refused_where_the_device_is_wrong(trackers) -> None:
    """From radius ~30 px (320x240) the 128x128 template's softmax underflows: refused, never wrong."""
    tracker = trackers["red_128"]
    wall = _gray(textures.natural(51, 256))
    for radius in (10, 20, 30, 45, 60):
        frame = presets.spot_scene((230, 30, 30), radius, wall, start_px=(50, -30), frames=1, seed=radius)[0]
        result = tracker.track(frame.image)
        if result.valid:
            assert abs(result.x_offset - frame.truth.offset[0]) <= 0.1
            assert abs(result.y_offset - frame.truth.offset[1]) <= 0.1
        else:
            assert result.reason in ("spread", "target_too_large")
            assert radius >= 30


def test_limits_are_checked_and_the_mode_turns_the_check_off() -> None:
    with pytest.raises(Exception, match="limits"):
        ValidityLimits(max_coverage=0.0)
    with pytest.raises(Exception, match="mode"):
        SpotTracker.from_template(64, "red", backend="cpu", mode="strict")
    with SpotTracker.from_template(64, "red", backend="cpu", mode="libredgetpu") as raw:
        result = raw.track(np.zeros((64, 64, 3), np.uint8))
        assert result.valid and result.reason == "unchecked"
        assert (result.x_offset, result.y_offset) == pytest.approx((0.0, -1.0), abs=0.02)  # its "up"


def test_response_equals_the_twins_conv_output(trackers) -> None:
    """The CPU check's response is the model's own quantized conv output (LiteRT on the twin, all tensors
    kept), so the check sees what the device saw."""
    from ai_edge_litert.interpreter import Interpreter

    tracker = trackers["red"]
    template = tracker.template
    interp = Interpreter(model_path=str(template.twin_path), experimental_preserve_all_tensors=True)
    interp.allocate_tensors()
    conv = next(op for op in template.twin.operators if op.opcode_name == "CONV_2D")
    check = SpotValidity(template)
    rng = np.random.default_rng(5)
    weights = template.twin.buffer_data(template.conv_weights(0)).reshape(-1)
    images = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(4)]
    wall = textures.natural(1, 256, color=True)
    images.append(presets.spot_scene((230, 30, 30), 12, wall, frames=1)[0].image)
    for image in images:
        fitted = tracker.fit(image)
        interp.set_tensor(interp.get_input_details()[0]["index"], fitted[None])
        interp.invoke()
        expected = interp.get_tensor(conv.outputs[0]).reshape(64, 64)
        got = check.response(fitted, weights, tracker.filter_scale)
        assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1
        assert np.mean(got == expected) > 0.99


@pytest.mark.parametrize("variant", ["red", "bright", "green", "red_128"])
def test_compiled_check_equals_the_numpy_check(trackers, variant) -> None:
    """robotics/spot_kernels.py (one compiled pass) gives the NumPy path's evidence on scenes of every kind:
    targets, none, two, large ones, uniform frames, noise."""
    from libredgetpu_ros.robotics import spot_kernels

    if not spot_kernels.warm_up():
        pytest.skip("numba is not installed: the NumPy path is the only one")
    tracker = trackers[variant]
    fast = tracker.validity
    slow = SpotValidity(tracker.template, fast.limits, kernels=False)
    assert fast.kernels and not slow.kernels
    weights = None if tracker._filter is None else tracker.runner.parameters.twin[
        tracker._filter.index].reshape(-1)
    colour = VARIANTS.get(variant, VARIANTS["red"])
    wall = next(iter(_walls(variant.removesuffix("_128")).values()))
    frames = [np.full((64, 64, 3), value, np.uint8) for value in ((0, 0, 0), (128, 128, 128), colour)]
    frames += [f.image for f in presets.spot_scene(colour, 12, wall, frames=6)]
    frames += [f.image for f in presets.spot_scene(colour, 60, wall, frames=2)]  # too large
    frames += [f.image for f in presets.spot_scene(None, 12, wall, frames=2)]  # no target
    two = presets.spot_scene(colour, 10, wall, frames=1)[0].image.copy()
    two[5:15, 5:15] = colour
    frames.append(two)
    rng = np.random.default_rng(3)
    frames += [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(3)]
    reasons = set()
    for frame in frames:
        fitted = tracker.fit(frame)
        a = fast.check(fitted, weights, tracker.filter_scale)
        b = slow.check(fitted, weights, tracker.filter_scale)
        assert (a.valid, a.reason) == (b.valid, b.reason)
        assert (a.coverage, a.contrast, a.margin) == (b.coverage, b.contrast, b.margin)
        assert a.mass == pytest.approx(b.mass, abs=1e-12)
        reasons.add(a.reason)
    assert "ok" in reasons and len(reasons) >= 3  # the comparison covered valid and refused frames


@pytest.mark.parametrize("variant", ["red", "bright", "red_128"])
def test_track_is_the_decode_and_the_check_of_the_same_frame(trackers, variant) -> None:
    """``track``'s one-call frame path (the kernel's decision, the decode by table, one result object) gives
    what the decode and ``SpotValidity.check`` of the same frame give, on valid and refused frames, from
    read-only, writable, colour and mono frames at the template's size and larger."""
    tracker = trackers[variant]
    colour = VARIANTS.get(variant, VARIANTS["red"])
    wall = next(iter(_walls(variant.removesuffix("_128")).values()))
    frames = [f.image for f in presets.spot_scene(colour, 12, wall, frames=3)]
    frames += [f.image for f in presets.spot_scene(None, 12, wall, frames=1)]
    frames += [f.image for f in presets.spot_scene(colour, 60, wall, frames=1)]
    small = [np.ascontiguousarray(tracker.fit(f)) if tracker.channels == 3 else
             np.repeat(tracker.fit(f), 3, axis=2) for f in frames]
    read_only = [f.copy() for f in small]
    for f in read_only:
        f.flags.writeable = False
    views = [np.asfortranarray(f) for f in small]  # not C-contiguous
    weights = None if tracker._filter is None else tracker.runner.parameters.twin[
        tracker._filter.index].reshape(-1)
    reasons = set()
    for frame in frames + small + read_only + views:
        fitted = tracker.fit(frame)
        result = tracker.track(frame)
        raw = tracker.runner.run([fitted[None]])[0][tracker.template.output.name]
        decoded = tracker.decoder.decode(raw, result.version)
        evidence = tracker.validity.check(fitted, weights, tracker.filter_scale)
        assert (result.valid, result.reason) == (evidence.valid, evidence.reason)
        assert (result.coverage, result.mass) == (evidence.coverage, evidence.mass)
        assert result.raw == decoded.raw and result.measured == decoded.measured
        expected = decoded.measured if evidence.valid else (None, None)
        assert (result.x_offset, result.y_offset) == expected
        reasons.add(result.reason)
    assert "ok" in reasons and len(reasons) >= 2


def test_the_mass_leaves_out_only_what_rounds_away(trackers) -> None:
    """The kernel sums the softmax from the peak down to 50 logits under it: on a frame whose levels span
    the whole int8 range (a ramp with a bright spot), its mass equals the NumPy path's, which sums every
    cell."""
    from libredgetpu_ros.robotics import spot_kernels

    if not spot_kernels.warm_up():
        pytest.skip("numba is not installed: the NumPy path is the only one")
    tracker = trackers["bright"]
    fast = tracker.validity
    slow = SpotValidity(tracker.template, fast.limits, kernels=False)
    ramp = np.tile(np.arange(64, dtype=np.uint8)[None, :] * 3, (64, 1))[:, :, None].copy()
    for spot in (0, 2, 6, 20, 60):
        frame = ramp.copy()
        frame[30:33, 30:33] = 189 + spot  # the ramp's top is 189: a spot `spot` levels over it
        a = fast.check(frame)
        b = slow.check(frame)
        assert a.mass == pytest.approx(b.mass, abs=1e-12) and (a.reason, a.coverage) == (b.reason, b.coverage)


def test_check_takes_the_template_input_in_any_layout(trackers) -> None:
    """``check`` / ``measure`` take the template input as (H, W, C), (H, W) for one channel, a batch of one,
    or not contiguous (copied to the compiled call's layout): the same evidence; a wrong size is refused."""
    for variant in ("red", "bright"):
        tracker = trackers[variant]
        colour = VARIANTS[variant]
        wall = next(iter(_walls(variant).values()))
        fitted = tracker.fit(presets.spot_scene(colour, 12, wall, frames=1)[0].image)
        weights = None if tracker._filter is None else tracker.runner.parameters.twin[
            tracker._filter.index].reshape(-1)
        expected = tracker.validity.check(fitted, weights, tracker.filter_scale)
        assert expected.valid
        layouts = [np.asfortranarray(fitted), fitted[None], fitted[::-1][::-1]]
        if variant == "bright":
            layouts.append(fitted[:, :, 0])
        for layout in layouts:
            assert tracker.validity.check(layout, weights, tracker.filter_scale) == expected
        with pytest.raises(ValueError):
            tracker.validity.check(fitted[:32], weights, tracker.filter_scale)


def test_the_check_follows_a_colour_swap_and_back() -> None:
    """``track`` checks each frame with the filter the device ran with: a green disc is no target for the red
    filter, a valid target once the filter is swapped to green, and no target again after the swap back
    (SpotValidity's filter cache is keyed by the parameter set's weights, never left on an old filter)."""
    from libredgetpu_ros.robotics.spot import COLOR_PRESETS

    wall = _walls("green")["natural_gray"]
    frame = presets.spot_scene(VARIANTS["green"], 12, wall, frames=1)[0].image
    with SpotTracker.from_template(64, "red", backend="cpu") as tracker:
        reasons = []
        for colour in ("red", "green", "red", "green"):
            tracker.set_color(COLOR_PRESETS[colour])
            result = tracker.track(frame)
            weights = tracker.runner.parameters.twin[tracker._filter.index]
            assert result.reason == tracker.validity.check(tracker.fit(frame), np.array(weights),
                                                           tracker.filter_scale).reason
            reasons.append(result.reason)
    assert reasons[1] == reasons[3] == "ok" and reasons[0] == reasons[2] != "ok"


def test_a_read_only_view_of_a_changing_array_never_gets_stale_constants(trackers) -> None:
    """A caller's read-only view of a writable array can change under the filter cache: the constants follow
    the new values (only a frozen array is matched by identity), and equal those of a fresh copy."""
    tracker = trackers["red"]
    check = SpotValidity(tracker.template)
    owner = np.array([[[[60, -20, -20]]]], np.int8)
    view = owner.view()
    view.setflags(write=False)
    red = check.consts(view, tracker.filter_scale)
    owner[...] = [[[[-20, 60, -20]]]]
    assert np.array_equal(check.consts(view, tracker.filter_scale), check.consts(owner.copy(),
                                                                                tracker.filter_scale))
    assert not np.array_equal(check.consts(view, tracker.filter_scale), red)


def test_the_trackers_own_weights_are_found_by_identity() -> None:
    """The parameter set's filter (the model's buffer, then each set_color's array) is frozen, so a tracker's
    frame costs an identity test, before and after a colour swap."""
    from libredgetpu_ros.robotics.spot import COLOR_PRESETS

    frame = np.zeros((64, 64, 3), np.uint8)
    with SpotTracker.from_template(64, "red", backend="cpu") as tracker:
        for colour in (None, "green"):
            if colour is not None:
                tracker.set_color(COLOR_PRESETS[colour])
            tracker.track(frame)
            weights = tracker.runner.parameters.twin[tracker._filter.index]
            assert tracker.validity._filter_cache[0] is weights
