"""Bad files for the robotics readers and writers (loaded by path: ``load_helper(HERE / "_bad_files.py")``).

- :func:`lying_npz`: a few hundred bytes whose members' ``.npy`` headers declare a huge float32 array
  (default 100000 x 100000: 40 GB). ``np.load`` would allocate what the header says;
  ``libredgetpu_ros.npyfile`` must refuse it, typed, before allocating.
- :func:`disk_full_savez`: a stand-in for ``np.savez`` that writes a few bytes, then fails as a full disk
  does: the writer must keep the previous file (``libredgetpu_ros.atomicio``)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

HUGE = (100_000, 100_000)


def lying_npz(path: Path, members: Iterable[str], shape: tuple[int, ...] = HUGE) -> Path:
    """``path`` holding each of ``members`` (``weights``, ``meta``, ...) as a header of ``shape`` float32
    followed by 16 bytes of data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as archive:
        for name in members:
            archive.writestr(f"{name}.npy", header.getvalue() + b"\0" * 16)
    return path


def disk_full_savez(handle: object, **arrays: object) -> None:
    """``np.savez``'s signature; writes half an archive header to ``handle``, then raises ENOSPC."""
    handle.write(b"PK\x03\x04 half")  # type: ignore[attr-defined]
    raise OSError(28, "No space left on device")
