"""What ``.rodata`` tells about an ``.mgk``: layer names and FP32 quantization scale groups.

Both finders scan the section's bytes with vectorised NumPy / one regular expression, never per byte in
Python, and report file offsets so a reader can check them with a hex dump.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# ``layer_{id}_Quantize{Type}`` as a whole NUL-terminated string (preceded by NUL or the section start).
_LAYER_NAME = re.compile(rb"(?<![^\x00])layer_([0-9]{1,9})_Quantize([A-Za-z0-9_]{1,64})\x00")

# A plausible quantization scale: a normal, finite, positive float32 in this range.
SCALE_MIN, SCALE_MAX = 1e-8, 1e4


@dataclass(frozen=True)
class LayerName:
    layer_id: int
    type: str           # "Feature", "BatchNorm", "GRU", ... as written after "Quantize"
    name: str           # the whole string
    offset: int         # file offset of the string


@dataclass(frozen=True)
class ScaleGroup:
    index: int
    offset: int                                 # file offset of the group's first float
    values: tuple[float, float, float, float]   # [input, input, weight, weight] (seed's reading)

    @property
    def input_scale(self) -> float:
        return self.values[0]

    @property
    def weight_scale(self) -> float:
        return self.values[2]


def find_layer_names(rodata: bytes, file_offset: int) -> list[LayerName]:
    """Every ``layer_{id}_Quantize{Type}`` string in ``rodata`` (first occurrence of each name), in order."""
    seen: set[bytes] = set()
    names = []
    for match in _LAYER_NAME.finditer(rodata):
        whole = match.group(0)[:-1]
        if whole in seen:
            continue
        seen.add(whole)
        names.append(LayerName(layer_id=int(match.group(1)), type=match.group(2).decode("ascii"),
                               name=whole.decode("ascii"), offset=file_offset + match.start()))
    return names


def find_scale_groups(rodata: bytes, file_offset: int) -> list[ScaleGroup]:
    """Groups of four FP32 values shaped ``[a, a, b, b]`` with plausible scales, 4-byte aligned in the file.

    The seed reads the groups as [input, input, weight, weight] at 16-byte steps; a group made only of
    printable ASCII is rejected (text such as "AAAABBBB..." would otherwise look like scales).
    """
    shift = (-file_offset) % 4
    words = (len(rodata) - shift) // 4
    if words < 4:
        return []
    raw = np.frombuffer(rodata, np.uint8, count=words * 4, offset=shift)
    f = raw.view("<f4")
    exponent = (raw.view("<u4") >> 23) & 0xFF
    good = (exponent != 0) & (exponent != 0xFF)
    with np.errstate(invalid="ignore"):
        good &= (f >= SCALE_MIN) & (f <= SCALE_MAX)
    printable = ((raw >= 0x20) & (raw < 0x7F)).reshape(-1, 4).all(axis=1)
    n = words - 3   # candidate group starts
    candidate = (good[:n] & good[1:n + 1] & good[2:n + 2] & good[3:n + 3]
                 & (f[:n] == f[1:n + 1]) & (f[2:n + 2] == f[3:n + 3])
                 & ~(printable[:n] & printable[1:n + 1] & printable[2:n + 2] & printable[3:n + 3]))
    if not candidate.any():
        return []
    # Groups tile at 16-byte steps: keep the word phase (mod 4) holding most candidates, which also makes
    # the chosen groups non-overlapping.
    phase = int(np.argmax([candidate[p::4].sum() for p in range(4)]))
    starts = np.flatnonzero(candidate)
    starts = starts[starts % 4 == phase]
    values = f[starts[:, None] + np.arange(4)]
    return [ScaleGroup(index=k, offset=file_offset + shift + 4 * int(s),
                       values=tuple(float(v) for v in values[k]))
            for k, s in enumerate(starts)]
