"""Reads weight / input ``.npz`` files with every array's declared size checked before it is allocated.

``np.load`` trusts the ``.npy`` header of each member and allocates what it declares; here the header's
shape x itemsize must equal the member's stored size (and stay under a total budget) first. No pickles.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

from libredgetpu_ros.errors import not_a_file
from libredgetpu_ros.sophgo.ir import TpuLangError

MAX_NPZ_BYTES = 4 << 30  # all arrays of one file together
MAX_MEMBERS = 100_000


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


def read_npz(path: str | Path, what: str = "npz") -> dict[str, np.ndarray]:
    """Arrays of an .npz keyed by name; TpuLangError naming the file and member otherwise."""
    path = Path(path)
    if not path.is_file():
        raise TpuLangError(not_a_file(what, path))
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if len(infos) > MAX_MEMBERS:
                raise TpuLangError(f"{what} {path}: {len(infos)} members, more than {MAX_MEMBERS}")
            total = 0
            for info in infos:
                where = f"{what} {path} member {info.filename!r}"
                if not info.filename.endswith(".npy"):
                    raise TpuLangError(f"{where}: not a .npy member")
                with archive.open(info) as member:
                    shape, dtype, header_len = _header(member, where)
                nbytes = math.prod(shape) * dtype.itemsize
                if nbytes != info.file_size - header_len:
                    raise TpuLangError(f"{where}: header declares {list(shape)} {dtype} ({nbytes} bytes), "
                                       f"the member holds {info.file_size - header_len}")
                total += nbytes
                if total > MAX_NPZ_BYTES:
                    raise TpuLangError(f"{what} {path}: more than {MAX_NPZ_BYTES} bytes of arrays")
            with np.load(path, allow_pickle=False) as data:
                return {key: data[key] for key in data.files}
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise TpuLangError(f"{what} {path}: not a readable .npz ({exc})") from None
