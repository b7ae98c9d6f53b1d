"""Byte statistics of a weight region that bear on "int8 or sub-byte weights?".

Two signals, both cheap (one ``bincount`` each):

- ``nibble_tvd``: total-variation distance between the distributions of the low and the high nibble of
  each byte. For int8 weights the high nibble carries the sign and magnitude (mostly 0x0 or 0xF for small
  values) while the low nibble is near uniform: a large distance (~0.4-0.5 for Gaussian int8). Two packed
  4-bit values (or four 2-bit ones) per byte give two alike distributions: a distance near 0.
- ``share_abs_ge_64``: the share of bytes whose int8 reading has ``|v| >= 64``; about 5-11 % for int8
  weights of a trained layer (roughly Gaussian), near 50 % for bytes made of independent nibbles.

Neither proves a format; they say which reading the bytes look like.
"""

from __future__ import annotations

import numpy as np


def region_stats(region: np.ndarray) -> dict:
    """``region``: uint8 bytes. Returns bytes, zero share, nibble TVD and ``|int8| >= 64`` share."""
    size = int(region.size)
    if size == 0:
        return {"bytes": 0, "zero_share": None, "nibble_tvd": None, "share_abs_ge_64": None}
    low = np.bincount(region & 0x0F, minlength=16) / size
    high = np.bincount(region >> 4, minlength=16) / size
    byte_counts = np.bincount(region, minlength=256)
    # int8 |v| >= 64: bytes 0x40..0xC0 (64..127 and -128..-64).
    far = int(byte_counts[0x40:0xC1].sum())
    return {"bytes": size, "zero_share": round(float(byte_counts[0]) / size, 4),
            "nibble_tvd": round(0.5 * float(np.abs(low - high).sum()), 4),
            "share_abs_ge_64": round(far / size, 4)}
