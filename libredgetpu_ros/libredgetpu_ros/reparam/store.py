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
- :class:`ParameterTarget` is what holds a copy of the parameters (a device, an interpreter): every
  accelerator runner of the package is one (the ``backends/`` backends and MatMul's runners). Its
  ``stage(set)`` makes a set usable before it is published.
- :meth:`ParameterStore.publish` builds the next set from the changed pieces (everything else is shared with
  the previous set, never copied), has every registered target stage it (the Edge TPU uploads it, the CPU
  backend builds its interpreter) and only then makes it current with one reference assignment. A failing
  target raises before the assignment: the previous set stays current, nothing half-written is ever
  visible. Readers take ``store.current`` once per inference, so a result always comes from one version.
- A target that was not asked to stage a set notices its ``key`` changed on the next run and catches up
  there (the Edge TPU re-uploads when the key changes).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from libredgetpu_ros.errors import WeightsError
from libredgetpu_ros.formats.darwinn_types import ExecutableType

SIGN_FLIP = 0x80  # the device's int8 convention: stored byte = int8 value XOR 0x80
BLOB_KINDS = ("pc", "eo", "sa")
# the blob kind of each DarwiNN executable type (every reader of a package's blobs names them this way)
BLOB_KIND_OF: dict[ExecutableType, str] = {
    ExecutableType.PARAMETER_CACHING: "pc", ExecutableType.EXECUTION_ONLY: "eo",
    ExecutableType.STAND_ALONE: "sa"}
_store_ids = itertools.count(1)
_KEEP: Any = object()


def _read_only(array: np.ndarray) -> np.ndarray:
    """``array`` marked read-only; copied first when it is a view of memory that stays writable elsewhere
    (a writable base array, a bytearray): marking the view alone would leave a published set changeable
    by whoever holds that memory, without a new version. Arrays that own their memory (everything the
    swaps build) are not copied."""
    base = array.base
    if base is not None and _writable_memory(base):
        array = array.copy()
    if array.flags.writeable:
        array.setflags(write=False)
    return array


def _writable_memory(base: object) -> bool:
    # NumPy collapses a chain of views to the first array that owns its memory, or to the first array over a
    # foreign buffer (frombuffer of a bytearray, an mmap): walk on from there to the buffer's exporter
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return True
        if base.base is None:
            return False  # owns its memory, read-only
        base = base.base
    try:
        return not memoryview(base).readonly  # type: ignore[arg-type]
    except TypeError:
        return True  # an exporter we cannot ask: assume writable


_UINT8, _INT8 = np.dtype(np.uint8), np.dtype(np.int8)
_FLIP_TABLE = bytes(b ^ SIGN_FLIP for b in range(256))
_SMALL = 4096  # below this many values a byte translation beats a NumPy ufunc call (no array set-up)


def int8_to_device(values: np.ndarray) -> np.ndarray:
    """The device bytes (uint8, flat) of int8 values; read-only for small inputs."""
    if not (type(values) is np.ndarray and values.dtype is _INT8 and values.flags.c_contiguous):
        values = np.ascontiguousarray(values, dtype=np.int8)
    if values.size <= _SMALL:
        return np.frombuffer(values.tobytes().translate(_FLIP_TABLE), np.uint8)
    return np.bitwise_xor(values.reshape(-1).view(np.uint8), np.uint8(SIGN_FLIP))


def device_to_int8(data: np.ndarray) -> np.ndarray:
    """Inverse of :func:`int8_to_device`."""
    return np.bitwise_xor(np.asarray(data, dtype=np.uint8), np.uint8(SIGN_FLIP)).view(np.int8)


class BlobPatch:
    """A blob described as ``base`` with ``device_bytes`` (already sign-flipped) at ``offsets``; see
    :func:`make_patch`. ``build()`` returns the full read-only blob (built once). Immutable by convention:
    every array it holds is read-only."""

    __slots__ = ("_built", "base", "device_bytes", "offsets")

    def __init__(self, base: np.ndarray, offsets: np.ndarray, device_bytes: np.ndarray) -> None:
        self.base = base  # read-only uint8
        self.offsets = offsets  # read-only intp, checked inside base
        self.device_bytes = device_bytes  # read-only uint8, one per offset
        self._built: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.base.size)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.base.shape

    def build(self) -> np.ndarray:
        built = self._built
        if built is None:  # two racing readers build the same bytes; either result is right
            out = self.base.copy()
            out[self.offsets] = self.device_bytes
            built = self._built = _read_only(out)
        return built


def make_patch(base: np.ndarray | BlobPatch, offsets: np.ndarray, values: np.ndarray) -> BlobPatch:
    """A :class:`BlobPatch` writing int8 ``values`` at byte ``offsets`` of ``base`` (checked here, so a bad
    sidecar fails before any blob exists). A patch of a patch at the same offsets replaces it (no chains);
    passing the very offsets array of the previous patch skips re-checking them (a swap of a few values then
    costs a few microseconds)."""
    if type(values) is not np.ndarray:
        values = np.asarray(values)
    if isinstance(base, BlobPatch) and base.offsets is offsets:  # checked when the first patch was made
        if (values.dtype is not _INT8 and values.dtype != _INT8) or values.size != offsets.size:
            raise WeightsError(f"patch needs {offsets.size} int8 value(s), got {values.dtype} x "
                               f"{values.size}")
        return BlobPatch(base.base, offsets, _read_only(int8_to_device(values)))
    if not (isinstance(offsets, np.ndarray) and offsets.dtype == np.intp and not offsets.flags.writeable):
        offsets = _read_only(np.array(offsets, dtype=np.intp))  # kept as given when already read-only intp
    if values.dtype != np.int8:
        raise WeightsError(f"patch values must be int8, got {values.dtype}")
    if offsets.shape != (values.size,):
        raise WeightsError(f"{values.size} value(s) but {offsets.size} offset(s)")
    if isinstance(base, BlobPatch) and np.array_equal(base.offsets, offsets):
        offsets, base = base.offsets, base.base
    elif isinstance(base, BlobPatch):
        base = base.build()
    if offsets.size and (int(offsets.min()) < 0 or int(offsets.max()) >= base.size):
        raise WeightsError(f"patch offsets span [{int(offsets.min())}, {int(offsets.max())}] outside the "
                           f"{base.size}-byte blob")
    return BlobPatch(base, offsets, _read_only(int8_to_device(values.reshape(-1))))


