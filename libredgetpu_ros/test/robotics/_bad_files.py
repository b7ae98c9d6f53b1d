"""A hostile ``.npz`` for the robotics file readers: a few hundred bytes whose members' ``.npy`` headers
declare a huge float32 array (default 100000 x 100000: 40 GB). ``np.load`` would allocate what the header
says; ``libredgetpu_ros.npyfile`` must refuse it, typed, before allocating (loaded by path:
``load_helper(HERE / "_lying_npz.py")``)."""

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
