"""CRC-32 with zlib's polynomial (MCAP's chunk, data and summary CRCs), the one function the bag code uses.

ISA-L's (``isal``, pinned in requirements.lock.txt: carry-less multiply instead of zlib's tables, several
times faster: bench/results/bag_crc.md), which ``process-bag`` pays on every frame of a bag that carries
CRCs; zlib's when isal is missing. Same values: the checksum is the format's, not the library's.
"""

from __future__ import annotations

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is pinned; only a stripped-down install lacks it
    from zlib import crc32

__all__ = ["crc32"]
