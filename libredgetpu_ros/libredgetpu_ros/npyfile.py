"""Reading ``.npy`` / ``.npz`` files a user hands us, with every array's size checked before it is allocated.

``np.load`` trusts the ``.npy`` header and allocates what it declares: a 100-byte file claiming a
100000 x 100000 float32 array asks for 37 GiB before reading a byte. Here the header's shape x itemsize
must equal the bytes the file (or zip member) really holds and stay under a budget first:

- ``.npy``: the data after the header must be exactly the declared size;
- ``.npz``: each member's header against the member's declared size, that size against the bytes present
  (stored: equal; deflated: at most deflate's 1032:1), all members read against ``max_bytes``; members the
  caller does not name are never opened; encrypted members are refused.

The path must be a regular file, opened with :func:`libredgetpu_ros.paths.open_regular` (a FIFO, device,
socket or folder is refused by its kind, and never blocked on). No pickles (object arrays are refused).
Failures raise ``error`` (an :class:`InputError` subclass the
caller chooses, e.g. ``WeightsError``, ``TpuLangError``) naming the file and member, paths cut to a
bounded length. Family-independent.
"""

from __future__ import annotations

import math
import os
import tokenize
import zipfile
import zlib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from libredgetpu_ros.errors import InputError
from libredgetpu_ros.paths import open_regular
from libredgetpu_ros.textdata import clip, clip_repr, load_json

MAX_BYTES = 4 << 30  # default budget: all arrays read from one file together
MAX_MEMBERS = 100_000
_MAX_DEFLATE_RATIO = 1032  # deflate's best case: 258 bytes from every 2 bits of a repeated match


def read_header(stream: BinaryIO, where: str,
                error: type[InputError] = InputError) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, header length) of the ``.npy`` data starting at ``stream``'s position."""
    start = stream.tell()
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version in ((2, 0), (3, 0)):
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, EOFError, SyntaxError, tokenize.TokenError) as exc:  # NumPy tokenizes old headers
        raise error(f"{where}: not a valid .npy header ({clip(exc)})") from None
    if dtype.hasobject:
        raise error(f"{where}: object arrays (pickles) are refused")
    return tuple(int(d) for d in shape), dtype, stream.tell() - start


