"""What ``.rodata`` tells about an ``.mgk``: layer names, 64-byte scale records, per-channel runs.

The finders scan the section's bytes with vectorised NumPy / one regular expression, never per byte in
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
# Stored zero points seen on the real sample are 0 .. -135 (a negated uint8 fits, int8 does not): accept
# what int8, uint8 and their negations allow.
ZERO_POINT_LIMIT = 255
# The four ints after the zero points (1..76 on the real sample): small, non-negative.
RECORD_ID_MAX = 4096
RECORD_WORDS = 16           # 64 bytes: scales (4 f32), zero points (4 i32), ids (4 i32), 4 words not decoded
MIN_RUN = 16                # a per-channel array: at least this many identical 32-bit words

@dataclass(frozen=True)
class LayerName:
    layer_id: int
    type: str           # "Feature", "BatchNorm", "GRU", ... as written after "Quantize"
    name: str           # the whole string
    offset: int         # file offset of the string


@dataclass(frozen=True)
class ScaleRecord:
    """A 64-byte quantization record: ``[in, in, w, w]`` f32, ``[in_zp, in_zp, w_zp, w_zp]`` i32, four ints.

    Every field is read as stored; which layer a record belongs to is not recorded in any place we decode
    (``layer`` / ``evidence`` are filled in only when an offset table says so).
    """

    index: int
    offset: int                             # file offset of the record's first float
    input_scale: float
    weight_scale: float
    input_zero_point: int
    weight_zero_point: int
    ids: tuple[int, int, int, int]          # four small ints after the zero points (layer ids? unknown)
    trailer: tuple[int, int, int, int]      # the record's last 16 bytes as int32, not interpreted

    def as_dict(self) -> dict:
        return {"index": self.index, "offset": self.offset, "input_scale": self.input_scale,
                "weight_scale": self.weight_scale, "input_zero_point": self.input_zero_point,
                "weight_zero_point": self.weight_zero_point, "ids": list(self.ids),
                "trailer": list(self.trailer)}


@dataclass(frozen=True)
class ChannelRun:
    """A run of one repeated 32-bit value: a per-channel array whose channels all hold the same number."""

    offset: int
    count: int
    kind: str           # "f32" (a plausible scale) or "i32" (a small integer)
    value: float | int

    def as_dict(self) -> dict:
        return {"offset": self.offset, "count": self.count, "kind": self.kind, "value": self.value}


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


def _words(rodata: bytes, file_offset: int) -> tuple[np.ndarray, int]:
    """``rodata`` as little-endian 32-bit words aligned to 4 in the file, and the byte shift used."""
    shift = (-file_offset) % 4
    words = max(0, (len(rodata) - shift) // 4)
    return np.frombuffer(rodata, np.uint8, count=words * 4, offset=shift).view("<u4"), shift


def _plausible_scale(words: np.ndarray) -> np.ndarray:
    exponent = (words >> 23) & 0xFF
    f = words.view("<f4")
    with np.errstate(invalid="ignore"):
        return (exponent != 0) & (exponent != 0xFF) & (f >= SCALE_MIN) & (f <= SCALE_MAX)


def _run_starts_counts(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index and length of every maximal run of identical words."""
    starts = np.concatenate(([0], np.flatnonzero(np.diff(w) != 0) + 1))
    return starts, np.diff(np.concatenate((starts, [w.size])))


def _run_mask(w: np.ndarray) -> np.ndarray:
    """True for words inside a run of at least ``MIN_RUN`` identical words."""
    _, counts = _run_starts_counts(w)
    return np.repeat(counts >= MIN_RUN, counts)


def find_scale_records(rodata: bytes, file_offset: int) -> list[ScaleRecord]:
    """Every 64-byte record in ``rodata`` whose fields all validate (vectorised over word offsets).

    A candidate at word ``i`` needs: words i..i+3 plausible scales with ``f[i] == f[i+1]`` and
    ``f[i+2] == f[i+3]``; words i+4..i+7 int32 zero points in [-255, 255] with the same pairing; words
    i+8..i+11 ints in [0, 4096]; and none of words i..i+11 inside a run of ``MIN_RUN`` identical words.
    A run of one repeated float fails the zero-point test (its bits read as int32 are ~1e9), and the run
    test refuses the seam where a float run meets a run of small ints (4 equal floats, 8 equal ints).
    """
    w, shift = _words(rodata, file_offset)
    n = w.size - RECORD_WORDS + 1
    if n <= 0:
        return []
    s = w.view("<i4")
    scale = _plausible_scale(w)
    ok = np.ones(n, bool)
    for k in range(4):
        ok &= scale[k:k + n]
        ok &= np.abs(s[4 + k:4 + k + n]) <= ZERO_POINT_LIMIT
        ids = s[8 + k:8 + k + n]
        ok &= (ids >= 0) & (ids <= RECORD_ID_MAX)
    for k in (0, 2, 4, 6):
        ok &= w[k:k + n] == w[k + 1:k + 1 + n]
    in_run = np.cumsum(np.concatenate(([0], _run_mask(w).astype(np.int64))))
    ok &= in_run[12:12 + n] == in_run[:n]     # no run word among words i..i+11
    f = w.view("<f4")
    records = []
    for i in np.flatnonzero(ok):
        i = int(i)
        if records and file_offset + shift + 4 * i < records[-1].offset + 4 * RECORD_WORDS:
            continue   # overlapping an accepted record (a later start reuses its words)
        records.append(ScaleRecord(
            index=len(records), offset=file_offset + shift + 4 * i, input_scale=float(f[i]),
            weight_scale=float(f[i + 2]), input_zero_point=int(s[i + 4]), weight_zero_point=int(s[i + 6]),
            ids=tuple(int(v) for v in s[i + 8:i + 12]), trailer=tuple(int(v) for v in s[i + 12:i + 16])))
    return records


def find_channel_runs(rodata: bytes, file_offset: int) -> list[ChannelRun]:
    """Runs of at least ``MIN_RUN`` identical non-zero words that read as a scale or a small int."""
    w, shift = _words(rodata, file_offset)
    if w.size < MIN_RUN:
        return []
    starts, counts = _run_starts_counts(w)
    keep = (counts >= MIN_RUN) & (w[starts] != 0)
    runs = []
    s, f = w.view("<i4"), w.view("<f4")
    scale = _plausible_scale(w[starts])
    for start, count, is_scale in zip(starts[keep], counts[keep], scale[keep], strict=True):
        value = int(s[start])
        if is_scale:
            runs.append(ChannelRun(file_offset + shift + 4 * int(start), int(count), "f32", float(f[start])))
        elif abs(value) <= 1 << 16:
            runs.append(ChannelRun(file_offset + shift + 4 * int(start), int(count), "i32", value))
    return runs
