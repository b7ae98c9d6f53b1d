"""A valid pattern answer is a right one: per condition, on rendered scenes of the held-out photos.

Scenes (test/robotics/_pattern_scenes.py): a photo-textured square sliding across a backdrop, the template a
patch of it cut from frame 0, its true place in frames 1-6 known from the renderer. The validity limits
(robotics/pattern_validity.py) were tuned on the tuning photos and on held-out-photo seeds 1000-1049 and
2000-2039 (two failure analyses); these tests use seeds ``EVAL_SEED`` (3000) onwards with the held-out
photos (``textures.HELD_OUT_PHOTOS``), fixed.

Required per condition: valid-but-wrong (valid while the patch is absent or more than 2 px from the answer)
on at most 1 % of the frames, and valid on at least the share of the hits (answers within 2 px) measured
here, less a margin (docs/robotics.md quotes the printed figures). The previous check (score >= 0.6 and
no rival among the device's two answers within 0.05) fails 12 of the 15 cases (up to 40 % valid but
wrong).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.robotics.pattern import PatternTracker
from libredgetpu_ros.robotics.pattern_validity import PatternLimits, PatternValidity
from libredgetpu_ros.scenes import textures

from .._helpers import load_helper

scenes = load_helper(Path(__file__).with_name("_pattern_scenes.py"))

MAX_WRONG = 0.01
# (search, kernel, channels, condition, scenes, least valid-on-hit share)
CASES = [
    (64, 8, 1, "clean", 40, 0.4),
    (64, 8, 3, "clean", 40, 0.4),
    (64, 16, 1, "clean", 40, 0.7),
    (128, 16, 1, "clean", 20, 0.7),
    (128, 32, 1, "clean", 12, 0.75),
    (64, 8, 1, "noise", 40, 0.1),
    (64, 16, 1, "noise", 40, 0.45),
    (64, 8, 1, "clutter", 40, 0.3),
    (64, 16, 1, "clutter", 40, 0.75),
    (64, 8, 1, "absent", 40, None),
    (64, 16, 1, "absent", 40, None),
    (128, 16, 1, "absent", 10, None),
    (64, 8, 1, "occlusion", 40, None),
    (64, 16, 1, "occlusion", 40, None),
    (128, 16, 1, "occlusion", 10, None),
]


@pytest.mark.parametrize(("search", "kernel", "channels", "condition", "count", "least"), CASES,
                         ids=[f"{s}-{k}x{k}-{c}ch-{cond}" for s, k, c, cond, _, _ in CASES])
def test_valid_but_wrong_at_most_1_percent(search, kernel, channels, condition, count, least) -> None:
    with PatternTracker.from_template(search, kernel, channels, backend="cpu") as tracker:
        tally = scenes.measure(tracker, condition, count, scenes.EVAL_SEED, textures.HELD_OUT_PHOTOS)
    print(f"{search}/{kernel}x{kernel}/{channels}ch {condition}: {tally.line()}")
    assert tally.wrong_rate <= MAX_WRONG, tally.line()
    if least is not None:
        assert tally.hits >= 0.3 * tally.present, tally.line()  # the scenes are findable at all
        assert tally.valid_on_hit >= least, tally.line()


WIDE = [(kernel, condition) for kernel in (8, 16) for condition in scenes.CONDITIONS]


@pytest.mark.slow
@pytest.mark.parametrize(("kernel", "condition"), WIDE, ids=[f"64-{k}x{k}-{c}" for k, c in WIDE])
def test_valid_but_wrong_at_most_1_percent_on_600_frames(kernel, condition) -> None:
    """The same bound on 100 more scenes per condition (seeds ``WIDE_SEED`` on, 600 frames: at most 6
    valid but wrong), 64 x 64, one channel."""
    with PatternTracker.from_template(64, kernel, 1, backend="cpu") as tracker:
        tally = scenes.measure(tracker, condition, 100, scenes.WIDE_SEED, textures.HELD_OUT_PHOTOS)
    print(f"64/{kernel}x{kernel}/1ch {condition}, seeds {scenes.WIDE_SEED}+: {tally.line()}")
    assert tally.wrong_rate <= MAX_WRONG, tally.line()


def test_a_repetitive_patch_is_ambiguous_and_a_unique_one_is_valid() -> None:
    """A checkerboard patch matches every other square: ``ambiguous``, with no offset; one square of it made
    distinct becomes the one clear place."""
    board = np.kron((np.indices((8, 8)).sum(axis=0) % 2) * 150 + 50, np.ones((8, 8))).astype(np.uint8)
    with PatternTracker.from_template(64, 8, 1, backend="cpu") as tracker:
        tracker.set_template_at(board, 20, 20)
        match = tracker.track(board)
        assert not match.result.valid and match.result.reason == "ambiguous"
        assert match.result.x_offset is None and match.result.servo_error() == (0.0, 0.0)
        assert match.evidence is not None and match.evidence.rival > 0.9
        marked = board.copy()
        marked[23:27, 21:25] = 255  # a bright mark inside one square
        tracker.set_template_at(marked, 20, 20)
        found = tracker.track(marked)
        assert found.result.valid and found.result.reason == "ok", found.to_dict()
        assert abs(found.x - 23.5) <= 0.5 and abs(found.y - 23.5) <= 0.5


def test_a_device_answer_off_the_peak_is_a_device_miss() -> None:
    """The check itself: the device's answer away from the frame's NCC peak is refused whatever it scored."""
    rng = np.random.default_rng(5)
    frame = rng.integers(0, 256, (64, 64, 1)).astype(np.uint8)
    patch = frame[30:38, 12:20].astype(np.float32)
    check = PatternValidity()
    assert check.check(frame, patch, 12.0, 30.0).valid
    missed = check.check(frame, patch, 40.0, 10.0)
    assert not missed.valid and missed.reason == "device_miss" and missed.distance >= 20
    other = rng.integers(0, 256, (8, 8, 1)).astype(np.float32)  # noise that is not in the frame
    absent = check.check(frame, other, 12.0, 30.0)
    assert not absent.valid and absent.reason == "low_score" and absent.peak < PatternLimits.min_score


@pytest.mark.parametrize("change", [{"min_score": 1.5}, {"min_ratio": 0.5}, {"min_spread_ratio": 0.0},
                                    {"max_distance": -1.0}, {"rival_radius": 0}, {"floor": 0.0}])
def test_limits_out_of_range_are_refused(change) -> None:
    with pytest.raises(ConfigError, match="pattern validity limits"):
        PatternLimits(**change)


def test_the_tracker_takes_limits_and_min_score_replaces_theirs() -> None:
    strict = PatternLimits(min_ratio=5.0, min_score=0.8)
    with PatternTracker.from_template(64, 8, 1, backend="cpu", limits=strict) as tracker:
        assert tracker.validity.limits == strict and tracker.min_score == 0.8
        assert tracker.describe()["validity"]["min_ratio"] == 5.0
    with PatternTracker.from_template(64, 8, 1, backend="cpu", limits=strict, min_score=0.7) as tracker:
        assert tracker.validity.limits.min_score == 0.7 and tracker.validity.limits.min_ratio == 5.0
    for bad in ({"min_score": 2.0}, {"passes": 0}):
        with pytest.raises(ConfigError, match="pattern"):
            PatternTracker.from_template(64, 8, 1, backend="cpu", **bad)


def test_the_json_result_carries_the_evidence() -> None:
    """What `robotics pattern --json` prints: the check's figures beside valid / reason."""
    rng = np.random.default_rng(7)
    frame = rng.integers(0, 256, (64, 64, 1)).astype(np.uint8)
    with PatternTracker.from_template(64, 8, 1, backend="cpu") as tracker:
        tracker.set_template_at(frame, 30, 12)
        found = tracker.track(frame).to_dict()
    assert found["valid"] and found["reason"] == "ok" and abs(found["x"] - 33.5) <= 0.5
    assert found["peak"] > 0.99 and found["rival"] < 0.7 and found["distance"] <= 0.5 and "spread" in found
