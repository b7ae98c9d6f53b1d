"""sensor_msgs Image / CompressedImage <-> NumPy, without cv_bridge (not available as a wheel).

Raw images are viewed in place (``np.frombuffer``): rows padded by ``step`` become a strided view, and only
the channel reorder to RGB copies. Every rejection is a ``BadImage`` carrying a short ``cause`` so the node
can count causes in diagnostics and log each cause once.

Frames over a pixel budget (``max_pixels``) are refused as ``too_large`` before any pixel is touched: for a
compressed frame the size comes from its header (PNG IHDR, JPEG SOF, read by Pillow without decoding), so a
2.6 MB PNG claiming 30000x30000 pixels never reaches the decoder (it took 16 s and 5.3 GB to decode). Only PNG
and JPEG (what image_transport's compressed plugin writes) are decoded, and a PNG's chunk lengths must fit its
data before OpenCV sees it.
"""

from __future__ import annotations

import io

import numpy as np
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from libredgetpu_ros.errors import ImageError

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
# Default pixel budget per frame: 4096 x 4096 (16.8 MP) covers 4K UHD (8.3 MP) and 12 MP sensors; decoded as
# RGB it is 50 MB. The node's ``max_image_pixels`` parameter overrides it.
DEFAULT_MAX_PIXELS = 4096 * 4096
# Upper end of the node parameter's range (100 MP; a decoded RGB frame of 300 MB).
MAX_PIXEL_BUDGET = 100_000_000


class BadImage(ImageError):
    """An input frame the node cannot use; ``cause`` is a stable short key for counting."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


def _check_budget(width: int, height: int, max_pixels: int, what: str) -> None:
    if width * height > max_pixels:
        raise BadImage("too_large", f"{what} is {width}x{height} = {width * height} pixels, over the budget "
                                    f"of {max_pixels} (parameter max_image_pixels)")


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
    flat = np.frombuffer(msg.data, dtype=np.uint8)
    # Strided view: padding at the end of each row is skipped without a copy.
    pixels = np.lib.stride_tricks.as_strided(flat, shape=(height, width, channels),
                                             strides=(step, channels, 1), writeable=False)
    if channels == 1:
        return np.repeat(pixels, 3, axis=2)
    if order == (0, 1, 2) and channels == 3:
        return pixels if step == row_bytes else np.ascontiguousarray(pixels)
    return np.ascontiguousarray(pixels[:, :, list(order)])


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _header_reader(data: bytes | memoryview) -> type | None:
    """Pillow's reader class for PNG / JPEG (the formats image_transport's compressed plugin writes),
    constructed directly so the size comes back even over Pillow's own bomb limit; None: another format."""
    from PIL import JpegImagePlugin, PngImagePlugin

    head = bytes(data[:8])
    if head == _PNG_SIGNATURE:
        return PngImagePlugin.PngImageFile
    if head[:2] == b"\xff\xd8":  # SOI
        return JpegImagePlugin.JpegImageFile
    return None


def _check_png_chunks(data: bytes | memoryview, fmt: str) -> None:
    """Every chunk length must fit in the data. OpenCV's PNG reader allocates a chunk's claimed length before
    reading it: a 549-byte frame whose IDAT claimed 2 GiB took 5.6 s and 2.1 GB (found by fuzzing)."""
    view = memoryview(data)
    pos, size = len(_PNG_SIGNATURE), len(view)
    while pos + 8 <= size:
        length = int.from_bytes(view[pos:pos + 4], "big")
        kind = bytes(view[pos + 4:pos + 8])
        if length > size - pos - 12:
            raise BadImage("decode", f"PNG frame (format {fmt!r}): chunk {kind!r} at byte {pos} claims "
                                     f"{length} bytes, {max(0, size - pos - 12)} remain")
        pos += 12 + length
        if kind == b"IEND":
            return


def compressed_size(data: bytes | memoryview, fmt: str = "") -> tuple[int, int]:
    """(width, height) from a PNG or JPEG frame's header, without decoding pixels; BadImage if unreadable
    or another format (only these two reach a decoder: fewer decoders, fewer ways to be attacked)."""
    reader = _header_reader(data)
    if reader is None:
        raise BadImage("format", f"compressed image (format {fmt!r}, {len(data)} bytes) is neither PNG nor "
                                 f"JPEG (signature {bytes(data[:8]).hex()})")
    try:
        with reader(io.BytesIO(data)) as header:
            width, height = header.size
    except Exception as exc:  # any malformed header: Pillow raises OSError, SyntaxError, ValueError...
        raise BadImage("decode", f"cannot read the compressed image's header (format {fmt!r}, "
                                 f"{len(data)} bytes): {type(exc).__name__}: {exc}") from exc
    if reader.format == "PNG":
        _check_png_chunks(data, fmt)
    return int(width), int(height)


def compressed_to_rgb(msg: CompressedImage, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """HxWx3 uint8 RGB from a ``sensor_msgs/CompressedImage`` (jpeg or png); the header's size is checked
    against ``max_pixels`` before decoding."""
    import cv2

    if len(msg.data) == 0:
        raise BadImage("empty", "empty compressed image")
    width, height = compressed_size(msg.data, msg.format)
    _check_budget(width, height, max_pixels, f"compressed image (format {msg.format!r})")
    buf = np.frombuffer(msg.data, dtype=np.uint8)
    try:
        bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error as exc:  # e.g. a header Pillow accepted that OpenCV's decoder does not
        raise BadImage("decode", f"cannot decode compressed image (format {msg.format!r}, {len(buf)} bytes): "
                                 f"{exc}") from exc
    if bgr is None:
        raise BadImage("decode", f"cannot decode compressed image (format {msg.format!r}, {len(buf)} bytes)")
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