def read_npy(path: str | Path, what: str = ".npy file", max_bytes: int = MAX_BYTES,
             error: type[InputError] = InputError) -> np.ndarray:
    """The array of a ``.npy`` file whose header matches its size and ``max_bytes``."""
    where = f"{what} {clip(str(path))}"
    try:
        with open_regular(path, what, error=error) as stream:
            shape, dtype, header_len = read_header(stream, where, error)
            nbytes = math.prod(shape) * dtype.itemsize
            present = os.fstat(stream.fileno()).st_size - header_len
            if nbytes != present:
                raise error(f"{where}: header declares {list(shape)} {dtype} ({nbytes} bytes), the file "
                            f"holds {present}")
            if nbytes > max_bytes:
                raise error(f"{where}: {nbytes} bytes of array, more than the {max_bytes} accepted")
            stream.seek(0)
            return np.lib.format.read_array(stream, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise error(f"{where}: not a readable .npy ({clip(exc)})") from None


def _check_member_size(info: zipfile.ZipInfo, archive_size: int, where: str,
                       error: type[InputError]) -> None:
    """The member's declared (uncompressed) size must be possible for the bytes the file holds."""
    if info.flag_bits & 0x1:  # zipfile would raise RuntimeError asking for a password
        raise error(f"{where}: an encrypted member")
    if info.header_offset + info.compress_size > archive_size:
        raise error(f"{where}: declares {info.compress_size} stored bytes at offset {info.header_offset}, "
                    f"past the end of the {archive_size}-byte file")
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise error(f"{where}: an uncompressed member declaring {info.file_size} bytes in "
                    f"{info.compress_size}")
    if info.file_size > info.compress_size * _MAX_DEFLATE_RATIO + 1024:
        raise error(f"{where}: declares {info.file_size} bytes from {info.compress_size} compressed "
                    f"(more than deflate's {_MAX_DEFLATE_RATIO}:1 can produce)")


def read_npz(path: str | Path, what: str = "npz", names: Collection[str] | None = None,
             max_bytes: int = MAX_BYTES, error: type[InputError] = InputError,
             member_bytes: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Arrays of an ``.npz`` keyed by name (only ``names`` when given: members not named are never opened,
    names the file lacks are left for the caller to report), every size checked before one is allocated;
    ``member_bytes`` bounds single members by name (a metadata string far below the file's budget)."""
    shown = clip(str(path))
    wanted = None if names is None else {f"{name}.npy" for name in names}
    try:
        with open_regular(path, what, error=error) as handle, zipfile.ZipFile(handle) as archive:
            archive_size = os.fstat(handle.fileno()).st_size
            infos = archive.infolist()
            if len(infos) > MAX_MEMBERS:
                raise error(f"{what} {shown}: {len(infos)} members, more than {MAX_MEMBERS}")
            selected = [info for info in infos if wanted is None or info.filename in wanted]
            total = 0
            for info in selected:
                where = f"{what} {shown} member {clip(repr(info.filename), 80)}"
                if not info.filename.endswith(".npy"):
                    raise error(f"{where}: not a .npy member")
                _check_member_size(info, archive_size, where, error)
                with archive.open(info) as member:
                    shape, dtype, header_len = read_header(member, where, error)
                nbytes = math.prod(shape) * dtype.itemsize
                if nbytes != info.file_size - header_len:
                    raise error(f"{where}: header declares {list(shape)} {dtype} ({nbytes} bytes), the "
                                f"member holds {info.file_size - header_len}")
                limit = (member_bytes or {}).get(info.filename[:-4])
                if limit is not None and nbytes > limit:
                    raise error(f"{where}: {nbytes} bytes of array, more than the {limit} accepted for it")
                total += nbytes
                if total > max_bytes:
                    raise error(f"{what} {shown}: more than {max_bytes} bytes of arrays"
                                + ("" if names is None else " in the members the caller uses"))
            arrays = {}
            for info in selected:  # from the file checked above, not the path opened again
                with archive.open(info) as member:
                    arrays[info.filename[:-4]] = np.lib.format.read_array(member, allow_pickle=False)
            return arrays
    except (OSError, zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, zlib.error) as exc:
        raise error(f"{what} {shown}: not a readable .npz ({clip(exc)})") from None


def read_npz_meta(path: str | Path, what: str, fmt: str, array: str, *, max_bytes: int, array_bytes: int,
                  meta_bytes: int, dtype: type | None = None,
                  error: type[InputError] = InputError) -> tuple[np.ndarray, dict[str, Any]]:
    """(``array`` as ``dtype``, the metadata dict) of an ``.npz`` the package saved as
    ``np.savez(..., <array>=..., meta=np.array(json.dumps({"format": fmt, ...})))`` (readouts, embedding
    databases): only those two members read (:func:`read_npz`, ``array_bytes`` / ``meta_bytes`` each), the
    metadata parsed with a depth budget and its ``format`` checked; ``error`` names the file otherwise.
    What the metadata must hold beyond ``format`` is the caller's to check."""
    shown = clip(str(path))
    arrays = read_npz(path, what, names=(array, "meta"), max_bytes=max_bytes, error=error,
                      member_bytes={"meta": meta_bytes, array: array_bytes})
    try:
        values = np.asarray(arrays[array], dtype=dtype)
        meta: Any = load_json(str(arrays["meta"]), f"{shown} meta", max_depth=32)
    except (KeyError, ValueError, TypeError) as exc:
        article = "an" if what[:1].lower() in "aeiou" else "a"
        raise error(f"{shown}: not {article} {what} (no or bad {clip(exc)})") from exc
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        found = meta.get("format") if isinstance(meta, dict) else meta
        raise error(f"{shown}: format is {clip_repr(found)}, expected {fmt}")
    return values, meta
