"""Frame sequences with their truth: motion of the camera and the surfaces, sensor effects, stamps.

:func:`render_sequence` renders ``frames`` frames at ``fps`` (stamps from ``start_s``; ``gaps`` adds seconds
before given frame indices, e.g. a dropped stream) of a scene whose camera moves with :class:`Motion` and
whose surfaces move with their own ``velocity``; :class:`Effects` adds lighting changes, blur and noise
(seeded: the same call gives the same frames). Each :class:`Frame` holds the uint8 RGB image and the
:class:`Truth` of the target surface (``target``: an index into the surfaces): where its centre projects,
its depth and distance, its time to contact, how much of the frame it covers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.scenes.camera import PinholeCamera
from libredgetpu_ros.scenes.render import Backdrop, Surface, render


@dataclass(frozen=True)
class Motion:
    """Camera motion: ``velocity`` m/s (world frame: x right, y down, z forward at the start) and
    ``yaw_rate`` deg/s (positive: turning left)."""

    velocity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    yaw_rate: float = 0.0


@dataclass(frozen=True)
class Effects:
    """Sensor and light: per-frame ``gain`` / ``offset`` on grey levels, ``flicker`` (relative gain jitter,
    uniform +-flicker per frame), Gaussian ``blur`` (sigma, px), then Gaussian ``noise`` (sigma, grey levels);
    ``seed`` fixes the random parts."""

    noise: float = 0.0
    blur: float = 0.0
    gain: float = 1.0
    offset: float = 0.0
    flicker: float = 0.0
    seed: int = 0

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import cv2

        gain = self.gain * (1.0 + rng.uniform(-self.flicker, self.flicker)) if self.flicker else self.gain
        out = image * np.float32(gain) + np.float32(self.offset)
        if self.blur > 0:
            out = cv2.GaussianBlur(out, (0, 0), self.blur)
        if self.noise > 0:
            out = out + rng.normal(0.0, self.noise, size=out.shape).astype(np.float32)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class Truth:
    """The target at one frame: ``u``, ``v`` its centre in pixels (NaN behind the camera), ``offset`` the
    same in [-1, 1] from the image centre (x right, y down: the trackers' convention), ``depth`` along the
    optical axis and ``distance`` (m), ``ttc_s`` depth / closing speed (inf when not closing), ``radius_px``
    its half-width in pixels, ``coverage`` the fraction of pixels showing it, ``visible`` (centre inside the
    image and in front), ``yaw_deg`` of the camera."""

    u: float
    v: float
    offset: tuple[float, float]
    depth: float
    distance: float
    ttc_s: float
    radius_px: float
    coverage: float
    visible: bool
    yaw_deg: float


@dataclass(frozen=True)
class Frame:
    image: np.ndarray  # uint8 (H, W, 3) RGB
    stamp_s: float
    index: int
    truth: Truth | None  # None when the scene has no target

    def gray(self) -> np.ndarray:
        import cv2

        return cv2.cvtColor(self.image, cv2.COLOR_RGB2GRAY)


def truth_of(camera: PinholeCamera, target: Surface, camera_velocity: np.ndarray,
             index_map: np.ndarray, target_index: int) -> Truth:
    u, v, depth = camera.project(np.asarray(target.centre))
    forward = camera.R[:, 2]
    closing = -float(np.dot(np.asarray(target.velocity) - camera_velocity, forward))
    ttc = depth / closing if closing > 1e-12 and depth > 0 else math.inf
    cx, cy = camera.centre
    offset = ((u - cx) / cx, (v - cy) / cy) if depth > 0 else (math.nan, math.nan)
    visible = depth > 0 and 0 <= u <= camera.width - 1 and 0 <= v <= camera.height - 1
    radius = camera.f_px * target.width_m / 2 / depth if depth > 0 else math.nan
    distance = float(np.linalg.norm(np.asarray(target.centre) - np.asarray(camera.position)))
    return Truth(u, v, offset, depth, distance, ttc, radius, float(np.mean(index_map == target_index)),
                 visible, camera.yaw_deg)


def render_sequence(camera: PinholeCamera, surfaces: Sequence[Surface], frames: int, fps: float = 30.0,
                    motion: Motion = Motion(), effects: Effects = Effects(), backdrop: Backdrop | None = None,
                    background: float = 0.0, target: int | None = 0, start_s: float = 0.0,
                    gaps: Mapping[int, float] | None = None, supersample: int = 2) -> list[Frame]:
    """The frames (see the module docstring); the camera starts at ``camera``'s pose."""
    if frames < 1 or not fps > 0:
        raise ConfigError(f"need frames >= 1 and fps > 0, got {frames}, {fps}")
    if target is not None and not 0 <= target < len(surfaces):
        raise ConfigError(f"target {target} is not one of the {len(surfaces)} surfaces")
    rng = np.random.default_rng(effects.seed)
    velocity = np.asarray(motion.velocity, dtype=np.float64)
    start = np.asarray(camera.position, dtype=np.float64)
    out, stamp, extra = [], start_s, 0.0
    for i in range(frames):
        extra += float((gaps or {}).get(i, 0.0))
        t = i / fps
        stamp = start_s + t + extra
        cam = camera.moved(start + velocity * t, camera.yaw_deg + motion.yaw_rate * t)
        moved = [s.at(t) for s in surfaces]
        image, index = render(cam, moved, backdrop, background, supersample)
        truth = None if target is None else truth_of(cam, moved[target], velocity, index, target)
        out.append(Frame(effects.apply(image, rng), stamp, i, truth))
    return out
