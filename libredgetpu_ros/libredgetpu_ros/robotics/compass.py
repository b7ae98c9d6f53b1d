"""VisualCompass: yaw between frames from the horizontal optical flow, and the heading integrated over them.

A camera turning about its vertical axis moves the whole scene sideways in the image, but not uniformly:
a pinhole image moves ``f / cos²α`` pixels per radian at angle ``α`` off its axis (twice the centre's rate at
the edges of a 90° view). LibrEdgeTPU converts with one factor, ``fov / W`` degrees per pixel, which the
global correlation does not see: on a panned panorama at 90° its yaw read 12 % short (max error 1.97° per
pair, heading drift 9.7° over 100 frames). The default ``projection="pinhole"`` first remaps each
model-size frame to cylindrical (equal-angle) columns — column ``u`` shows the ray at ``(u - c) · fov / W`` —
so a turn is the same shift everywhere and ``vx · fov / W`` is exact (max error 0.53° per pair, see
docs/robotics.md). ``projection="linear"`` keeps LibrEdgeTPU's conversion on the raw frame.

Sign (REP 103, z up): positive yaw is a turn to the LEFT (counter-clockwise seen from above), which moves
the scene to the RIGHT in the image (positive ``vx``). LibrEdgeTPU's ``VisualCompass`` returns the same
number (``vx · deg_per_px``) but calls it a rightward turn; the number is what a ROS ``angular.z`` wants.

The heading is the sum of the valid yaws; a pair without an estimate (flat frame, ambiguous scene, first
frame, a gap in the stamps) adds nothing and is counted. Rates come from the frames' stamps, never the wall
clock, so a replayed bag gives what the live camera gave.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.robotics import compass_kernels
from libredgetpu_ros.robotics.base import RoboticsModule
from libredgetpu_ros.robotics.flow import FlowResult, OpticalFlow

__all__ = ["PROJECTIONS", "CompassResult", "VisualCompass", "cylindrical_maps", "fov_from_camera_info"]

PROJECTIONS: tuple[str, ...] = ("pinhole", "linear")


def fov_from_camera_info(width: int, fx: float) -> float:
    """Horizontal field of view in degrees of a pinhole camera ``width`` pixels wide with focal length
    ``fx`` pixels (``sensor_msgs/CameraInfo``: ``k[0]``)."""
    if width <= 0 or not fx > 0.0 or not math.isfinite(fx):
        raise ConfigError(f"camera info: width {width} and fx {fx} must be positive")
    return math.degrees(2.0 * math.atan(width / (2.0 * fx)))


@dataclass(frozen=True, slots=True)
class CompassResult:
    """One frame pair: ``yaw_deg`` / ``yaw_rad`` turned since the previous frame (0 when not ``valid``),
    ``yaw_rate`` in rad/s from the stamps (0 without stamps), the integrated ``heading_deg`` /
    ``heading_rad``, and the flow it came from."""

    yaw_deg: float
    yaw_rate: float
    heading_deg: float
    valid: bool
    flow: FlowResult

    @property
    def yaw_rad(self) -> float:
        return math.radians(self.yaw_deg)

    @property
    def heading_rad(self) -> float:
        return math.radians(self.heading_deg)

    def to_dict(self) -> dict[str, Any]:
        return {"yaw_deg": self.yaw_deg, "yaw_rate": self.yaw_rate, "heading_deg": self.heading_deg,
                "valid": self.valid, "reason": self.flow.reason, "vx": self.flow.vx, "vy": self.flow.vy,
                "confidence": self.flow.confidence}


def cylindrical_maps(width: int, height: int, fov_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """``cv2.remap`` maps taking a pinhole image of horizontal ``fov_deg`` to equal-angle columns (rows
    scaled by ``1 / cos`` of the column's angle, as on a cylinder around the camera)."""
    f = (width / 2.0) / math.tan(math.radians(fov_deg) / 2.0)
    cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
    angle = (np.arange(width) - cx) * math.radians(fov_deg) / width
    map_x = np.broadcast_to(cx + f * np.tan(angle), (height, width))
    map_y = cy + (np.arange(height)[:, None] - cy) / np.cos(angle)[None, :]
    return map_x.astype(np.float32), map_y.astype(np.float32)


class _CylinderWarp:
    """The pinhole projection's remap to equal-angle columns for frames of any size (maps made once per
    size): ``model(gray)`` (same dtype, the model's input), ``fine(gray)`` (float32, the refinement's frame)
    and ``both(gray)`` (the two of one frame in one pass); compiled (robotics/compass_kernels.py, OpenCV's
    numbers) or cv2.remap."""

    def __init__(self, fov_deg: float, compiled: bool) -> None:
        self.fov_deg, self.compiled = fov_deg, compiled
        self._maps: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._plans: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._none = np.empty((0, 0), np.uint8), np.empty((0, 0), np.float32)

    def model(self, gray: np.ndarray) -> np.ndarray:
        uint8 = gray.dtype == np.uint8
        rounded, exact = self._remap(gray, uint8, not uint8)
        return rounded if uint8 else exact

    def fine(self, gray: np.ndarray) -> np.ndarray:
        return self._remap(gray, False, True)[1]

    def both(self, gray: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(uint8 remap, float32 remap) of a uint8 frame."""
        return self._remap(gray, True, True)

    def _remap(self, gray: np.ndarray, rounded: bool, exact: bool) -> tuple[np.ndarray, np.ndarray]:
        h, w = gray.shape
        if self.compiled and gray.dtype.char in "Bf":
            plan = self._plans.get((w, h))
            if plan is None:
                plan = self._plans[(w, h)] = compass_kernels.plan(*cylindrical_maps(w, h, self.fov_deg), w, h)
            out = (np.empty((h, w), np.uint8) if rounded else self._none[0],
                   np.empty((h, w), np.float32) if exact else self._none[1])
            compass_kernels.remap(np.ascontiguousarray(gray), *plan, *out)
            return out
        if (w, h) not in self._maps:
            self._maps[(w, h)] = cylindrical_maps(w, h, self.fov_deg)
        maps = self._maps[(w, h)]
        return tuple(cv2.remap(gray.astype(dtype, copy=False), *maps, cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REPLICATE) if wanted else empty
                     for wanted, dtype, empty in ((rounded, np.uint8, self._none[0]),
                                                  (exact, np.float32, self._none[1])))


class VisualCompass(RoboticsModule):
    """Yaw and heading on an :class:`OpticalFlow` (which it owns: ``close()`` closes it, and under the
    ``pinhole`` projection it sets the flow's ``warp``)."""

    MODULE = "compass"

    def __init__(self, flow: OpticalFlow, fov_deg: float, projection: str = "pinhole") -> None:
        if projection not in PROJECTIONS:
            raise ConfigError(f"projection must be one of {', '.join(PROJECTIONS)}, got {projection!r}")
        self.flow = flow
        self.projection = projection
        self.set_fov(fov_deg)
        self.heading_deg = 0.0
        self.pairs = 0
        self.invalid = 0

    @classmethod
    def from_template(cls, template: str | Path, fov_deg: float, projection: str = "pinhole",
                      **flow_options: Any) -> VisualCompass:
        """A compass on a new :meth:`OpticalFlow.from_template` (``template``, ``backend``, ``device`` and the
        flow's options in ``flow_options``); the flow is closed again when the compass refuses ``fov_deg`` or
        ``projection``, so a bad setting leaves no device open."""
        flow = OpticalFlow.from_template(template, **flow_options)
        try:
            return cls(flow, fov_deg, projection)
        except BaseException:
            flow.close()
            raise

    def set_fov(self, fov_deg: float) -> None:
        """Change the horizontal field of view (degrees, in (0, 360]); e.g. from a CameraInfo."""
        limit = 179.0 if self.projection == "pinhole" else 360.0
        if not 0.0 < fov_deg <= limit:
            raise ConfigError(f"fov_deg must be in (0, {limit:g}] for the {self.projection} projection, "
                              f"got {fov_deg}")
        self.fov_deg = float(fov_deg)
        if self.projection == "pinhole":
            # one remap for the device's input and the refinement's frames: its maps are made once per size
            remap = _CylinderWarp(self.fov_deg, self.flow.kernels and compass_kernels.warm_up())
            self.flow.warp, self.flow.fine_warp, self.flow.warp_both = remap.model, remap.fine, remap.both
        else:
            # the linear projection is LibrEdgeTPU's conversion on the device's grid: a wide turn is not
            # one translation, which the refinement at the frame's resolution assumes
            self.flow.warp = self.flow.fine_warp = self.flow.warp_both = None
            self.flow.refine = False

    @property
    def deg_per_grid_step(self) -> float:
        """The yaw of one grid step: the finest turn the grid resolves before interpolation."""
        return self.fov_deg * self.flow.grid_step / self.flow.width

    def yaw_of(self, result: FlowResult) -> float:
        """Degrees turned for a flow result (pixels of any frame width: the grid steps are used)."""
        return result.vx_grid * self.deg_per_grid_step if result.valid else 0.0

    def reset(self, heading_deg: float = 0.0) -> None:
        """Start a new pair on the next frame and set the heading."""
        self.flow.reset()
        self.heading_deg = float(heading_deg)

    def step(self, image: np.ndarray, stamp: float | None = None) -> CompassResult:
        """Yaw since the previous frame and the updated heading (one backend call)."""
        return self._account(self.flow.step(image, stamp))

    def compute(self, frame_t: np.ndarray, frame_t1: np.ndarray) -> CompassResult:
        """Yaw from ``frame_t`` to ``frame_t1`` (added to the heading like a stream's pair)."""
        return self._account(self.flow.compute(frame_t, frame_t1))

    def _account(self, result: FlowResult) -> CompassResult:
        if result.reason != "first_frame":
            self.pairs += 1
            self.invalid += not result.valid
        yaw = self.yaw_of(result)
        self.heading_deg += yaw
        rate = math.radians(yaw) / result.dt if result.valid and result.dt > 0.0 else 0.0
        return CompassResult(yaw, rate, self.heading_deg, result.valid, result)

    # the flow's runner, template and resize are the compass's: close() closes the flow's runner
    @property
    def runner(self) -> Any:
        return self.flow.runner

    @property
    def template(self) -> Any:
        return self.flow.template

    @property
    def resize(self) -> bool:
        return self.flow.resize

    def details(self) -> dict[str, Any]:
        return dict(self.flow.details(), fov_deg=self.fov_deg, projection=self.projection,
                    heading_deg=self.heading_deg)
