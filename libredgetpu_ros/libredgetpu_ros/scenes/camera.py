"""A pinhole camera: focal length in pixels, image size, pose (position, yaw / pitch / roll).

Frames follow the camera optical convention: x right, y down, z forward. The world frame is the camera's at
the start (camera at the origin looking along +z, y down). Yaw turns the camera about the vertical axis,
positive to the LEFT (counter-clockwise seen from above, REP 103), so a scene at rest moves right in the
image; pitch is positive looking up, roll positive clockwise in the image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from libredgetpu_ros.errors import ConfigError


def rotation(yaw_deg: float = 0.0, pitch_deg: float = 0.0, roll_deg: float = 0.0) -> np.ndarray:
    """Camera -> world rotation (3x3) for the angles above."""
    y, p, r = (math.radians(a) for a in (yaw_deg, pitch_deg, roll_deg))
    ry = np.array([[math.cos(-y), 0, math.sin(-y)], [0, 1, 0], [-math.sin(-y), 0, math.cos(-y)]])
    rx = np.array([[1, 0, 0], [0, math.cos(p), -math.sin(p)], [0, math.sin(p), math.cos(p)]])
    rz = np.array([[math.cos(r), -math.sin(r), 0], [math.sin(r), math.cos(r), 0], [0, 0, 1]])
    return ry @ rx @ rz


@dataclass(frozen=True)
class PinholeCamera:
    """``width`` x ``height`` pixels, focal length ``f_px`` (give ``hfov_deg`` instead with
    :meth:`from_fov`), principal point at the image centre, at ``position`` (metres, world frame)."""

    width: int
    height: int
    f_px: float
    position: tuple[float, float, float] = (0.0, 0.0, 0.0)
    yaw_deg: float = 0.0
    pitch_deg: float = 0.0
    roll_deg: float = 0.0

    def __post_init__(self) -> None:
        if self.width < 2 or self.height < 2 or not (self.f_px > 0 and math.isfinite(self.f_px)):
            raise ConfigError(f"camera needs width, height >= 2 and f_px > 0, got "
                              f"{self.width}x{self.height}, f {self.f_px}")

    @classmethod
    def from_fov(cls, width: int, height: int, hfov_deg: float = 60.0, **pose: object) -> PinholeCamera:
        if not 0 < hfov_deg < 180:
            raise ConfigError(f"hfov_deg must be in (0, 180), got {hfov_deg}")
        return cls(width, height, (width / 2.0) / math.tan(math.radians(hfov_deg) / 2.0), **pose)

    @property
    def hfov_deg(self) -> float:
        return math.degrees(2.0 * math.atan(self.width / 2.0 / self.f_px))

    @property
    def centre(self) -> tuple[float, float]:
        """Principal point (cx, cy) in pixels (pixel centres at integers)."""
        return (self.width - 1) / 2.0, (self.height - 1) / 2.0

    @property
    def R(self) -> np.ndarray:  # noqa: N802 - the usual name of a rotation matrix
        return rotation(self.yaw_deg, self.pitch_deg, self.roll_deg)

    def moved(self, position: tuple[float, float, float] | np.ndarray,
              yaw_deg: float | None = None) -> PinholeCamera:
        """The same camera at another position (and yaw)."""
        pos = tuple(float(v) for v in position)
        return replace(self, position=pos, yaw_deg=self.yaw_deg if yaw_deg is None else float(yaw_deg))

    def scaled(self, factor: int) -> PinholeCamera:
        """The camera rendering ``factor`` x more pixels per side (same field of view): supersampling."""
        return replace(self, width=self.width * factor, height=self.height * factor, f_px=self.f_px * factor)

    def rays(self) -> np.ndarray:
        """World-frame ray directions (H, W, 3) through every pixel centre (z component 1 in the camera)."""
        cx, cy = self.centre
        u = (np.arange(self.width, dtype=np.float64) - cx) / self.f_px
        v = (np.arange(self.height, dtype=np.float64) - cy) / self.f_px
        cam = np.empty((self.height, self.width, 3))
        cam[..., 0], cam[..., 1], cam[..., 2] = u[None, :], v[:, None], 1.0
        return cam @ self.R.T

    def to_camera(self, point: np.ndarray) -> np.ndarray:
        """World point(s) (..., 3) in the camera frame."""
        return (np.asarray(point, dtype=np.float64) - np.asarray(self.position)) @ self.R

    def project(self, point: np.ndarray) -> tuple[float, float, float]:
        """(u, v, depth) of one world point; u, v are NaN behind the camera."""
        x, y, z = self.to_camera(point)
        if z <= 0:
            return math.nan, math.nan, float(z)
        cx, cy = self.centre
        return float(self.f_px * x / z + cx), float(self.f_px * y / z + cy), float(z)
