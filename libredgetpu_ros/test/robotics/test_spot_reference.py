"""The spot tracker's whole frame path (``SpotTracker.track``: the runner, the compiled check by table, the
decode by table, one result object) against references that share none of it, on a grid of rendered scenes.

The frame path was made faster several times (docs/robotics.md, spot); each time a one-off script compared
1,190 frames' results before and after the change, i.e. the code against its own previous version. Here
every result is pinned against independent references instead, so that a later speed-up that changes a
result fails a test:

- ``raw``: LiteRT running the template's uncompiled twin on the same template-size input;
- ``measured``: LibrEdgeTPU's decode of those int8 outputs, restated (test_spot.py's
  ``librEdgetpu_decode``), equal to the last bit;
- ``valid``, ``reason``, ``coverage``, ``mass``: ``SpotValidity`` on its NumPy path (``kernels=False``: no
  compiled kernel, no exp table, every cell summed);
- the offsets: ``measured`` when valid, none (and a zero servo error) otherwise.

The template-size input is the tracker's own ``fit`` (resize / grey conversion: not part of the speed-ups,
checked in test_spot.py). Scenes: 4 templates at 64x64 (bright, red, green, white) and red at 128x128, each
tracking every frame: uniform frames, textured walls without a target, red, green and white discs of radius
8 to 100 px on textured walls (320x240), two discs, noise frames.
"""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.robotics.spot import SpotTracker
from libredgetpu_ros.robotics.spot_validity import SpotValidity
from libredgetpu_ros.scenes import presets, textures

from .test_spot import librEdgetpu_decode

TRACKERS = {"bright": (64, "bright"), "red": (64, "red"), "green": (64, "green"), "white": (64, "white"),
            "red_128": (128, "red")}
DISCS = {"red": (230, 30, 30), "green": (30, 220, 30), "white": (255, 255, 255)}
RADII = (8, 15, 30, 60, 100)  # pixels in 320x240: small targets to a frame mostly covered


def _gray(texture: np.ndarray) -> np.ndarray:
    return np.repeat(texture[..., None], 3, axis=-1)


def _frames() -> list[np.ndarray]:
    """The scene grid: 76 frames, each tracked by every template (380 results)."""
    walls = [_gray(textures.natural(13, 256, contrast=0.5)), textures.natural(12, 256, color=True),
             textures.photo("grass", 256)]
    frames = [np.full((240, 320, 3), value, np.uint8)
              for value in ((0, 0, 0), (128, 128, 128), (255, 255, 255), (230, 30, 30), (30, 220, 30))]
    for w, wall in enumerate(walls):
        frames += [f.image for f in presets.spot_scene(None, 10, wall, frames=2, seed=w)]
    for c, colour in enumerate(DISCS.values()):
        for r, radius in enumerate(RADII):
            wall = walls[(c + r) % len(walls)]
            frames += [f.image for f in presets.spot_scene(
                colour, radius, wall, start_px=(-60 + 30 * r, 40 - 20 * c), velocity_px=(900, -300),
                frames=4, seed=10 * c + r)]
    two = presets.spot_scene(DISCS["red"], 12, walls[0], start_px=(-90, 0), frames=1)[0].image.copy()
    other = presets.spot_scene(DISCS["red"], 12, walls[0], start_px=(90, 0), frames=1)[0].image
    two[:, 160:] = other[:, 160:]
    frames.append(two)
    rng = np.random.default_rng(7)
    frames += [rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for _ in range(4)]
    return frames


class _Reference:
    """The independent references for one tracker's template."""

    def __init__(self, tracker: SpotTracker) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.tracker = tracker
        self.interpreter = Interpreter(model_path=str(tracker.template.twin_path))
        self.interpreter.allocate_tensors()
        self.input = self.interpreter.get_input_details()[0]["index"]
        self.output = self.interpreter.get_output_details()[0]["index"]
        self.check = SpotValidity(tracker.template, tracker.validity.limits, kernels=False)
        self.weights = None if tracker._filter is None else np.array(
            tracker.template.twin.buffer_data(tracker._filter)).reshape(-1)

    def raw(self, fitted: np.ndarray) -> tuple[int, int]:
        self.interpreter.set_tensor(self.input, fitted[None])
        self.interpreter.invoke()
        return tuple(int(v) for v in self.interpreter.get_tensor(self.output).reshape(-1))

    def measured(self, raw: tuple[int, int]) -> tuple[float, float]:
        spec, decoder = self.tracker.template.output, self.tracker.decoder
        device = (np.array(raw, np.int8).view(np.uint8) ^ 0x80).tobytes()  # what the Edge TPU returns
        return librEdgetpu_decode(device, spec.scale, spec.zero_point, decoder.temperature, decoder.y_offset)


def test_track_equals_independent_references_on_the_scene_grid() -> None:
    frames = _frames()
    reasons: dict[str, dict[str, int]] = {}
    for name, (size, variant) in TRACKERS.items():
        with SpotTracker.from_template(size, variant, backend="cpu") as tracker:
            ref = _Reference(tracker)
            counts = reasons.setdefault(name, {})
            for i, frame in enumerate(frames):
                result = tracker.track(frame)
                fitted = tracker.fit(frame)
                raw = ref.raw(fitted)
                assert result.raw == raw, (name, i)
                measured = ref.measured(raw)
                assert result.measured == measured, (name, i, result.measured, measured)
                evidence = ref.check.check(fitted, ref.weights, tracker.filter_scale)
                assert (result.valid, result.reason, result.coverage) == (
                    evidence.valid, evidence.reason, evidence.coverage), (name, i)
                assert result.mass == pytest.approx(evidence.mass, abs=1e-12), (name, i)
                if result.valid:
                    assert (result.x_offset, result.y_offset) == result.measured, (name, i)
                else:
                    assert (result.x_offset, result.y_offset) == (None, None), (name, i)
                    assert result.servo_error(3.0) == (0.0, 0.0), (name, i)
                counts[result.reason] = counts.get(result.reason, 0) + 1
    print(f"{len(frames)} frames, reasons per template: {reasons}")  # pytest -s
    # The grid reaches every branch of the check for the colour templates, and valid targets for all.
    assert all(counts.get("ok", 0) >= 8 for counts in reasons.values()), reasons
    seen = {reason for counts in reasons.values() for reason in counts}
    assert {"ok", "no_target", "target_too_large", "ambiguous"} <= seen, reasons
