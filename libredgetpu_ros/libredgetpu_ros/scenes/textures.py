"""Textures for the scenes: procedural ones made from a seed, and photos with a clear licence.

Every texture is a float32 array in grey levels [0, 255], (H, W) or (H, W, 3) RGB.

Photos come from two places, both read-only: the shared fixtures' ``images/`` (google-coral test data, see
fixtures/PROVENANCE.md) and the sample images shipped inside the scikit-image wheel (pinned in
requirements.lock.txt; only the files are read, skimage is never imported). Their licences are listed in
:data:`PHOTO_LICENCES`. The photos are split in two sets: :data:`TUNING_PHOTOS`, which the modules' thresholds
and defaults may be tuned on, and :data:`HELD_OUT_PHOTOS`, which no tuning looks at: tests and benches report
on them separately (docs/scenes.md).
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np

from libredgetpu_ros.errors import ConfigError, InputError

FIXTURE_PHOTOS = {"grace_hopper": "images/grace_hopper.bmp", "cat": "images/cat.bmp",
                  "test_couple": "images/test_couple.jpg"}
SKIMAGE_PHOTOS = {"astronaut": "astronaut.png", "coffee": "coffee.png", "brick": "brick.png",
                  "grass": "grass.png", "camera": "camera.png", "chelsea": "chelsea.png",
                  "rocket": "rocket.jpg", "coins": "coins.png", "gravel": "gravel.png",
                  "retina": "retina.jpg"}
PHOTO_LICENCES = {
    "grace_hopper": "google-coral/test_data (Apache-2.0 repository)",
    "cat": "google-coral/test_data (Apache-2.0 repository)",
    "test_couple": "google-coral/project-posenet test_data (Apache-2.0 repository)",
    "astronaut": "NASA, public domain (scikit-image data)",
    "coffee": "CC0, Rachel Michetti (scikit-image data)",
    "brick": "CC0, CC0Textures Bricks25 (scikit-image data)",
    "grass": "CC0, CC0Textures (scikit-image data)",
    "camera": "CC0, Lav Varshney (scikit-image data)",
    "chelsea": "CC0, Stefan van der Walt (scikit-image data)",
    "rocket": "SpaceX, public domain (scikit-image data)",
    "coins": "no known copyright restrictions (scikit-image data)",
    "gravel": "CC0, CC0Textures Gravel04 (scikit-image data)",
    "retina": "CC0 1.0, Mikael Häggström (scikit-image data)",
}
TUNING_PHOTOS = ("grace_hopper", "cat", "test_couple", "astronaut", "coffee", "brick", "grass")
HELD_OUT_PHOTOS = ("camera", "chelsea", "rocket", "coins", "gravel", "retina")


def natural(seed: int, size: int = 256, beta: float = 2.0, contrast: float = 1.0,
            color: bool = False) -> np.ndarray:
    """Noise with a 1/f^beta power spectrum (beta = 2: the statistics of natural images, which look alike at
    every scale), mean 128, standard deviation 50 * contrast, periodic (tiles without seams)."""
    rng = np.random.default_rng(seed)
    fy = np.fft.fftfreq(size)[:, None]
    fx = np.fft.rfftfreq(size)[None, :]
    radius = np.hypot(fx, fy)
    radius[0, 0] = 1.0
    amplitude = radius ** (-beta / 2.0)
    amplitude[0, 0] = 0.0
    channels = []
    for _ in range(3 if color else 1):
        spectrum = amplitude * np.exp(2j * np.pi * rng.random(amplitude.shape))
        field = np.fft.irfft2(spectrum, s=(size, size))
        channels.append((field - field.mean()) / field.std())
    stack = np.stack(channels, axis=-1)
    if color:  # correlated channels, as in photos: a shared luminance plus some chroma
        stack = 0.8 * stack[..., :1] + 0.45 * stack
        stack /= stack.std()
    out = np.clip(128.0 + 50.0 * contrast * stack, 0, 255).astype(np.float32)
    return out if color else out[..., 0]


def blobs(seed: int, size: int = 256, blur: float = 2.0, contrast: float = 1.0) -> np.ndarray:
    """Band-limited noise (white noise blurred by ``blur`` texels), mean 128, std 50 * contrast."""
    import cv2

    noise = np.random.default_rng(seed).normal(size=(size, size)).astype(np.float32)
    noise = cv2.GaussianBlur(noise, (0, 0), blur, borderType=cv2.BORDER_REFLECT)
    noise = (noise - noise.mean()) / noise.std()
    return np.clip(128.0 + 50.0 * contrast * noise, 0, 255).astype(np.float32)


def checkerboard(squares: int = 8, size: int = 256, low: float = 40.0, high: float = 215.0) -> np.ndarray:
    cells = (np.arange(size) * squares // size)
    return np.where((cells[:, None] + cells[None, :]) % 2 == 0, high, low).astype(np.float32)


def solid(rgb: tuple[float, float, float] | float) -> np.ndarray:
    """A one-texel texture of one colour (RGB triple) or grey level."""
    values = np.atleast_1d(np.asarray(rgb, dtype=np.float32))
    if values.size not in (1, 3) or not np.all((values >= 0) & (values <= 255)):
        raise ConfigError(f"a solid colour is a grey level or an RGB triple in [0, 255], got {rgb}")
    return values.reshape(1, 1, -1) if values.size == 3 else values.reshape(1, 1)


def _skimage_data() -> Path | None:
    spec = importlib.util.find_spec("skimage")  # finds the package without importing it (or scipy)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def photo_path(name: str) -> Path:
    """Where photo ``name`` is (a fixture or a scikit-image sample); InputError when it is not installed."""
    if name in FIXTURE_PHOTOS:
        from libredgetpu_ros.fixtures import fixture

        return fixture(FIXTURE_PHOTOS[name])
    if name not in SKIMAGE_PHOTOS:
        raise ConfigError(f"unknown photo {name!r}; known: {', '.join(sorted(PHOTO_LICENCES))}")
    data = _skimage_data()
    if data is None or not (data / SKIMAGE_PHOTOS[name]).is_file():
        raise InputError(f"photo {name!r} is a scikit-image sample and scikit-image is not installed "
                         f"(requirements.lock.txt pins it)")
    return data / SKIMAGE_PHOTOS[name]


@lru_cache(maxsize=32)
def _read(name: str) -> np.ndarray:
    import cv2

    from libredgetpu_ros.imagefile import read_image  # the one image reader (regular file, pixel budget)

    image = read_image(photo_path(name), f"photo {name!r}")
    rgb = cv2.cvtColor(image, cv2.COLOR_BGR2RGB).astype(np.float32)
    rgb.setflags(write=False)
    return rgb


def photo(name: str, size: int | None = None, gray: bool = False) -> np.ndarray:
    """Photo ``name`` as float32 RGB (or grey, BT.601), centre-cropped square and area-resized to ``size``
    when given."""
    import cv2

    image = _read(name)
    if size is not None:
        h, w = image.shape[:2]
        s = min(h, w)
        image = image[(h - s) // 2:(h - s) // 2 + s, (w - s) // 2:(w - s) // 2 + s]
        shrink = cv2.INTER_AREA if s >= size else cv2.INTER_LINEAR
        image = cv2.resize(image, (size, size), interpolation=shrink)
    if gray:
        image = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)
    return np.ascontiguousarray(image, dtype=np.float32)
