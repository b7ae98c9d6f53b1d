"""The standard scenes the tests and benches share (each a few lines over ``sequence.render_sequence``).

- :func:`motion_scene`: a textured target straight ahead, ``kind`` = "approach" (the camera moves towards
  it), "recede", "lateral" (sideways) or "static"; with ``target_m`` a square of that size in front of a
  backdrop, without it an endless wall (the view is all target);
- :func:`pan_scene`: the camera turning in place in front of a 360-degree panorama (compass);
- :func:`spot_scene`: a coloured disc of a given pixel radius moving across a textured wall (spot tracker);
  ``color=None`` gives the same wall with no disc (a no-target scene).
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.scenes.camera import PinholeCamera
from libredgetpu_ros.scenes.render import Backdrop, Surface
from libredgetpu_ros.scenes.sequence import Effects, Frame, Motion, render_sequence
from libredgetpu_ros.scenes.textures import natural, solid

KINDS = {"approach": (0.0, 0.0, 1.0), "recede": (0.0, 0.0, -1.0), "lateral": (1.0, 0.0, 0.0),
         "static": (0.0, 0.0, 0.0)}


def motion_scene(kind: str, texture: np.ndarray, *, size: tuple[int, int] = (64, 64), hfov_deg: float = 60.0,
                 start_m: float = 5.0, speed: float = 1.0, fps: float = 30.0, frames: int = 135,
                 target_m: float | None = None, backdrop: np.ndarray | None = None, noise: float = 2.0,
                 seed: int = 0, texture_m: float = 2.0, gaps: dict[int, float] | None = None,
                 **effects: float) -> list[Frame]:
    """See the module docstring: the camera starts ``start_m`` from the target and moves at ``speed`` m/s
    (a receding scene starts at ``start_m`` and moves away); ``texture_m`` is the wall's texture period;
    ``gaps`` adds seconds to the stamps before the given frame indices (a stream that stalls)."""
    if kind not in KINDS:
        raise ConfigError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    camera = PinholeCamera.from_fov(size[0], size[1], hfov_deg)
    if target_m is None:
        target = Surface(texture, (0.0, 0.0, start_m), texture_m, shape="plane", name="wall")
    else:
        target = Surface(texture, (0.0, 0.0, start_m), target_m, name="target")
    back = None if target_m is None else Backdrop(natural(seed + 1000, 512) if backdrop is None else backdrop)
    velocity = tuple(speed * c for c in KINDS[kind])
    return render_sequence(camera, [target], frames, fps, Motion(velocity=velocity),
                           Effects(noise=noise, seed=seed, **effects), backdrop=back, gaps=gaps)


def pan_scene(panorama: np.ndarray, yaw_rate_deg: float, *, size: tuple[int, int] = (64, 64),
              hfov_deg: float = 60.0, fps: float = 30.0, frames: int = 30, noise: float = 0.0,
              seed: int = 0) -> list[Frame]:
    """Frames of a camera turning at ``yaw_rate_deg`` deg/s (left positive); truth ``yaw_deg`` per frame."""
    camera = PinholeCamera.from_fov(size[0], size[1], hfov_deg)
    probe = Surface(solid(0.0), (0.0, 0.0, 1e6), 1.0, name="probe")  # far, tiny: truth of the heading only
    return render_sequence(camera, [probe], frames, fps, Motion(yaw_rate=yaw_rate_deg),
                           Effects(noise=noise, seed=seed), backdrop=Backdrop(panorama))


def spot_scene(color: tuple[float, float, float] | None, radius_px: float, wall: np.ndarray, *,
               size: tuple[int, int] = (320, 240), hfov_deg: float = 60.0, distance_m: float = 2.0,
               start_px: tuple[float, float] = (0.0, 0.0), velocity_px: tuple[float, float] = (0.0, 0.0),
               fps: float = 30.0, frames: int = 10, noise: float = 2.0, seed: int = 0,
               **effects: float) -> list[Frame]:
    """A disc of ``radius_px`` pixels, ``color`` RGB, ``distance_m`` ahead at ``start_px`` pixels from the
    image centre, moving ``velocity_px`` px/s (in the image), 0.5 m in front of a ``wall`` texture."""
    camera = PinholeCamera.from_fov(size[0], size[1], hfov_deg)
    metres_per_px = distance_m / camera.f_px
    wall_surface = Surface(wall, (0.0, 0.0, distance_m + 0.5), 4.0, shape="plane", name="wall")
    if color is None:
        return render_sequence(camera, [wall_surface], frames, fps, effects=Effects(noise=noise, seed=seed,
                                                                                      **effects), target=None)
    centre = (start_px[0] * metres_per_px, start_px[1] * metres_per_px, distance_m)
    velocity = (velocity_px[0] * metres_per_px, velocity_px[1] * metres_per_px, 0.0)
    disc = Surface(solid(color), centre, 2 * radius_px * metres_per_px, shape="disc", velocity=velocity,
                   name="disc")
    return render_sequence(camera, [disc, wall_surface], frames, fps,
                           effects=Effects(noise=noise, seed=seed, **effects))
