"""Weight / input ``.npz`` files of TpuLang graphs: :func:`libredgetpu_ros.npyfile.read_npz` (every array's
declared size checked against the bytes present and a budget before it is allocated; members not asked for
never opened; no pickles) with its failures as :class:`TpuLangError`.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np

from libredgetpu_ros import npyfile
from libredgetpu_ros.sophgo.ir import TpuLangError

MAX_NPZ_BYTES = npyfile.MAX_BYTES  # all arrays read from one file together


def read_npz(path: str | Path, what: str = "npz", names: Collection[str] | None = None,
             max_bytes: int = MAX_NPZ_BYTES) -> dict[str, np.ndarray]:
    """Arrays of an .npz keyed by name (only ``names`` when given); TpuLangError naming file and member."""
    return npyfile.read_npz(path, what, names, max_bytes, error=TpuLangError)