class ParameterSet(NamedTuple):
    """One immutable version of a model's parameters (see the module docstring). A named tuple: building one
    is part of every swap, and a frozen dataclass costs twice as much."""

    store_id: int
    version: int
    blobs: Mapping[str, np.ndarray | BlobPatch]  # "pc" | "eo" | "sa" -> device bytes (read with blob())
    twin: Mapping[int, np.ndarray]  # twin tensor index -> int8 values in the twin's shape, read-only
    payload: Any = None
    meta: Mapping[str, Any] | None = None  # what the publisher wants reported (e.g. clipping)

    def blob(self, kind: str) -> np.ndarray | None:
        """The full read-only uint8 blob of ``kind`` (None when the model has none)."""
        blob = self.blobs.get(kind)
        return blob.build() if isinstance(blob, BlobPatch) else blob

    @property
    def key(self) -> tuple[int, int]:
        """Unique across stores: two modules loaded from one template never share a device cache entry."""
        return self.store_id, self.version


@runtime_checkable
class ParameterTarget(Protocol):
    """Something that holds a copy of the parameters (a device, an interpreter) and must follow a publish:
    every accelerator runner (``backends.Backend``, ``matmul.runners.Runner``)."""

    def stage(self, parameters: ParameterSet) -> None:
        """Make ``parameters`` usable on this target before they are published (an upload, an interpreter
        build); raise to refuse them (then they are not published). Staging a set twice is cheap."""


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
        """``target.stage`` runs inside every later publish (before the new set becomes current); something
        that is not a :class:`ParameterTarget` is a TypeError (it would never see a new set)."""
        if not isinstance(target, ParameterTarget):
            raise TypeError(f"{type(target).__name__} is not a ParameterTarget (it has no stage(parameters))")
        with self._lock:
            self._targets.append(target)

    def publish(self, blobs: Mapping[str, np.ndarray | BlobPatch] | None = None,
                twin: Mapping[int, np.ndarray] | None = None, payload: Any = _KEEP,
                meta: Mapping[str, Any] | None = None) -> ParameterSet:
        """Make a new version from the changed blobs / twin tensors and swap it in; returns it.

        A replaced blob or twin tensor must keep its size (the instructions that read it are unchanged);
        every target stages the new set first and may refuse it by raising, leaving the old one current.
        """
        with self._lock:
            old = self._current
            new_blobs = dict(old.blobs) if blobs else old.blobs
            for kind, blob in (blobs or {}).items():
                new_blobs[kind] = _checked_blob(kind, blob, old.blobs)
            new_twin = dict(old.twin) if twin else old.twin
            for index, values in (twin or {}).items():
                index = int(index)
                new_twin[index] = _checked_twin(index, values, old.twin.get(index))
            new = ParameterSet(self._id, old.version + 1, new_blobs, new_twin,
                               old.payload if payload is _KEEP else payload, meta)
            for target in self._targets:
                target.stage(new)
            self._current = new  # the swap: one reference assignment
            return new



def _checked_blob(kind: str, blob: Any, blobs: Mapping[str, Any]) -> Any:
    """``blob`` if it may replace ``blobs[kind]`` (same size, uint8), else WeightsError. A patch of the
    current blob's own base passes on identity alone (the common swap: microseconds count)."""
    previous = blobs.get(kind)
    if previous is None:
        raise WeightsError(f"this model has no {kind!r} parameter blob (it has {sorted(blobs) or 'none'})")
    if isinstance(blob, BlobPatch):
        if blob.base is previous or (isinstance(previous, BlobPatch) and blob.base is previous.base):
            return blob
        array = blob.base
    else:
        array = blob = np.asarray(blob)
    if array.dtype != _UINT8 or array.shape != previous.shape:
        raise WeightsError(f"new {kind!r} blob is {array.dtype} {array.shape}; the model's is uint8 "
                           f"{previous.shape}")
    return blob if isinstance(blob, BlobPatch) else _read_only(blob)


def _checked_twin(index: int, values: Any, previous: np.ndarray | None) -> np.ndarray:
    """Read-only int8 ``values`` for twin tensor ``index``, shaped like its ``previous`` values."""
    if type(values) is not np.ndarray:
        values = np.asarray(values)
    if previous is not None and ((values.dtype is not _INT8 and values.dtype != _INT8)
                                 or values.shape != previous.shape):
        raise WeightsError(f"new values of twin tensor {index} are {values.dtype} {values.shape}; the tensor "
                           f"is int8 {previous.shape}")
    return _read_only(values)
