"""Crafted compressed frames for the hardening tests: a real PNG decompression bomb, built in milliseconds.

``png_bomb(30000, 30000)`` is a valid 8-bit RGB PNG of 30000 x 30000 black pixels in ~2.6 MB (the file of
issue 18 item 4). Decoding it takes 2.7 GB and ~20 s; building it here takes no such work: one block of
rows is deflated once and its output, which ends on a full flush (byte-aligned, history reset), repeats for
every block; the Adler-32 of all-zero data is known in closed form.
"""

from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np

_ROWS_PER_BLOCK = 100


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(width: int, height: int) -> bytes:
    """A PNG of ``width`` x ``height`` black RGB pixels (filter byte 0 on each row)."""
    if height % _ROWS_PER_BLOCK:
        raise ValueError(f"height must be a multiple of {_ROWS_PER_BLOCK}")
    row = 1 + 3 * width
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate; the zlib wrapper is written here
    block = deflate.compress(bytes(row * _ROWS_PER_BLOCK)) + deflate.flush(zlib.Z_FULL_FLUSH)
    total = row * height
    adler = ((total % 65521) << 16) | 1  # Adler-32 of `total` zero bytes: A = 1, B = total (mod 65521)
    # zlib header (deflate, 32 KiB window, level 9), the blocks, an empty final block, the checksum.
    idat = b"\x78\xda" + block * (height // _ROWS_PER_BLOCK) + b"\x03\x00" + struct.pack(">I", adler)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


BGR = np.random.default_rng(3).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
ENCODINGS = {  # extension, imencode flags, the format header_size names
    "png": (".png", [], "PNG"), "jpeg": (".jpg", [], "JPEG"), "bmp": (".bmp", [], "BMP"),
    "tiff": (".tiff", [], "TIFF"), "webp": (".webp", [cv2.IMWRITE_WEBP_QUALITY, 80], "WEBP"),
    "webp_lossless": (".webp", [cv2.IMWRITE_WEBP_QUALITY, 101], "WEBP"), "ppm": (".ppm", [], "PPM"),
}


def encoded_image(name: str) -> bytes:
    ext, flags, _ = ENCODINGS[name]
    ok, data = cv2.imencode(ext, BGR, flags)
    assert ok
    return data.tobytes()


def png_header_bomb(side: int) -> bytes:
    """A ~70-byte PNG whose IHDR claims side x side RGB pixels (46341: 2^31 pixels, 6 GiB decoded)."""
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(b"\0" * 64)) + _chunk(b"IEND", b""))


def header_bombs() -> dict[str, tuple[bytes, int, int]]:
    """A header claiming a huge image in each format (bytes, width, height): the 70-byte PNG of issue 30
    (2^31 pixels), 100000^2, the real 2.6 MB 30000^2 PNG, and a small real file of each other format with
    its size fields changed."""
    jpeg = bytearray(encoded_image("jpeg"))
    sof = jpeg.index(b"\xff\xc0")
    jpeg[sof + 5:sof + 9] = struct.pack(">HH", 60000, 60000)
    bmp = bytearray(encoded_image("bmp"))
    bmp[18:26] = struct.pack("<ii", 30000, 30000)
    tiff = bytearray(encoded_image("tiff"))
    tiff_ifd = int.from_bytes(tiff[4:8], "little")
    for i in range(int.from_bytes(tiff[tiff_ifd:tiff_ifd + 2], "little")):
        entry = tiff_ifd + 2 + 12 * i
        if int.from_bytes(tiff[entry:entry + 2], "little") in (256, 257):  # ImageWidth, ImageLength
            size = 2 if int.from_bytes(tiff[entry + 2:entry + 4], "little") == 3 else 4  # SHORT or LONG
            tiff[entry + 8:entry + 8 + size] = (30000).to_bytes(size, "little")
    webp = bytearray(b"RIFF\0\0\0\0WEBPVP8X" + struct.pack("<I", 10) + bytes(4)
                     + (16383).to_bytes(3, "little") * 2 + bytes(16))
    return {"png_70_bytes": (png_header_bomb(46341), 46341, 46341),
            "png_100000": (png_header_bomb(100000), 100000, 100000),
            "png_30000_real": (png_bomb(30000, 30000), 30000, 30000),
            "jpeg": (bytes(jpeg), 60000, 60000), "bmp": (bytes(bmp), 30000, 30000),
            "tiff": (bytes(tiff), 30000, 30000), "webp": (bytes(webp), 16384, 16384),
            "ppm": (b"P6\n30000 30000\n255\n" + bytes(64), 30000, 30000)}
