"""Crafted compressed frames for the hardening tests: a real PNG decompression bomb, built in milliseconds.

``png_bomb(30000, 30000)`` is a valid 8-bit RGB PNG of 30000 x 30000 black pixels in ~2.6 MB (the file of
issue 18 item 4). Decoding it takes 2.7 GB and ~20 s; building it here takes no such work: one block of
rows is deflated once and its output, which ends on a full flush (byte-aligned, history reset), repeats for
every block; the Adler-32 of all-zero data is known in closed form.
"""

from __future__ import annotations

import struct
import zlib

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
