"""The DarwiNN parameter blob of a compiled Dense(N) template, built and parsed in NumPy.

Layout (found by experiment, checked byte for byte against ``edgetpu_compiler`` output in the tests):
the weight matrix ``W`` (rows = outputs, cols = inputs) is cut into groups of 64 rows. Each group is

    [overhead: 64 * 8 bytes][weights: 64 * cols bytes]

The overhead holds 64 little-endian float32 requantization multipliers (``input_scale * w_scale[r] /
output_scale``) followed by 64 uint32 words; it depends on the scales only, never on the weight values,
so it is copied from the template. Inside a group the weights are stored in tiles of 4 columns:
``offset = (col // 4) * 256 + (row % 64) * 4 + col % 4``, each byte being ``int8 ^ 0x80``.
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.errors import ModelFormatError, WeightsError

GROUP_ROWS = 64
TILE_COLS = 4
OVERHEAD_BYTES_PER_ROW = 8
GROUP_OVERHEAD = GROUP_ROWS * OVERHEAD_BYTES_PER_ROW
SIGN_FLIP = 0x80
_SIGN_FLIP_WORD = 0x80808080


def check_dense_shape(rows: int, cols: int) -> None:
    """Raise WeightsError unless (rows, cols) can be laid out as a parameter blob."""
    if rows <= 0 or cols <= 0 or rows % GROUP_ROWS or cols % TILE_COLS:
        raise WeightsError(f"matrix shape ({rows}, {cols}) cannot be laid out as a parameter blob: rows "
                           f"must be a multiple of {GROUP_ROWS} and cols a multiple of {TILE_COLS}")


def blob_size(rows: int, cols: int) -> int:
    """Bytes of the parameter blob of a (rows, cols) matrix."""
    check_dense_shape(rows, cols)
    return (rows // GROUP_ROWS) * (GROUP_OVERHEAD + GROUP_ROWS * cols)


def overhead_size(rows: int) -> int:
    """Bytes of the overhead (all groups together) of a matrix with ``rows`` output rows."""
    return (rows // GROUP_ROWS) * GROUP_OVERHEAD


def build_blob(weights: np.ndarray, overhead: bytes | np.ndarray,
               out: np.ndarray | None = None) -> np.ndarray:
    """Parameter blob (uint8 array) of an int8 ``weights`` matrix (rows, cols) with the template's overhead.

    ``overhead`` is the concatenation of every group's 512 overhead bytes (``rows // 64 * 512`` bytes).
    One strided XOR writes the weights into their tiles; ``out`` may be a preallocated ``blob_size`` buffer.
    """
    weights = np.asarray(weights)
    if weights.dtype != np.int8 or weights.ndim != 2:
        raise WeightsError(f"blob weights must be a 2-D int8 array, got {weights.dtype} "
                           f"with shape {weights.shape}")
    rows, cols = weights.shape
    size = blob_size(rows, cols)
    groups = rows // GROUP_ROWS
    head = np.frombuffer(overhead, dtype=np.uint8) if not isinstance(overhead, np.ndarray) else overhead
    if head.size != groups * GROUP_OVERHEAD:
        raise ModelFormatError(f"parameter overhead has {head.size} bytes, a ({rows}, {cols}) matrix needs "
                               f"{groups * GROUP_OVERHEAD} ({groups} groups of {GROUP_OVERHEAD})")
    if out is None:
        out = np.empty(size, dtype=np.uint8)
    elif out.dtype != np.uint8 or out.shape != (size,):
        raise ValueError(f"out must be a uint8 array of shape ({size},)")
    grouped = out.reshape(groups, GROUP_OVERHEAD + GROUP_ROWS * cols)
    grouped[:, :GROUP_OVERHEAD] = head.reshape(groups, GROUP_OVERHEAD)
    # The blob's byte order is (group, col_block, row_in_group, col_in_tile). A 4-column tile row is 4
    # contiguous bytes on both sides, so move it as one uint32: a quarter of the elements to transpose.
    words = grouped.view(np.uint32)  # every group starts 4-byte aligned (512 + 64 * cols bytes)
    tiles = words[:, GROUP_OVERHEAD // 4:].reshape(groups, cols // TILE_COLS, GROUP_ROWS)
    source = np.ascontiguousarray(weights).view(np.uint32).reshape(groups, GROUP_ROWS, cols // TILE_COLS)
    np.bitwise_xor(source.transpose(0, 2, 1), np.uint32(_SIGN_FLIP_WORD), out=tiles)
    return out


def parse_blob(blob: bytes | memoryview | np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`build_blob`: (int8 weights of shape (rows, cols), overhead bytes as uint8 array)."""
    data = np.frombuffer(blob, dtype=np.uint8) if not isinstance(blob, np.ndarray) else blob.view(np.uint8)
    size = blob_size(rows, cols)
    if data.size != size:
        raise ModelFormatError(f"parameter blob has {data.size} bytes, a ({rows}, {cols}) matrix "
                               f"needs {size}")
    groups = rows // GROUP_ROWS
    grouped = data.reshape(groups, GROUP_OVERHEAD + GROUP_ROWS * cols)
    overhead = grouped[:, :GROUP_OVERHEAD].reshape(-1).copy()
    tiles = grouped[:, GROUP_OVERHEAD:].reshape(groups, cols // TILE_COLS, GROUP_ROWS, TILE_COLS)
    weights = np.bitwise_xor(tiles.transpose(0, 2, 1, 3), np.uint8(SIGN_FLIP)).reshape(rows, cols)
    return weights.view(np.int8), overhead


def overhead_multipliers(overhead: np.ndarray) -> np.ndarray:
    """The float32 per-row requantization multipliers stored in the overhead (one per output row)."""
    groups = overhead.reshape(-1, GROUP_OVERHEAD)
    return np.ascontiguousarray(groups[:, : GROUP_ROWS * 4]).view("<f4").reshape(-1)
