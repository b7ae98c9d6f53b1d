"""The one reader of user images (files and compressed frames): size from the header, budget, then decode.

Every image a user hands the package (``infer IMAGE``, ``retarget --template``, ``robotics spot IMAGE``,
``robotics pattern --template``, ``robotics embed``, ``make-bag --images``, the tracker node's template patch)
and every compressed camera frame goes through here. The width and height are read from the format's header
(Pillow's header readers, constructed directly so nothing decodes and Pillow's own bomb check does not hide
the size; WebP's header parsed here, because Pillow's WebP reader allocates the canvas when it opens) and
checked against a pixel budget before a decoder sees the bytes: OpenCV allocates what a header claims, so a
few bytes of header could cost gigabytes (docs/reliability.md section 6). Formats: PNG, JPEG, BMP, TIFF,
WebP and PNM (PPM/PGM); anything else OpenCV would decode (EXR, HDR, JPEG 2000, ...) is refused. Every
refusal is a ``BadImage`` (an ``ImageError``) with a short ``cause`` for counters and the file named.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from libredgetpu_ros.errors import ImageError, InputError
from libredgetpu_ros.paths import read_regular
from libredgetpu_ros.textdata import clip

# Default pixel budget per image: 4096 x 4096 (16.8 MP) covers 4K UHD (8.3 MP) and 12 MP sensors; decoded as
# RGB it is 50 MB. The perception node's ``max_image_pixels`` parameter overrides it for camera frames.
DEFAULT_MAX_PIXELS = 4096 * 4096
# Upper end of that parameter's range (100 MP; a decoded RGB frame of 300 MB).
MAX_PIXEL_BUDGET = 100_000_000
# An image file is read whole before its header is checked (one read: the bytes checked are the bytes
# decoded), within this. 16.8 MP as uncompressed 16-bit RGBA TIFF is 134 MB.
MAX_FILE_BYTES = 256 * 1024 * 1024

FILE_FORMATS = ("PNG", "JPEG", "BMP", "TIFF", "WEBP", "PPM")
FRAME_FORMATS = ("PNG", "JPEG")  # what image_transport's compressed plugin writes
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class BadImage(ImageError):
    """An image the package cannot use; ``cause`` is a stable short key for counting (``too_large``,
    ``format``, ``decode``, ``empty``, ...)."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


def check_budget(width: int, height: int, max_pixels: int, what: str, hint: str = "") -> None:
    if width * height > max_pixels:
        raise BadImage("too_large", f"{what} is {width}x{height} = {width * height} pixels, over the budget "
                                    f"of {max_pixels}{hint}")


def sniff(data: bytes | memoryview) -> str | None:
    """The format named by the first bytes (one of FILE_FORMATS), or None."""
    head = bytes(data[:16])
    if head[:8] == _PNG_SIGNATURE:
        return "PNG"
    if head[:2] == b"\xff\xd8":
        return "JPEG"
    if head[:2] == b"BM":
        return "BMP"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "TIFF"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if len(head) >= 3 and head[0:1] == b"P" and head[1:2] in b"123456" and head[2:3] in b" \t\r\n#":
        return "PPM"
    return None


def _pillow_reader(fmt: str) -> type:
    from PIL import BmpImagePlugin, JpegImagePlugin, PngImagePlugin, PpmImagePlugin, TiffImagePlugin

    return {"PNG": PngImagePlugin.PngImageFile, "JPEG": JpegImagePlugin.JpegImageFile,
            "BMP": BmpImagePlugin.BmpImageFile, "TIFF": TiffImagePlugin.TiffImageFile,
            "PPM": PpmImagePlugin.PpmImageFile}[fmt]


