"""Versioned parameter sets: new int8 values -> new parameter blobs + CPU-twin tensors, published atomically.

A compiled Edge TPU model carries its constants in the DarwiNN executables' parameter blobs (the
PARAMETER_CACHING blob ``"pc"``, the EXECUTION_ONLY blob ``"eo"``, or a STAND_ALONE blob ``"sa"``); the
device reads each int8 value as ``value ^ 0x80``. Its CPU twin (the uncompiled model) holds the same values as
int8 tensors. Changing a constant without ``edgetpu_compiler`` means writing both, as one new version:

- :class:`ParameterSet` is immutable: a version number, read-only blobs by executable kind, read-only twin
  tensors by twin tensor index, and an optional owner payload (MatMul keeps its weights and bias there). A
  blob may be given as a :class:`BlobPatch` (base blob + int8 values at byte offsets): it is built into a full
  blob the first time something reads it (an upload), so a swap of a few values costs a few values, and a
  CPU-only run never builds it.
- :meth:`ParameterStore.publish` builds the next set from the changed pieces (everything else is shared with
  the previous set, never copied), lets every registered target prepare it (the Edge TPU backend uploads it,
  the CPU backend builds its interpreter) and only then makes it current with one reference assignment. A
  failing target raises before the assignment: the previous set stays current, nothing half-written is ever
  visible. Readers take ``store.current`` once per inference, so a result always comes from one version.
- A backend that was not asked to prepare a set notices its ``key`` changed on the next run and catches up
  there (the Edge TPU re-uploads when the version changes).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from libredgetpu_ros.errors import WeightsError

SIGN_FLIP = 0x80  # the device's int8 convention: stored byte = int8 value XOR 0x80
BLOB_KINDS = ("pc", "eo", "sa")
_store_ids = itertools.count(1)
_KEEP: Any = object()


def _read_only(array: np.ndarray) -> np.ndarray:
    if array.flags.writeable:
        array.setflags(write=False)
    return array


def int8_to_device(values: np.ndarray) -> np.ndarray:
    """The device bytes (uint8) of int8 values."""
    return np.bitwise_xor(np.ascontiguousarray(values, dtype=np.int8).view(np.uint8), np.uint8(SIGN_FLIP))


def device_to_int8(data: np.ndarray) -> np.ndarray:
    """Inverse of :func:`int8_to_device`."""
    return np.bitwise_xor(np.asarray(data, dtype=np.uint8), np.uint8(SIGN_FLIP)).view(np.int8)


@dataclass(frozen=True, eq=False)
class BlobPatch:
    """A blob described as ``base`` with ``device_bytes`` (already sign-flipped) at ``offsets``; see
    :func:`make_patch`. ``build()`` returns the full read-only blob (built once)."""

    base: np.ndarray  # read-only uint8
    offsets: np.ndarray  # intp, checked inside base
    device_bytes: np.ndarray  # uint8, same length as offsets
    _built: list = field(default_factory=list, repr=False)

    @property
    def size(self) -> int:
        return int(self.base.size)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.base.shape

    def build(self) -> np.ndarray:
        if not self._built:  # two racing readers build the same bytes; either result is right
            out = self.base.copy()
            out[self.offsets] = self.device_bytes
            self._built.append(_read_only(out))
        return self._built[0]


def make_patch(base: np.ndarray | BlobPatch, offsets: np.ndarray, values: np.ndarray) -> BlobPatch:
    """A :class:`BlobPatch` writing int8 ``values`` at byte ``offsets`` of ``base`` (checked here, so a bad
    sidecar fails before any blob exists). A patch of a patch at the same offsets replaces it (no chains)."""
    offsets = np.asarray(offsets, dtype=np.intp)
    values = np.asarray(values)
    if values.dtype != np.int8:
        raise WeightsError(f"patch values must be int8, got {values.dtype}")
    if offsets.shape != (values.size,):
        raise WeightsError(f"{values.size} value(s) but {offsets.size} offset(s)")
    if isinstance(base, BlobPatch) and (base.offsets is offsets or np.array_equal(base.offsets, offsets)):
        offsets, base = base.offsets, base.base
    elif isinstance(base, BlobPatch):
        base = base.build()
    if offsets.size and (int(offsets.min()) < 0 or int(offsets.max()) >= base.size):
        raise WeightsError(f"patch offsets span [{int(offsets.min())}, {int(offsets.max())}] outside the "
                           f"{base.size}-byte blob")
    return BlobPatch(base, offsets, _read_only(int8_to_device(values.reshape(-1))))


@dataclass(frozen=True, eq=False)
class ParameterSet:
    """One immutable version of a model's parameters (see the module docstring)."""

    store_id: int
    version: int
    blobs: Mapping[str, np.ndarray | BlobPatch]  # "pc" | "eo" | "sa" -> device bytes (read with blob())
    twin: Mapping[int, np.ndarray]  # twin tensor index -> int8 values in the twin's shape, read-only
    payload: Any = None
    meta: dict[str, Any] = field(default_factory=dict)  # what the publisher wants reported (e.g. clipping)

    def blob(self, kind: str) -> np.ndarray | None:
        """The full read-only uint8 blob of ``kind`` (None when the model has none)."""
        blob = self.blobs.get(kind)
        return blob.build() if isinstance(blob, BlobPatch) else blob

    @property
    def key(self) -> tuple[int, int]:
        """Unique across stores: two modules loaded from one template never share a device cache entry."""
        return self.store_id, self.version


