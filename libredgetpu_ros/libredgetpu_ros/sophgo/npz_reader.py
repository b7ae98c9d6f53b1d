"""Reads weight / input ``.npz`` files with every array's declared size checked before it is allocated.

``np.load`` trusts the ``.npy`` header of each member and allocates what it declares; here the header's
shape x itemsize must equal the member's declared size, that size must be possible for the bytes present
(stored: equal; deflated: at most deflate's 1032:1), and the arrays read must stay under a total budget,
all before anything is allocated. Members the caller does not need are never opened. No pickles.
"""

from __future__ import annotations

import math
import zipfile
import zlib
from collections.abc import Collection
from pathlib import Path

import numpy as np

from libredgetpu_ros.errors import not_a_file
from libredgetpu_ros.sophgo.ir import TpuLangError
from libredgetpu_ros.textdata import clip

MAX_NPZ_BYTES = 4 << 30  # all arrays read from one file together
MAX_MEMBERS = 100_000
_MAX_DEFLATE_RATIO = 1032  # deflate's best case: 258 bytes from every 2 bits of a repeated match


def _header(member: zipfile.ZipExtFile, where: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, header length) of one .npy member."""
    try:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(member)
        elif version in ((2, 0), (3, 0)):
            shape, _, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except ValueError as exc:
        raise TpuLangError(f"{where}: not a valid .npy header ({exc})") from None
    if dtype.hasobject:
        raise TpuLangError(f"{where}: object arrays (pickles) are refused")
    return tuple(int(d) for d in shape), dtype, member.tell()


def _check_stored_size(info: zipfile.ZipInfo, archive_size: int, where: str) -> None:
    """The member's declared (uncompressed) size must be possible for the bytes the file holds."""
    if info.flag_bits & 0x1:  # zipfile would raise RuntimeError asking for a password
        raise TpuLangError(f"{where}: an encrypted member")
    if info.header_offset + info.compress_size > archive_size:
        raise TpuLangError(f"{where}: declares {info.compress_size} stored bytes at offset "
                           f"{info.header_offset}, past the end of the {archive_size}-byte file")
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise TpuLangError(f"{where}: an uncompressed member declaring {info.file_size} bytes in "
                           f"{info.compress_size}")
    if info.file_size > info.compress_size * _MAX_DEFLATE_RATIO + 1024:
        raise TpuLangError(f"{where}: declares {info.file_size} bytes from {info.compress_size} compressed "
                           f"(more than deflate's {_MAX_DEFLATE_RATIO}:1 can produce)")


def read_npz(path: str | Path, what: str = "npz", names: Collection[str] | None = None,
             max_bytes: int = MAX_NPZ_BYTES) -> dict[str, np.ndarray]:
    """Arrays of an .npz keyed by name; TpuLangError naming the file and member otherwise.

    ``names``: only these arrays are read (members not named are never opened, whatever they declare;
    names the file lacks are left for the caller to report). Every member read has its .npy header checked
    against the bytes the file holds, and all of them together against ``max_bytes``, before one array is
    allocated."""
    path = Path(path)
    shown = clip(str(path))
    if not path.is_file():
        raise TpuLangError(not_a_file(what, shown))
    wanted = None if names is None else {f"{name}.npy" for name in names}
    try:
        archive_size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if len(infos) > MAX_MEMBERS:
                raise TpuLangError(f"{what} {shown}: {len(infos)} members, more than {MAX_MEMBERS}")
            selected = [info for info in infos if wanted is None or info.filename in wanted]
            total = 0
            for info in selected:
                where = f"{what} {shown} member {clip(repr(info.filename), 80)}"
                if not info.filename.endswith(".npy"):
                    raise TpuLangError(f"{where}: not a .npy member")
                _check_stored_size(info, archive_size, where)
                with archive.open(info) as member:
                    shape, dtype, header_len = _header(member, where)
                nbytes = math.prod(shape) * dtype.itemsize
                if nbytes != info.file_size - header_len:
                    raise TpuLangError(f"{where}: header declares {list(shape)} {dtype} ({nbytes} bytes), "
                                       f"the member holds {info.file_size - header_len}")
                total += nbytes
                if total > max_bytes:
                    raise TpuLangError(f"{what} {shown}: more than {max_bytes} bytes of arrays"
                                       + ("" if names is None else " in the members the module uses"))
            keys = [info.filename[:-4] for info in selected]
            with np.load(path, allow_pickle=False) as data:
                return {key: data[key] for key in keys}
    except (OSError, zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, zlib.error) as exc:
        raise TpuLangError(f"{what} {shown}: not a readable .npz ({clip(exc)})") from None
