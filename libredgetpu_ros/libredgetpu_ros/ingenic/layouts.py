"""Weight layouts of Ingenic's NNA as pure, vectorised functions with exact inverses.

Everything here follows the design seed's reading of the AEC sample (see docs/ingenic.md); the layouts are
hypotheses about the vendor's packing that the tests pin down for *our* implementation, not facts about the
vendor's:

- NMHWSOIB2 (convolutions): 1024-byte blocks ``[N_OFP, M_IFP, KH, KW, 32 (out), 32 (in)]`` of int8, out and in
  channels padded with zeros to multiples of 32. The seed's ``S_BIT2`` axis is not a separate axis in its own
  unpacking code (32 x 32 int8 = 1024 bytes); we follow the code.
- GRU: 1024-byte blocks, each a 32 x 32 int8 matrix (row-major). Bidirectional: 12 blocks (forward
  ``weight_ir, weight_iz, weight_in, weight_hr, weight_hz, weight_hn``, then the same for the reverse
  direction) followed by 576 bytes whose meaning is unknown (the seed calls them biases; kept raw).
  Unidirectional: 4 blocks, ``weight_ih`` = blocks 0-1 stacked (64 x 32), ``weight_hh`` = blocks 2-3.
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.errors import ModelFormatError, WeightsError

PLANE = 32                      # channels per feature plane (OFP = IFP = 32)
BLOCK_BYTES = PLANE * PLANE     # one 32 x 32 int8 block
GRU_GATES = ("weight_ir", "weight_iz", "weight_in", "weight_hr", "weight_hz", "weight_hn")
GRU_BIDIR_BIAS_BYTES = 576
GRU_BIDIR_BYTES = 12 * BLOCK_BYTES + GRU_BIDIR_BIAS_BYTES   # 12,864 in the AEC sample
GRU_UNIDIR_BYTES = 4 * BLOCK_BYTES                          # 4,096 in the AEC sample


def _planes(channels: int) -> int:
    return -(-channels // PLANE)


def nmhwsoib2_size(out_ch: int, in_ch: int, kh: int, kw: int) -> int:
    """Bytes of an ``(out_ch, in_ch, kh, kw)`` int8 kernel in NMHWSOIB2: N_OFP * M_IFP * KH * KW * 1024."""
    return _planes(out_ch) * _planes(in_ch) * kh * kw * BLOCK_BYTES


def _as_int8(data: np.ndarray | bytes | bytearray | memoryview) -> np.ndarray:
    if isinstance(data, np.ndarray):
        if data.dtype.itemsize != 1 or data.dtype.kind not in "iu":
            raise WeightsError(f"packed weights must be 1-byte integers, got dtype {data.dtype}")
        return data.reshape(-1).view(np.int8)
    return np.frombuffer(data, np.int8)


def oihw_to_nmhwsoib2(weights: np.ndarray) -> np.ndarray:
    """Pack an int8 ``(O, I, KH, KW)`` kernel; returns the flat int8 bytes (zero channel padding added)."""
    if weights.ndim != 4:
        raise WeightsError(f"OIHW weights must have 4 dimensions, got shape {weights.shape}")
    if weights.dtype != np.int8:
        raise WeightsError(f"OIHW weights must be int8 (quantized), got {weights.dtype}")
    o, i, kh, kw = weights.shape
    n, m = _planes(o), _planes(i)
    padded = np.zeros((n * PLANE, m * PLANE, kh, kw), np.int8)
    padded[:o, :i] = weights
    # (n, 32o, m, 32i, kh, kw) -> (n, m, kh, kw, 32o, 32i): one transpose copy, no Python loops.
    blocks = padded.reshape(n, PLANE, m, PLANE, kh, kw).transpose(0, 2, 4, 5, 1, 3)
    return np.ascontiguousarray(blocks).reshape(-1)


def nmhwsoib2_to_oihw(data: np.ndarray | bytes | bytearray | memoryview, out_ch: int, in_ch: int,
                      kh: int, kw: int, *, strict_padding: bool = False) -> np.ndarray:
    """Unpack NMHWSOIB2 bytes to an int8 ``(out_ch, in_ch, kh, kw)`` kernel (channel padding dropped).

    ``strict_padding`` raises when a padding channel holds a non-zero value: the shape given is then not
    the one the data was packed for (a useful check of a shape guess).
    """
    if min(out_ch, in_ch, kh, kw) < 1:
        raise WeightsError(f"NMHWSOIB2 shape must be positive, got {(out_ch, in_ch, kh, kw)}")
    flat = _as_int8(data)
    want = nmhwsoib2_size(out_ch, in_ch, kh, kw)
    if flat.size != want:
        raise ModelFormatError(f"NMHWSOIB2 data for shape {(out_ch, in_ch, kh, kw)} must be {want} bytes "
                               f"(N_OFP*M_IFP*KH*KW*1024), got {flat.size}")
    n, m = _planes(out_ch), _planes(in_ch)
    full = flat.reshape(n, m, kh, kw, PLANE, PLANE).transpose(0, 4, 1, 5, 2, 3).reshape(
        n * PLANE, m * PLANE, kh, kw)
    if strict_padding and (full[out_ch:].any() or full[:, in_ch:].any()):
        raise ModelFormatError(f"NMHWSOIB2 padding channels beyond {out_ch} out / {in_ch} in are not zero: "
                               "the shape does not match the packed data")
    return np.ascontiguousarray(full[:out_ch, :in_ch])


def _blocks(data: np.ndarray | bytes | bytearray | memoryview, expected: int, what: str) -> np.ndarray:
    flat = _as_int8(data)
    if flat.size != expected:
        raise ModelFormatError(f"{what} must be {expected} bytes, got {flat.size}")
    return flat


def gru_blocks_to_gates(data: np.ndarray | bytes | bytearray | memoryview,
                        bidirectional: bool) -> dict[str, np.ndarray]:
    """Split a GRU's packed blocks into named int8 matrices (PyTorch names; ``_reverse`` = backward)."""
    if bidirectional:
        flat = _blocks(data, GRU_BIDIR_BYTES, "a bidirectional GRU (12 blocks + 576 bytes)")
        blocks = flat[:12 * BLOCK_BYTES].reshape(12, PLANE, PLANE)
        names = list(GRU_GATES) + [f"{g}_reverse" for g in GRU_GATES]
        gates = {name: blocks[k].copy() for k, name in enumerate(names)}
        gates["bias_raw"] = flat[12 * BLOCK_BYTES:].copy()
        return gates
    flat = _blocks(data, GRU_UNIDIR_BYTES, "a unidirectional GRU (4 blocks)")
    rows = flat.reshape(4 * PLANE, PLANE)
    return {"weight_ih": rows[:2 * PLANE].copy(), "weight_hh": rows[2 * PLANE:].copy()}


