"""RoboticsModule (robotics/base.py): every module gets version / describe / close / the context manager and
the template's channel rule from the one base; a one-channel PatternTracker takes a colour patch itself (the
tracker node, the robotics CLI and retarget no longer convert it)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from libredgetpu_ros.robotics.base import RoboticsModule
from libredgetpu_ros.robotics.compass import VisualCompass
from libredgetpu_ros.robotics.extractor import EmbeddingExtractor
from libredgetpu_ros.robotics.flow import OpticalFlow
from libredgetpu_ros.robotics.looming import LoomingDetector
from libredgetpu_ros.robotics.pattern import PatternTracker
from libredgetpu_ros.robotics.spot import SpotTracker
from libredgetpu_ros.robotics.template import load_template


class _Closing:
    """Backend double that counts close() calls (and answers describe / stage)."""

    name = "closing"

    def __init__(self) -> None:
        self.closed = 0

    def stage(self, parameters) -> None:
        pass

    def describe(self) -> dict:
        return {"backend": self.name}

    def close(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("cls", [SpotTracker, PatternTracker, LoomingDetector, OpticalFlow, VisualCompass,
                                 EmbeddingExtractor])
def test_every_module_is_a_robotics_module(cls) -> None:
    assert issubclass(cls, RoboticsModule) and cls.MODULE
    for name in ("close", "__enter__", "__exit__", "describe", "model_input"):
        assert name in dir(cls)
    # the tails live in the base only: a module that writes them again brings the copies back
    for name in ("close", "__enter__", "__exit__", "describe"):
        assert name not in vars(cls), f"{cls.__name__}.{name} repeats RoboticsModule.{name}"


@pytest.mark.parametrize(("name", "cls", "module"), [
    ("bright_64x64", SpotTracker, "spot"), ("pattern_64x64_8x8_1ch", PatternTracker, "pattern"),
    ("looming_64x64_3x3", LoomingDetector, "looming"),
])
def test_context_manager_closes_and_describe_names_the_module(name, cls, module) -> None:
    backend = _Closing()
    with cls(load_template(name), backend_object=backend) as tracker:
        info = tracker.describe()
        assert tracker.version == 0
    assert backend.closed == 1
    assert info["module"] == module and info["backend"] == "closing" and info["template"] == name
    assert info["size"] == [64, 64] and info["parameters_version"] == 0


def test_model_input_is_the_frame_as_a_batch_and_prepare_is_gone() -> None:
    """The frame -> input step is model_input ("prepare", its old name, names what a parameter target does
    with a set: it was deprecated and is removed)."""
    frame = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    with SpotTracker(load_template("bright_64x64"), backend_object=_Closing()) as tracker:
        batch = tracker.model_input(frame)
        assert batch.shape == (1, 64, 64, 1) and np.array_equal(batch[0], tracker.fit(frame))  # grey
        assert not hasattr(tracker, "prepare")


def test_flow_and_compass_describe_through_the_base() -> None:
    with VisualCompass.from_template("gabor_64x64_p4", 90.0, backend="cpu") as compass:
        info = compass.describe()
        flow_info = compass.flow.describe()
        runner = compass.flow.runner
        assert compass.runner is runner and compass.template is runner.template
    assert info["module"] == "compass" and flow_info["module"] == "flow"
    assert info["fov_deg"] == 90.0 and info["mode"] == flow_info["mode"] == "normalized"
    assert info["size"] == [64, 64] and info["channels"] == 1 and info["backend"] == flow_info["backend"]


def test_one_channel_pattern_takes_a_colour_patch_as_its_luma(fixture_path) -> None:
    rgb = cv2.cvtColor(cv2.imread(str(fixture_path("images/grace_hopper.bmp"))), cv2.COLOR_BGR2RGB)
    patch = np.ascontiguousarray(rgb[100:108, 120:128])
    with PatternTracker(load_template("pattern_64x64_8x8_1ch"), backend="none") as colour, \
            PatternTracker(load_template("pattern_64x64_8x8_1ch"), backend="none") as grey:
        from_rgb = colour.set_template(patch)  # before the base: WeightsError (shape (8, 8, 3))
        from_grey = grey.set_template(cv2.cvtColor(patch, cv2.COLOR_RGB2GRAY))
    assert np.array_equal(from_rgb.weights, from_grey.weights) and from_rgb.gain == from_grey.gain


def test_colour_template_refuses_one_channel_patch() -> None:
    from libredgetpu_ros.errors import ImageError

    with PatternTracker(load_template("pattern_64x64_8x8_3ch"), backend="none") as tracker, \
            pytest.raises(ImageError, match="needs RGB"):
        tracker.set_template(np.arange(64, dtype=np.uint8).reshape(8, 8))


@pytest.mark.parametrize(("channels", "compiled"), [(1, True), (1, False), (3, True)])
def test_fit_of_a_frame_at_the_templates_size_is_the_general_path(channels, compiled, monkeypatch) -> None:
    """A frame already at the template's size skips the general path's checks (``fit_image``'s first
    branch; colour to luma in image_kernels' compiled pass, or OpenCV before it is warmed up): the same
    pixels, shape and dtype for writable, read-only and non-contiguous colour frames and for a grey frame
    on a colour template (refused as before)."""
    from libredgetpu_ros.errors import ImageError
    from libredgetpu_ros.robotics import image_kernels
    from libredgetpu_ros.robotics.image import fit_image, match_channels

    if compiled and not image_kernels.warm_up():
        pytest.skip("numba is not installed: OpenCV makes the grey frame")
    if not compiled:
        monkeypatch.setattr(image_kernels, "ready", lambda: False)

    rng = np.random.default_rng(4)
    frame = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    read_only = frame.copy()
    read_only.flags.writeable = False
    grey = frame[:, :, :1].copy()
    for image in (frame, read_only, np.asfortranarray(frame), frame[:, ::-1], grey):
        if channels == 3 and image.shape[2] == 1:
            with pytest.raises(ImageError, match="needs RGB"):
                fit_image(image, 64, 64, channels)
            continue
        got = fit_image(image, 64, 64, channels)
        general = np.ascontiguousarray(match_channels(image, channels))
        assert got.shape == (64, 64, channels) and got.dtype == np.uint8 and got.flags.c_contiguous
        assert np.array_equal(got, general)
        if channels == 1 and image.shape[2] == 3:
            assert np.array_equal(got[:, :, 0], cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY))


@pytest.mark.parametrize("compiled", [True, False])
def test_to_gray_is_match_channels_for_one_channel(compiled, monkeypatch) -> None:
    """``image.to_gray`` (the flow's frame: a uint8 RGB array straight to ``image.luma``, compiled or OpenCV)
    gives what ``match_channels(image, 1)`` gives, and refuses what it refuses, for every kind of frame."""
    from libredgetpu_ros.errors import ImageError
    from libredgetpu_ros.robotics import image_kernels
    from libredgetpu_ros.robotics.image import match_channels, to_gray

    if compiled and not image_kernels.warm_up():
        pytest.skip("numba is not installed: OpenCV makes the grey frame")
    if not compiled:
        monkeypatch.setattr(image_kernels, "ready", lambda: False)
    frame = np.random.default_rng(5).integers(0, 256, (48, 80, 3), dtype=np.uint8)
    read_only = frame.copy()
    read_only.flags.writeable = False
    for image in (frame, read_only, frame[:, ::-1], np.asfortranarray(frame), frame[None], frame[:, :, :1],
                  frame[:, :, 0], frame.astype(np.float64), frame.astype(np.int16)):
        got = to_gray(image, "frame")
        assert got.shape == (48, 80) and got.dtype == np.uint8
        assert np.array_equal(got, match_channels(image, 1, "frame")[:, :, 0])
        if image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8:
            assert np.array_equal(got, cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY))
    for bad in (frame[:, :, :2], frame[:0], np.full((4, 4, 3), np.nan), frame.astype(np.int16) + 200):
        with pytest.raises(ImageError):
            to_gray(bad, "frame")
