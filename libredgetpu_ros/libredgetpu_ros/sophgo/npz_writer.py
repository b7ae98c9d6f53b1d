"""The weight npz, byte for byte as TpuLang's wheel (NumPy's ``savez`` under Python 3.10) writes it.

NumPy writes every member with ``force_zip64``; Python 3.10's ``zipfile`` then left "version needed 2.0",
the real sizes in the local headers and "made by 3.20" in the central directory, while 3.11+ writes 4.5,
``0xFFFFFFFF`` size placeholders and 4.5. The arrays, the zip64 extra fields, CRCs, dates and offsets are the
same, so the 3.11 file is patched in place (sizes are taken from each zip64 extra field).
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np

from libredgetpu_ros.atomicio import atomic_write_bytes

_LOCAL, _CENTRAL, _END = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
_VERSION_20 = 20
_MADE_BY_UNIX_3_20 = (3 << 8) | 20
_PLACEHOLDER = 0xFFFFFFFF


def _patch(data: bytearray) -> None:
    pos = 0
    while data[pos:pos + 4] == _LOCAL:
        name_len, extra_len = struct.unpack_from("<HH", data, pos + 26)
        extra = pos + 30 + name_len
        size = struct.unpack_from("<I", data, pos + 22)[0]
        if size == _PLACEHOLDER:
            tag, length, size, compressed = struct.unpack_from("<HHQQ", data, extra)
            if tag != 1 or length < 16 or size >= _PLACEHOLDER:
                return  # not the layout this patch knows (or a member above 4 GiB): leave the file as is
            struct.pack_into("<II", data, pos + 18, compressed, size)
        struct.pack_into("<H", data, pos + 4, _VERSION_20)
        pos = extra + extra_len + struct.unpack_from("<I", data, pos + 18)[0]
    while data[pos:pos + 4] == _CENTRAL:
        struct.pack_into("<HH", data, pos + 4, _MADE_BY_UNIX_3_20, _VERSION_20)
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, pos + 28)
        pos += 46 + name_len + extra_len + comment_len


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = bytearray(buffer.getvalue())
    _patch(data)
    return bytes(data)


def write_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """Write the npz atomically: a failed write (disk full) leaves the previous file at ``path`` intact."""
    atomic_write_bytes(path, npz_bytes(arrays))