class ParameterTarget(Protocol):
    """Something that holds a copy of the parameters (a device, an interpreter) and must follow a publish."""

    def prepare(self, parameters: ParameterSet) -> None:
        """Make ``parameters`` usable; raise to refuse them (then they are not published)."""


class ParameterStore:
    """The current :class:`ParameterSet` of one loaded model and the one way to replace it."""

    def __init__(self, blobs: Mapping[str, np.ndarray], twin: Mapping[int, np.ndarray] | None = None,
                 payload: Any = None) -> None:
        self._id = next(_store_ids)
        unknown = set(blobs) - set(BLOB_KINDS)
        if unknown:
            raise ValueError(f"unknown blob kind(s) {sorted(unknown)}; expected {BLOB_KINDS}")
        self._current = ParameterSet(
            self._id, 0, {k: _read_only(np.asarray(v, dtype=np.uint8)) for k, v in blobs.items()},
            {int(k): _read_only(np.asarray(v, dtype=np.int8)) for k, v in (twin or {}).items()}, payload)
        self._targets: list[ParameterTarget] = []
        self._lock = threading.Lock()

    @property
    def current(self) -> ParameterSet:
        return self._current

    @property
    def version(self) -> int:
        return self._current.version

    def add_target(self, target: ParameterTarget) -> None:
        """``target.prepare`` runs inside every later publish (before the new set becomes current)."""
        with self._lock:
            self._targets.append(target)

    def remove_target(self, target: ParameterTarget) -> None:
        with self._lock:
            if target in self._targets:
                self._targets.remove(target)

    def publish(self, blobs: Mapping[str, np.ndarray | BlobPatch] | None = None,
                twin: Mapping[int, np.ndarray] | None = None, payload: Any = _KEEP,
                meta: Mapping[str, Any] | None = None,
                extra_targets: Iterable[ParameterTarget] = ()) -> ParameterSet:
        """Make a new version from the changed blobs / twin tensors and swap it in; returns it.

        A replaced blob or twin tensor must keep its size (the instructions that read it are unchanged);
        every target prepares the new set first and may refuse it by raising, leaving the old one current.
        """
        with self._lock:
            old = self._current
            new_blobs = dict(old.blobs)
            for kind, blob in (blobs or {}).items():
                blob = blob if isinstance(blob, BlobPatch) else np.asarray(blob)
                if kind not in old.blobs:
                    raise WeightsError(f"this model has no {kind!r} parameter blob (it has "
                                       f"{sorted(old.blobs) or 'none'})")
                dtype = blob.base.dtype if isinstance(blob, BlobPatch) else blob.dtype
                if dtype != np.uint8 or blob.shape != old.blobs[kind].shape:
                    raise WeightsError(f"new {kind!r} blob is {blob.dtype} {blob.shape}; the model's is "
                                       f"uint8 {old.blobs[kind].shape}")
                new_blobs[kind] = blob if isinstance(blob, BlobPatch) else _read_only(blob)
            new_twin = dict(old.twin)
            for index, values in (twin or {}).items():
                values = np.asarray(values)
                previous = old.twin.get(int(index))
                if previous is not None and (values.dtype != np.int8 or values.shape != previous.shape):
                    raise WeightsError(f"new values of twin tensor {index} are {values.dtype} "
                                       f"{values.shape}; the tensor is int8 {previous.shape}")
                new_twin[int(index)] = _read_only(values)
            new = ParameterSet(self._id, old.version + 1, new_blobs, new_twin,
                               old.payload if payload is _KEEP else payload, dict(meta or {}))
            for target in [*self._targets, *extra_targets]:
                target.prepare(new)
            self._current = new  # the swap: one reference assignment
            return new
