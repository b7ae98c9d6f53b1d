"""Bounded decompression of bag data: MCAP chunks (``chunk_records``) and rosbag2's per-message payloads
(``decompress``), shared by the salvage walk, ``mcap_view``, ``mcap_summary`` and ``storage.messages``.

Every size is checked against a budget before anything is decompressed, a compressed input must be one
frame with nothing after it (rosbags' one-shot decompressors would go on into trailing frames), and a large
output is written piece by piece into an anonymous mapping, so it is held once and only as large as it
really is.
"""

from __future__ import annotations

import mmap
import sys
from typing import Any

from libredgetpu_ros.bags.crc import crc32

MAX_CHUNK_BYTES = 1 << 30  # an uncompressed chunk larger than this is refused (rosbag2 writes ~1 MB chunks)
# A compressed chunk's records larger than this are refused: while a zstd frame that declares its size is
# decompressed, the decoder holds a buffer of that size besides the output (2.05x the chunk measured for a
# 63 MiB frame), so this keeps the peak within MAX_CHUNK_BYTES
MAX_COMPRESSED_CHUNK_BYTES = MAX_CHUNK_BYTES // 2
COMPRESSIONS = ("", "zstd", "lz4")  # MCAP chunk compressions rosbags writes and this module decompresses
_MAX_RATIO = 1024  # zstd chunks: at most this many output bytes per stored byte (+1 MiB)


class BadRecord(Exception):
    """A record does not parse; the text names the field."""



def check_chunk_size(size: int, stored: int, compression: str, at: int) -> None:
    """BadRecord unless a chunk's declared uncompressed ``size`` is within the budget for its ``stored``
    bytes: at most ``MAX_CHUNK_BYTES``, and for a compressed chunk at most ``MAX_COMPRESSED_CHUNK_BYTES``
    and ``_MAX_RATIO`` x stored + 1 MiB (a decode budget proportional to the input: a few bytes may not
    claim a huge output)."""
    if size > MAX_CHUNK_BYTES or (compression and (size > MAX_COMPRESSED_CHUNK_BYTES
                                                   or size > _MAX_RATIO * stored + (1 << 20))):
        raise BadRecord(f"chunk at offset {at}: uncompressed size {size} exceeds the budget for "
                        f"{stored} stored bytes")


def chunk_records(stored: memoryview, compression: str, size: int, crc: int, at: int) -> memoryview:
    """A chunk's records, decompressed and checked: ``size`` (the header's uncompressed size) within the
    budget before anything is decompressed, the output exactly ``size`` bytes (one compressed frame, no
    trailing bytes: rosbags' one-shot decompressors would go on into them), its CRC matching when the
    chunk has one (0 = not computed); BadRecord otherwise. Shared by the salvage walk, ``mcap_view`` and
    ``mcap_summary``."""
    check_chunk_size(size, len(stored), compression, at)
    records = decompress(stored, compression, size, f"chunk at offset {at}")
    if len(records) != size:
        raise BadRecord(f"chunk at offset {at}: records are {len(records)} bytes, header says {size}")
    if crc and crc32(records) != crc:
        raise BadRecord(f"chunk at offset {at}: CRC mismatch")
    return records


_PIECE = 1 << 22  # compressed data is decompressed 4 MiB at a time (decompress)


def zstd_module() -> Any:
    """The zstd module rosbags uses (the standard library's from Python 3.14, else ``backports.zstd``)."""
    if sys.version_info >= (3, 14):
        from compression import zstd
    else:  # rosbags' own dependency on older Pythons
        from backports import zstd
    return zstd


def _decompressor(compression: str, where: str) -> tuple[Any, tuple[type[BaseException], ...]]:
    if compression == "lz4":
        import lz4.frame  # rosbags' own dependency

        return lz4.frame.LZ4FrameDecompressor(), (RuntimeError,)  # lz4 reports a bad frame as RuntimeError
    if compression == "zstd":
        zstd = zstd_module()
        return zstd.ZstdDecompressor(), (zstd.ZstdError, EOFError)
    raise BadRecord(f"{where}: unknown chunk compression {compression[:40]!r}")


def decompress(stored: memoryview | bytes, compression: str, size: int, where: str) -> memoryview:
    """The one compressed frame of ``stored`` (``where`` names it in errors), at most ``size`` bytes of it
    (one more is a BadRecord). Up to ``_PIECE`` bytes come from one call; a larger output goes, a piece at a
    time, into an anonymous mapping of ``size`` + 1 bytes whose pages become resident only as they are
    written: a chunk is held once, as large as it really is (a length-capped one-shot decompressor held a
    large chunk twice, 2.07 GB for a 1 GiB chunk; a growing bytearray 1.3 times)."""
    if not compression:
        return memoryview(stored)
    decompressor, errors = _decompressor(compression, where)
    out: mmap.mmap | None = None
    filled = 0
    data: memoryview | bytes = stored
    try:
        while True:
            piece = decompressor.decompress(data, max_length=min(_PIECE, size - filled + 1))
            data = b""
            if filled + len(piece) > size:
                raise BadRecord(f"{where}: decompresses to more than {size} bytes (its declared size or "
                                f"budget)")
            if out is None and decompressor.eof:  # the whole frame in one piece: no copy
                filled = len(piece)
                break
            if not piece and not decompressor.eof:
                raise BadRecord(f"{where}: {compression} data ends inside its frame")
            if out is None:
                out = mmap.mmap(-1, size + 1)
            out[filled:filled + len(piece)] = piece
            filled += len(piece)
            if decompressor.eof:
                break
    except errors as exc:
        raise BadRecord(f"{where}: {compression} data does not decompress: {exc}") from exc
    if decompressor.unused_data:
        raise BadRecord(f"{where}: {len(decompressor.unused_data)} bytes after the {compression} frame")
    return memoryview(piece if out is None else out)[:filled]
