"""Ray-cast rendering of flat textured surfaces (rectangles, discs, endless planes) over a backdrop.

A :class:`Surface` is a flat patch at ``centre`` facing the camera (its normal -z) turned by ``yaw_deg`` about
the vertical; the texture spans ``width_m`` x ``height_m`` (a disc: the inscribed circle; ``shape="plane"``:
endless, the texture tiled with that period). The :class:`Backdrop` is a texture at infinity indexed by
direction (a 360-degree panorama: azimuth along its width, the same angle per texel vertically), so only
rotations move it. Each pixel shows the nearest surface its ray hits, else the backdrop.

Textures are sampled bilinearly from a pyramid level chosen per surface from its distance (mip-mapping, so
a far texture does not alias), and :func:`render` supersamples (``supersample`` x per side, then an area
average) for anti-aliased edges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.scenes.camera import PinholeCamera, rotation

SHAPES = ("rect", "disc", "plane")


def _pyramid(texture: np.ndarray, levels: int = 8) -> list[np.ndarray]:
    import cv2

    out = [np.ascontiguousarray(texture, dtype=np.float32)]
    while len(out) < levels and min(out[-1].shape[:2]) >= 4:
        out.append(cv2.pyrDown(out[-1]))
    return out


@dataclass(frozen=True, eq=False)
class Surface:
    """A textured flat surface (see the module docstring); ``velocity`` in m/s, world frame."""

    texture: np.ndarray
    centre: tuple[float, float, float]
    width_m: float
    height_m: float | None = None  # None: square texels (from the texture's aspect)
    shape: str = "rect"
    yaw_deg: float = 0.0
    velocity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    name: str = "surface"
    _levels: list[np.ndarray] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ConfigError(f"surface shape must be one of {SHAPES}, got {self.shape!r}")
        if not self.width_m > 0:
            raise ConfigError(f"surface width_m must be > 0, got {self.width_m}")
        tex = np.asarray(self.texture, dtype=np.float32)
        if tex.ndim not in (2, 3) or (tex.ndim == 3 and tex.shape[2] != 3):
            raise ConfigError(f"a texture is (H, W) or (H, W, 3), got {tex.shape}")
        if self.height_m is None:
            object.__setattr__(self, "height_m", self.width_m * tex.shape[0] / tex.shape[1])
        self._levels.extend(_pyramid(tex))

    def at(self, t: float) -> Surface:
        """This surface moved along its velocity for ``t`` seconds (the texture pyramid is shared)."""
        c = np.asarray(self.centre) + t * np.asarray(self.velocity)
        return replace(self, centre=tuple(float(v) for v in c), _levels=self._levels)

    @property
    def axes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(texture x axis, texture y axis, normal towards the camera) in the world frame."""
        r = rotation(self.yaw_deg)
        return r[:, 0], r[:, 1], -r[:, 2]

    def hit(self, origin: np.ndarray, rays: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ray parameter t, texture coordinates a and b in metres from the centre) per ray; t is inf where
        the ray misses."""
        ax, ay, normal = self.axes
        denom = rays @ normal
        with np.errstate(divide="ignore", invalid="ignore"):
            t = ((np.asarray(self.centre) - origin) @ normal) / denom
        t = np.where((denom < -1e-12) & (t > 1e-6), t, np.inf)
        finite = np.where(np.isfinite(t), t, 0.0)
        rel = origin + finite[..., None] * rays - np.asarray(self.centre)
        a, b = rel @ ax, rel @ ay
        if self.shape == "rect":
            t = np.where((np.abs(a) <= self.width_m / 2) & (np.abs(b) <= self.height_m / 2), t, np.inf)
        elif self.shape == "disc":
            t = np.where((a / self.width_m) ** 2 + (b / self.height_m) ** 2 <= 0.25, t, np.inf)
        return t, a, b

    def sample(self, a: np.ndarray, b: np.ndarray, texels_per_pixel: float) -> np.ndarray:
        import cv2

        level = int(np.clip(math.floor(math.log2(max(texels_per_pixel, 1.0))), 0, len(self._levels) - 1))
        tex = self._levels[level]
        th, tw = tex.shape[:2]
        x = (a / self.width_m + 0.5) * tw - 0.5
        y = (b / self.height_m + 0.5) * th - 0.5
        border = cv2.BORDER_WRAP if self.shape == "plane" else cv2.BORDER_REPLICATE
        if self.shape == "plane":
            x, y = np.mod(x, tw), np.mod(y, th)
        return cv2.remap(tex, x.astype(np.float32), y.astype(np.float32), cv2.INTER_LINEAR, borderMode=border)

    def texels_per_metre(self) -> float:
        return self._levels[0].shape[1] / self.width_m


@dataclass(frozen=True, eq=False)
class Backdrop:
    """A texture at infinity (see the module docstring); ``fov_deg``: the azimuth its width spans."""

    texture: np.ndarray
    fov_deg: float = 360.0
    _levels: list[np.ndarray] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.fov_deg <= 360:
            raise ConfigError(f"backdrop fov_deg must be in (0, 360], got {self.fov_deg}")
        self._levels.extend(_pyramid(np.asarray(self.texture, dtype=np.float32)))

    def sample(self, rays: np.ndarray, f_px: float) -> np.ndarray:
        import cv2

        tex0 = self._levels[0]
        per_rad = tex0.shape[1] / math.radians(self.fov_deg)  # texels per radian
        level = int(np.clip(math.floor(math.log2(max(per_rad / f_px, 1.0))), 0, len(self._levels) - 1))
        tex = self._levels[level]
        th, tw = tex.shape[:2]
        per_rad = tw / math.radians(self.fov_deg)
        azimuth = np.arctan2(rays[..., 0], rays[..., 2])
        elevation = np.arctan2(rays[..., 1], np.hypot(rays[..., 0], rays[..., 2]))
        x = azimuth * per_rad + tw / 2.0 - 0.5
        y = elevation * per_rad + th / 2.0 - 0.5
        if self.fov_deg == 360.0:
            x = np.mod(x, tw)
        return cv2.remap(tex, x.astype(np.float32), y.astype(np.float32), cv2.INTER_LINEAR,
                         borderMode=cv2.BORDER_WRAP if self.fov_deg == 360.0 else cv2.BORDER_REFLECT)


def _as_rgb(values: np.ndarray) -> np.ndarray:
    return values if values.ndim == 3 and values.shape[-1] == 3 else np.repeat(values[..., None], 3, axis=-1)


def render(camera: PinholeCamera, surfaces: list[Surface] | tuple[Surface, ...],
           backdrop: Backdrop | None = None, background: float = 0.0,
           supersample: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(float32 RGB image (H, W, 3) in [0, 255], index map (H, W) int16: which surface each pixel shows, -1
    for the backdrop) seen by ``camera``; ``background`` fills pixels with neither."""
    import cv2

    cam = camera.scaled(supersample) if supersample > 1 else camera
    rays = cam.rays()
    origin = np.asarray(cam.position, dtype=np.float64)
    h, w = cam.height, cam.width
    image = (_as_rgb(backdrop.sample(rays, cam.f_px)) if backdrop is not None
             else np.full((h, w, 3), background, np.float32))
    nearest = np.full((h, w), np.inf)
    index = np.full((h, w), -1, np.int16)
    for i, surface in enumerate(surfaces):
        t, a, b = surface.hit(origin, rays)
        mask = t < nearest
        if not mask.any():
            continue
        depth = float(np.median(t[mask]))
        values = _as_rgb(surface.sample(a, b, surface.texels_per_metre() * depth / cam.f_px))
        image[mask] = values[mask]
        nearest[mask] = t[mask]
        index[mask] = i
    if supersample > 1:
        image = cv2.resize(image, (camera.width, camera.height), interpolation=cv2.INTER_AREA)
        index = index[supersample // 2::supersample, supersample // 2::supersample]
    return image.astype(np.float32), index