def gates_to_gru_blocks(gates: dict[str, np.ndarray], bidirectional: bool) -> np.ndarray:
    """Inverse of :func:`gru_blocks_to_gates`: named int8 matrices -> flat packed bytes."""
    if bidirectional:
        parts = {g: (PLANE, PLANE) for g in GRU_GATES}
        parts |= {f"{g}_reverse": (PLANE, PLANE) for g in GRU_GATES}
        parts["bias_raw"] = (GRU_BIDIR_BIAS_BYTES,)
    else:
        parts = {"weight_ih": (2 * PLANE, PLANE), "weight_hh": (2 * PLANE, PLANE)}
    missing = sorted(set(parts) - set(gates))
    if missing:
        raise WeightsError(f"GRU gates missing: {', '.join(missing)}")
    out = []
    for name, shape in parts.items():
        array = np.asarray(gates[name])
        if array.shape != shape or array.dtype != np.int8:
            raise WeightsError(f"GRU gate {name} must be int8 of shape {shape}, "
                               f"got {array.dtype} {array.shape}")
        out.append(array.reshape(-1))
    return np.concatenate(out)


def dequantize(q: np.ndarray, scale: float | np.ndarray, axis: int = 0) -> np.ndarray:
    """``float = int8 * scale``; ``scale`` is one value or one per index of ``axis`` (per output channel)."""
    s = np.asarray(scale, np.float32)
    if s.ndim == 0:
        return q.astype(np.float32) * s
    if s.ndim != 1 or s.size != q.shape[axis]:
        raise WeightsError(f"per-channel scale must have {q.shape[axis]} values for axis {axis}, "
                           f"got shape {s.shape}")
    shape = [1] * q.ndim
    shape[axis] = s.size
    return q.astype(np.float32) * s.reshape(shape)


def quantize(weights: np.ndarray, scale: float | np.ndarray, axis: int = 0) -> np.ndarray:
    """Inverse of :func:`dequantize` up to rounding: ``clip(round(float / scale), -128, 127)`` as int8."""
    s = np.asarray(scale, np.float32)
    if np.any(s <= 0) or not np.all(np.isfinite(s)):
        raise WeightsError("quantization scales must be finite and positive")
    if s.ndim == 1:
        shape = [1] * weights.ndim
        shape[axis] = s.size
        s = s.reshape(shape)
    return np.clip(np.rint(weights / s), -128, 127).astype(np.int8)
