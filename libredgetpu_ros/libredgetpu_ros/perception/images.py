"""Images in, RGB out: file loading and the pixel encodings ROS cameras publish."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from libredgetpu_ros.errors import ImageError
from libredgetpu_ros.imagefile import DEFAULT_MAX_PIXELS, read_image

# encoding -> (channels, OpenCV conversion code name to RGB or None)
_ENCODINGS: dict[str, tuple[int, str | None]] = {
    "rgb8": (3, None),
    "bgr8": (3, "COLOR_BGR2RGB"),
    "rgba8": (4, "COLOR_RGBA2RGB"),
    "bgra8": (4, "COLOR_BGRA2RGB"),
    "mono8": (1, "COLOR_GRAY2RGB"),
}
ENCODINGS: tuple[str, ...] = tuple(_ENCODINGS)


def load_image(path: Path | str, what: str = "image", max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """An image file as an ``HxWx3`` uint8 RGB array (grayscale files are expanded to three channels), read
    through ``imagefile`` (regular file, pixel budget checked from the header before decoding)."""
    import cv2

    return cv2.cvtColor(read_image(path, what, max_pixels), cv2.COLOR_BGR2RGB)


def to_rgb(array: np.ndarray, encoding: str) -> np.ndarray:
    """``array`` (``HxWxC`` or ``HxW`` uint8 in ``encoding``) as contiguous ``HxWx3`` RGB.

    rgb8 input is returned as is when already contiguous (no copy).
    """
    import cv2

    spec = _ENCODINGS.get(encoding)
    if spec is None:
        raise ImageError(f"unsupported image encoding {encoding!r} (supported: {', '.join(ENCODINGS)})")
    channels, conversion = spec
    if array.dtype != np.uint8:
        raise ImageError(f"{encoding} image must be uint8, got {array.dtype}")
    if array.ndim == 2 and channels == 1:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] != channels or array.shape[0] == 0 or array.shape[1] == 0:
        raise ImageError(f"{encoding} image must be HxWx{channels}, got shape {array.shape}")
    if conversion is None:
        return np.ascontiguousarray(array)
    return cv2.cvtColor(array, getattr(cv2, conversion))


def check_rgb(rgb: np.ndarray) -> np.ndarray:
    """Validate an RGB frame handed to the pipeline."""
    if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        shape = getattr(rgb, "shape", None)
        dtype = getattr(rgb, "dtype", type(rgb).__name__)
        raise ImageError(f"expected an HxWx3 uint8 RGB image, got shape {shape} dtype {dtype}")
    if rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise ImageError(f"empty image (shape {rgb.shape})")
    return rgb
