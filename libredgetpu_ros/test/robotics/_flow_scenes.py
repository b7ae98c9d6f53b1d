"""Scenes with known motion for the optical-flow and compass tests and the flow bench.

- ``texture(seed)``: band-limited noise (Gaussian-blurred), a synthetic texture of known contrast;
- ``photo(name)``: a fixture photo (../shared/fixtures/images), square-cropped, gray;
- ``shifted_pair(scene, dx, dy)``: two ``n×n`` crops from the scene's centre, the second showing the content
  moved by ``(+dx, +dy)`` pixels (bilinear, so sub-pixel shifts are real interpolations);
- ``panorama_view(strip, yaw_deg, fov_deg)``: what a pinhole camera of that horizontal FOV sees of a
  cylindrical 360° panorama strip when turned by ``yaw_deg`` (positive yaw = turned left, counter-clockwise
  seen from above, REP 103: the scene moves right in the image);
- ``libredgetpu_flow(...)``: LibrEdgeTPU's own ``OpticalFlow`` class from a checkout (no device needed:
  its constructor only parses the model), or None when no checkout is found.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
from libredgetpu_ros.fixtures import fixture

# Where LibrEdgeTPU's checkout is found and imported: one module for the benches and these tests.
_BENCH = str(Path(__file__).resolve().parents[3] / "bench")
if _BENCH not in sys.path:
    sys.path.append(_BENCH)
import _libredgetpu as _checkout  # noqa: E402

LIBREDGETPU_ENV = _checkout.ENV
MARKER = "optical_flow_module.py"


def texture(seed: int, size: int = 160, blur: float = 2.0, contrast: float = 1.0) -> np.ndarray:
    """``size×size`` float32 texture, mean 128, standard deviation ``50·contrast`` grey levels."""
    noise = np.random.default_rng(seed).normal(size=(size, size)).astype(np.float32)
    noise = cv2.GaussianBlur(noise, (0, 0), blur)
    noise = (noise - noise.mean()) / noise.std()
    return np.clip(128.0 + 50.0 * contrast * noise, 0, 255).astype(np.float32)


def photo(name: str, size: int = 160) -> np.ndarray:
    """A fixture photo as a ``size×size`` float32 gray image (centre square, area resize)."""
    gray = cv2.imread(str(fixture(f"images/{name}")), cv2.IMREAD_GRAYSCALE)
    h, w = gray.shape
    s = min(h, w)
    square = gray[(h - s) // 2:(h - s) // 2 + s, (w - s) // 2:(w - s) // 2 + s]
    return cv2.resize(square, (size, size), interpolation=cv2.INTER_AREA).astype(np.float32)


def _to_u8(image: np.ndarray, contrast: float = 1.0) -> np.ndarray:
    return np.clip(np.rint(128.0 + (image - 128.0) * contrast), 0, 255).astype(np.uint8)


def shifted_pair(scene: np.ndarray, dx: float, dy: float, n: int = 64,
                 contrast: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(frame t, frame t+1): centre crops of ``scene``, the second with the content moved by ``(dx, dy)``;
    ``contrast`` scales both around grey 128."""
    c = scene.shape[0] // 2
    move = np.float32([[1, 0, dx], [0, 1, dy]])
    moved = cv2.warpAffine(scene, move, scene.shape[::-1], flags=cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REFLECT)
    crop = np.s_[c - n // 2:c + n // 2, c - n // 2:c + n // 2]
    return _to_u8(scene[crop], contrast), _to_u8(moved[crop], contrast)


def panorama_strip(fov_deg: float, n: int = 64, seed: int = 3) -> np.ndarray:
    """A 360° strip (columns = azimuth) sampled like the ``n``-pixel view of ``fov_deg``: one strip pixel per
    view pixel at the view's centre, rows for the view's height at its edges. Fixture photos side by side
    with a texture mixed in, so that every direction has detail."""
    f = (n / 2.0) / np.tan(np.radians(fov_deg) / 2.0)
    width = round(2 * np.pi * f)
    height = int(np.ceil(n * 1.2))
    tex = texture(seed, size=max(width, height))[:height, :width]
    tiles = np.concatenate([photo(name, size=height) for name in
                            ("grace_hopper.bmp", "cat.bmp", "test_couple.jpg")], axis=1)
    tiled = np.tile(tiles, (1, -(-width // tiles.shape[1])))[:, :width]
    return (0.6 * tiled + 0.4 * tex).astype(np.float32)


def panorama_view(strip: np.ndarray, yaw_deg: float, fov_deg: float, n: int = 64) -> np.ndarray:
    """The ``n×n`` pinhole view of the cylindrical ``strip`` with the camera turned by ``yaw_deg``.

    Column ``u`` looks at azimuth ``-yaw + atan((u - c) / f)`` (a left turn brings what was on the left into
    view: the content moves right); rows are scaled by ``1 / cos`` of the column's angle, as on a cylinder."""
    height, width = strip.shape
    f = (n / 2.0) / np.tan(np.radians(fov_deg) / 2.0)
    centre = (n - 1) / 2.0
    u = np.arange(n, dtype=np.float64) - centre
    angle = np.arctan(u / f)
    azimuth = np.degrees(angle) - yaw_deg
    map_x = np.mod(azimuth * width / 360.0 + width / 2.0, width)
    px_per_rad = width / (2 * np.pi)
    v = np.arange(n, dtype=np.float64)[:, None] - centre
    map_y = height / 2.0 + v * np.cos(angle)[None, :] * px_per_rad / f
    map_x = np.broadcast_to(map_x[None, :], (n, n))
    wrapped = np.concatenate([strip, strip[:, :2]], axis=1)  # bilinear across the 360° seam
    view = cv2.remap(wrapped, map_x.astype(np.float32), map_y.astype(np.float32), cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_REFLECT)
    return _to_u8(view)


def libredgetpu_root() -> Path | None:
    """The LibrEdgeTPU checkout with its optical flow module (bench/_libredgetpu.py), or None."""
    return _checkout.checkout(MARKER)


def libredgetpu_flow(model: Path, search_range: int = 4, temperature: float = 0.1, pool_factor: int = 4):
    """LibrEdgeTPU's ``OpticalFlow`` on ``model`` (its sidecar beside it), or None without a checkout."""
    if _checkout.import_package(MARKER) is None:
        return None
    from libredgetpu.optical_flow_module import OpticalFlow as TheirFlow

    sidecar = model.with_name(model.name.replace(".tflite", ".json"))
    return TheirFlow(str(model), metadata_path=str(sidecar), search_range=search_range,
                     temperature=temperature, pool_factor=pool_factor)


def camera_sequence(name: str, vx: float, vy: float, frames: int = 4, size: tuple[int, int] = (320, 240),
                    blur: bool = False, noise: float = 1.0, seed: int = 0) -> list[np.ndarray]:
    """Camera-sized uint8 frames of a scene-kit photo (``libredgetpu_ros.scenes.textures``) or texture array
    moving ``(vx, vy)`` pixels per frame (bilinear, so sub-pixel motion is real), with sensor noise and
    optionally the motion's own blur (a line kernel as long as the motion)."""
    from libredgetpu_ros.scenes import textures

    w, h = size
    image = textures.photo(name, gray=True) if isinstance(name, str) else name
    image = np.asarray(image, np.float32)
    big = cv2.resize(image, (2 * w, 2 * h), interpolation=cv2.INTER_AREA if image.shape[1] > 2 * w
                     else cv2.INTER_CUBIC)
    rng = np.random.default_rng(seed)
    x0, y0 = big.shape[1] / 2 - w / 2, big.shape[0] / 2 - h / 2
    out = []
    for k in range(frames):
        move = np.float32([[1, 0, -x0 + k * vx], [0, 1, -y0 + k * vy]])
        frame = cv2.warpAffine(big, move, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
        if blur:
            length = round(max(abs(vx), abs(vy))) | 1
            kernel = np.zeros((length, length), np.float32)
            steps = np.linspace(-0.5, 0.5, length)
            for s in steps:  # a line along the motion
                kernel[round(length // 2 + s * (length - 1) * vy / max(abs(vx), abs(vy))),
                       round(length // 2 + s * (length - 1) * vx / max(abs(vx), abs(vy)))] = 1.0
            frame = cv2.filter2D(frame, -1, kernel / kernel.sum(), borderType=cv2.BORDER_REFLECT)
        frame = frame + rng.normal(0.0, noise, frame.shape).astype(np.float32)
        out.append(np.clip(np.rint(frame), 0, 255).astype(np.uint8))
    return out
