"""State decoding and weight-request validation for the control node: vectorised, no per-element Python."""

from __future__ import annotations

import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from libredgetpu_ros.errors import WeightsError


class JointOrder:
    """Maps a JointState's name list to the configured joint order; cached per distinct name list."""

    def __init__(self, joint_names: tuple[str, ...]) -> None:
        self._names = joint_names
        self._cache: dict[tuple[str, ...], np.ndarray | None] = {}

    def indices(self, msg_names: Sequence[str]) -> np.ndarray | None:
        """Indices into the message arrays, or None when a configured joint is missing."""
        key = tuple(msg_names)
        if key not in self._cache:
            where = {name: i for i, name in enumerate(key)}
            found = all(n in where for n in self._names)
            self._cache[key] = np.array([where[n] for n in self._names], np.intp) if found else None
        return self._cache[key]

    def select(self, values: np.ndarray, msg_names: Sequence[str]) -> np.ndarray | None:
        """The configured joints' entries of ``values`` (one of the message's arrays) in the configured
        order, or None when a configured joint is missing or the array is shorter than the name list says."""
        idx = self.indices(msg_names)
        if idx is None or (idx.size and idx.max() >= values.size):
            return None
        return values[idx]


def validate_weights_request(data: Sequence[float], bias: Sequence[float], rows: int, cols: int,
                             expected: tuple[int, int], w_min: np.ndarray, w_max: np.ndarray,
                             clip_policy: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(weights (rows, cols) float32, bias or None) from a request, or WeightsError saying what is wrong.

    ``w_min``/``w_max`` hold the representable range of each of the ``rows`` output rows; with
    ``clip_policy == "refuse"`` a value outside it refuses the request (the engine would clip it).
    """
    if (rows, cols) != expected:
        raise WeightsError(f"rows×cols = {rows}×{cols} does not match the controller "
                           f"(command_size×state_size = {expected[0]}×{expected[1]})")
    weights = np.frombuffer(as_float32_buffer(data), dtype=np.float32)
    if weights.size != rows * cols:
        raise WeightsError(f"len(data) = {weights.size}, expected rows*cols = {rows * cols}")
    weights = weights.reshape(rows, cols)
    # Per-row extremes: two reductions, no temporaries. NaN propagates through min/max and ±inf is an
    # extreme, so finite extremes mean finite data; the element masks are built only to word a refusal.
    row_min, row_max = weights.min(axis=1), weights.max(axis=1)
    if not (np.isfinite(row_min).all() and np.isfinite(row_max).all()):
        bad = ~np.isfinite(weights)
        r, c = np.argwhere(bad)[0]
        raise WeightsError(f"data has {int(bad.sum())} non-finite value(s), first at row {r}, col {c}: "
                           f"{weights[r, c]}")
    b = None
    if len(bias):
        b = np.frombuffer(as_float32_buffer(bias), dtype=np.float32)
        if b.size != rows:
            raise WeightsError(f"len(bias) = {b.size}, expected rows = {rows} (or empty for no bias)")
        if not np.isfinite(b).all():
            raise WeightsError(f"bias has a non-finite value at index {int(np.argmin(np.isfinite(b)))}")
    if clip_policy == "refuse" and ((row_min < w_min).any() or (row_max > w_max).any()):
        outside = (weights < w_min[:, None]) | (weights > w_max[:, None])
        if outside.any():
            r, c = np.argwhere(outside)[0]
            raise WeightsError(
                f"{int(outside.sum())} weight(s) outside the representable range, first at row {r}, col {c}: "
                f"{weights[r, c]:.6g} not in [{w_min[r]:.6g}, {w_max[r]:.6g}] (clip_policy=refuse)")
    return weights, b


def describe_non_finite(x: np.ndarray) -> str:
    """Why a state was refused for NaN/inf, naming the first bad element (only called on that path)."""
    bad = ~np.isfinite(x)
    first = int(np.argmax(bad))
    return f"state has {int(bad.sum())} non-finite value(s), first at index {first}: {x[first]}"


def as_float32_buffer(values: Sequence[float]) -> Any:
    """Zero-copy when rclpy hands us array.array('f') (it does for float32[] fields)."""
    if isinstance(values, array.array) and values.typecode == "f":
        return values
    return np.asarray(values, dtype=np.float32)


def to_float32_array(values: np.ndarray) -> array.array:
    """NumPy -> array.array('f') for a float32[] message field, one memcpy.

    Assigning a NumPy array to the field makes rclpy check every element in Python (~100 ms for 1M values);
    ``frombytes`` of a uint8 view copies once (``tobytes`` would add a second copy).
    """
    out = array.array("f")
    out.frombytes(np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint8))
    return out
