"""sensor_msgs Image / CompressedImage <-> NumPy, without cv_bridge (not available as a wheel).

Raw images are viewed in place (``np.frombuffer``): rows padded by ``step`` become a strided view, and only
the channel reorder to RGB copies. Every rejection is a ``BadImage`` carrying a short ``cause`` so the node
can count causes in diagnostics and log each cause once.

Frames over a pixel budget (``max_pixels``) are refused as ``too_large`` before any pixel is touched: for a
compressed frame the size comes from its header (``imagefile``, the reader of every user image: PNG IHDR,
JPEG SOF read by Pillow without decoding), so a 2.6 MB PNG claiming 30000x30000 pixels never reaches the
decoder (it took 16 s and 5.3 GB to decode). Only PNG and JPEG (what image_transport's compressed plugin
writes) are decoded, and a PNG's chunk lengths must fit its data before OpenCV sees it.
"""

from __future__ import annotations

import numpy as np
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from libredgetpu_ros.errors import ImageError
from libredgetpu_ros.imagefile import (  # noqa: F401  (DEFAULT_MAX_PIXELS, MAX_PIXEL_BUDGET: the node's)
    DEFAULT_MAX_PIXELS,
    FRAME_FORMATS,
    MAX_PIXEL_BUDGET,
    BadImage,
    check_budget,
    decode,
    header_size,
)

# encoding -> (channels, index of R,G,B in a pixel); mono8 is broadcast to three channels.
_RAW_ENCODINGS: dict[str, tuple[int, tuple[int, int, int]]] = {
    "rgb8": (3, (0, 1, 2)),
    "bgr8": (3, (2, 1, 0)),
    "rgba8": (4, (0, 1, 2)),
    "bgra8": (4, (2, 1, 0)),
    "mono8": (1, (0, 0, 0)),
    "8UC1": (1, (0, 0, 0)),
    "8UC3": (3, (2, 1, 0)),  # OpenCV's default channel order
}
SUPPORTED_ENCODINGS = tuple(_RAW_ENCODINGS)
_BUDGET_HINT = " (parameter max_image_pixels)"


def _check_budget(width: int, height: int, max_pixels: int, what: str) -> None:
    check_budget(width, height, max_pixels, what, _BUDGET_HINT)


def image_to_rgb(msg: Image, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """HxWx3 uint8 RGB from a raw ``sensor_msgs/Image`` (rgb8, bgr8, rgba8, bgra8, mono8)."""
    enc = _RAW_ENCODINGS.get(msg.encoding)
    if enc is None:
        raise BadImage("encoding", f"unsupported encoding {msg.encoding!r} (supported: "
                                   f"{', '.join(SUPPORTED_ENCODINGS)})")
    channels, order = enc
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height == 0 or width == 0 or len(msg.data) == 0:
        raise BadImage("empty", f"empty image ({width}x{height}, {len(msg.data)} bytes)")
    _check_budget(width, height, max_pixels, f"{msg.encoding} image")
    row_bytes = width * channels
    if step < row_bytes:
        raise BadImage("step", f"step {step} is smaller than width*channels = {row_bytes} ({msg.encoding})")
    if len(msg.data) < step * (height - 1) + row_bytes:
        raise BadImage("size", f"data has {len(msg.data)} bytes, {width}x{height} {msg.encoding} with step "
                               f"{step} needs {step * height}")
    if channels == 3 and order == (0, 1, 2) and step == row_bytes:  # the common case: a plain reshape,
        # ~5 us cheaper per frame than as_strided; read-only like the strided view
        pixels = np.frombuffer(msg.data, dtype=np.uint8, count=height * row_bytes).reshape(height, width, 3)
        pixels.flags.writeable = False
        return pixels
    flat = np.frombuffer(msg.data, dtype=np.uint8)
    # Strided view: padding at the end of each row is skipped without a copy.
    pixels = np.lib.stride_tricks.as_strided(flat, shape=(height, width, channels),
                                             strides=(step, channels, 1), writeable=False)
    if channels == 1:
        return np.repeat(pixels, 3, axis=2)
    if order == (0, 1, 2) and channels == 3:
        return pixels if step == row_bytes else np.ascontiguousarray(pixels)
    return np.ascontiguousarray(pixels[:, :, list(order)])


def compressed_size(data: bytes | memoryview, fmt: str = "") -> tuple[int, int]:
    """(width, height) from a PNG or JPEG frame's header, without decoding pixels; BadImage if unreadable
    or another format (only these two reach a decoder: fewer decoders, fewer ways to be attacked)."""
    _, width, height = header_size(data, f"compressed image (format {fmt!r})", FRAME_FORMATS)
    return width, height


def compressed_to_rgb(msg: CompressedImage, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """HxWx3 uint8 RGB from a ``sensor_msgs/CompressedImage`` (jpeg or png); the header's size is checked
    against ``max_pixels`` before decoding (``imagefile.decode``, the reader of every user image)."""
    import cv2

    what = f"compressed image (format {msg.format!r})"
    bgr = decode(msg.data, what, max_pixels, FRAME_FORMATS, _BUDGET_HINT)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def to_rgb(msg: Image | CompressedImage, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    if isinstance(msg, CompressedImage):
        return compressed_to_rgb(msg, max_pixels)
    return image_to_rgb(msg, max_pixels)


def rgb_to_image(rgb: np.ndarray, header: Header, encoding: str = "rgb8") -> Image:
    """Wrap an HxWx3 (rgb8) or HxW (mono8) uint8 array with one ``tobytes`` copy.

    (Assigning the array itself to ``data`` is ~100x slower: rclpy converts it element by element.)
    """
    if rgb.dtype != np.uint8 or rgb.ndim not in (2, 3):
        raise ImageError(f"expected HxW or HxWx3 uint8, got {rgb.shape} {rgb.dtype}")
    channels = 1 if rgb.ndim == 2 else rgb.shape[2]
    msg = Image()
    msg.header = header
    msg.height, msg.width = int(rgb.shape[0]), int(rgb.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = msg.width * channels
    msg.data = np.ascontiguousarray(rgb).tobytes()
    return msg