def _webp_size(data: bytes | memoryview) -> tuple[int, int]:
    """Canvas size of a WebP file from its first chunk (VP8X, VP8L or VP8), as libwebp reads it."""
    view = bytes(data[:30])
    if len(view) < 30:
        raise ValueError(f"WebP header cut at {len(view)} bytes")
    kind = view[12:16]
    body = view[20:30]
    if kind == b"VP8X":
        return 1 + int.from_bytes(body[4:7], "little"), 1 + int.from_bytes(body[7:10], "little")
    if kind == b"VP8L":
        if body[0] != 0x2F:
            raise ValueError(f"VP8L signature byte is {body[0]:#x}, not 0x2f")
        bits = int.from_bytes(body[1:5], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if kind == b"VP8 ":
        if body[3:6] != b"\x9d\x01\x2a":
            raise ValueError(f"VP8 start code is {body[3:6].hex()}, not 9d012a")
        return (int.from_bytes(body[6:8], "little") & 0x3FFF), (int.from_bytes(body[8:10], "little") & 0x3FFF)
    raise ValueError(f"first chunk {kind!r} is not VP8X, VP8L or VP8")


def _check_png_chunks(data: bytes | memoryview, what: str) -> None:
    """Every chunk length must fit in the data. OpenCV's PNG reader allocates a chunk's claimed length before
    reading it (found by fuzzing; docs/reliability.md section 6)."""
    view = memoryview(data)
    pos, size = len(_PNG_SIGNATURE), len(view)
    while pos + 8 <= size:
        length = int.from_bytes(view[pos:pos + 4], "big")
        kind = bytes(view[pos + 4:pos + 8])
        if length > size - pos - 12:
            raise BadImage("decode", f"{what}: PNG chunk {kind!r} at byte {pos} claims {length} bytes, "
                                     f"{max(0, size - pos - 12)} remain")
        pos += 12 + length
        if kind == b"IEND":
            return


def header_size(data: bytes | memoryview, what: str,
                formats: tuple[str, ...] = FILE_FORMATS) -> tuple[str, int, int]:
    """(format, width, height) from an image's header, without decoding pixels; BadImage when the format is
    not one of ``formats`` or the header is unreadable. ``what`` names the image in messages."""
    fmt = sniff(data)
    if fmt is None or fmt not in formats:
        names = f"neither {' nor '.join(formats)}" if len(formats) == 2 else f"none of {', '.join(formats)}"
        raise BadImage("format", f"{what} cannot be decoded ({len(data)} bytes): it is {names} "
                                 f"(signature {bytes(data[:8]).hex() or 'empty'})")
    try:
        if fmt == "WEBP":
            width, height = _webp_size(data)
        else:
            with _pillow_reader(fmt)(io.BytesIO(data)) as header:
                width, height = header.size
    except Exception as exc:  # any malformed header: Pillow raises OSError, SyntaxError, ValueError...
        raise BadImage("decode", f"{what} cannot be decoded ({fmt}, {len(data)} bytes): unreadable "
                                 f"header: {type(exc).__name__}: {clip(str(exc))}") from exc
    if width <= 0 or height <= 0:
        raise BadImage("decode", f"{what} ({fmt}) header says {width}x{height}")
    if fmt == "PNG":
        _check_png_chunks(data, what)
    return fmt, int(width), int(height)


def decode(data: bytes | memoryview, what: str, max_pixels: int = DEFAULT_MAX_PIXELS,
           formats: tuple[str, ...] = FILE_FORMATS, hint: str = "") -> np.ndarray:
    """HxWx3 uint8 BGR (OpenCV's order) from encoded bytes, the header's size checked against ``max_pixels``
    before OpenCV sees them. ``hint`` ends the over-budget message (which setting raises the budget)."""
    import cv2

    if len(data) == 0:
        raise BadImage("empty", f"{what} is empty")
    fmt, width, height = header_size(data, what, formats)
    check_budget(width, height, max_pixels, f"{what} ({fmt})", hint)
    buf = np.frombuffer(data, dtype=np.uint8)
    try:
        bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error as exc:  # a header Pillow accepted that OpenCV's decoder does not
        raise BadImage("decode", f"{what} cannot be decoded ({fmt}, {len(buf)} bytes): "
                                 f"{clip(str(exc).strip())}") from exc
    if bgr is None:
        raise BadImage("decode", f"{what} cannot be decoded ({fmt}, {len(buf)} bytes)")
    if bgr.shape[0] * bgr.shape[1] > max_pixels:  # EXIF rotation swaps sides, never adds pixels
        raise BadImage("decode", f"{what} ({fmt}) decoded to {bgr.shape[1]}x{bgr.shape[0]}, its header "
                                 f"says {width}x{height}")
    return bgr


def read_image(path: Path | str, what: str = "image", max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """An image file as HxWx3 uint8 BGR, within ``max_pixels`` checked from its header (BadImage names the
    file and the size)."""
    try:  # a regular file within MAX_FILE_BYTES, opened without blocking
        data = read_regular(path, what, MAX_FILE_BYTES)
    except InputError as exc:
        raise BadImage("file", str(exc)) from None
    return decode(data, f"{what} {clip(str(path))}", max_pixels)
