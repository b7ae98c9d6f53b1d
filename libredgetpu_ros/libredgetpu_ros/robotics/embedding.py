"""EmbeddingSimilarity: cosine search over a database held as MatMul engine weight rows, and the extractor.

Place recognition / object re-identification: an image -> an embedding (``EmbeddingExtractor``, a MobileNet
feature extractor on the Edge TPU or its CPU twin) -> the most similar enrolled entries (one engine matmul).

Layout. Entries are L2-normalised D-vectors. A template of ``rows x cols`` holds each entry in ``chunks =
ceil(D / cols)`` consecutive rows (the vector zero-padded to ``chunks * cols``: padding adds nothing to a dot
product), so ``capacity = rows // chunks``; a query is a batch of its ``chunks`` pieces and the score of entry
i is the sum over k of output[k, i * chunks + k]. A 1024-d database fits dense_1024 (1024 entries), dense_512
(256) and dense_256 (64). A file never loses entries or dimensions when loaded: more entries than the
capacity, or another D, is an error.

Scaling. Entry i is stored as ``g_i * e_i`` with ``g_i = min_r(127 s_r) / max|e_i|`` (its largest component on
the int8 grid's end: the full 8 bits, LibrEdgeTPU uses a fixed factor and gets ~5 levels); a query ``q`` is
sent as ``g_q * q`` with ``g_q`` the largest value that keeps it inside the input range and every |output| <=
g_i g_q <= the output range (|partial cosine| <= 1), so nothing saturates and the score ``output / (g_i g_q)``
is the cosine to within ``engine.error_bound`` / (g_i g_q) (``query(..., bound=True)``).

Open set. A closed set always names an enrolled label, however unrelated the image. ``classify`` says
``UNKNOWN`` unless the best cosine clears a threshold calibrated from the enrolled set itself: the
*background* is the highest cosine between two entries of different labels (how close an image of another
class comes; these ReLU embeddings of unrelated photos share a large common part), and the threshold is
``background + margin * (1 - background)`` (``margin`` 0.2 by default), or ``min_score`` if higher. With
fewer than two labels there is nothing to calibrate on and ``SINGLE_CLASS_BACKGROUND`` stands in.

Swaps. Every change builds the whole weight matrix and swaps it in through ``set_weights`` (one
atomic version); the labels and gains of that version are registered under its number before the swap,
and a query reads them by the version its matmul ran on: a query never mixes two databases.
"""

from __future__ import annotations

import functools
import json
import math
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from libredgetpu_ros.atomicio import atomic_open
from libredgetpu_ros.errors import ConfigError, InputError
from libredgetpu_ros.matmul import MatMulEngine
from libredgetpu_ros.npyfile import read_npz_meta
from libredgetpu_ros.textdata import clip_repr

DATABASE_FORMAT = "libredgetpu_ros.embedding_db.v1"
MAX_DATABASE_BYTES = 512 << 20
MAX_LABEL_CHARS = 256
UNKNOWN = "unknown"  # the open-set answer; reserved, never enrolled
DEFAULT_OPEN_SET_MARGIN = 0.2  # fraction of (1 - background) a match must clear above the background
SINGLE_CLASS_BACKGROUND = 0.5  # background with one label (fixture photos of unrelated scenes: 0.31-0.51)
# The metadata (JSON: format, size, labels) as a NumPy string (4 bytes a character): at worst ~6 x the labels'
# UTF-8 (JSON escapes) of 1,000 full-length labels; a 100 MB string took the recognition node to 1.18 GB.
MAX_META_BYTES = 16 << 20
_KEEP_VERSIONS = 8  # database snapshots kept for queries still running on an older weight version


@dataclass(frozen=True)
class Match:
    label: str
    score: float  # cosine similarity in [-1, 1] (int8 resolution)
    entry: int  # slot of the best entry with this label
    bound: float | None = None  # |score - float cosine| bound when asked for


@dataclass(frozen=True)
class Decision:
    """Open-set answer for one query: ``label`` is an enrolled label or ``UNKNOWN``."""

    label: str | None  # None: the database is empty
    score: float  # best enrolled cosine (NaN when empty)
    threshold: float  # what a match had to reach
    matches: tuple[Match, ...]  # the top_k labels at or above the threshold, best first

    @property
    def known(self) -> bool:
        return bool(self.matches)


@dataclass(frozen=True, eq=False)
class _Snapshot:
    labels: tuple[str | None, ...]  # per slot; None = free
    normalized: np.ndarray  # float32 (capacity, D), zero rows for free slots, read-only
    gains: np.ndarray  # float64 (capacity,), 0 for free slots
    background: float | None = None  # highest cosine between entries of different labels; None: < 2 labels

    @functools.cached_property
    def divisor(self) -> np.ndarray:
        """``gains`` with NaN for free slots: a score divided by it is NaN there, no mask needed."""
        return np.where(self.gains > 0, self.gains, np.nan)

    @functools.cached_property
    def gain_max(self) -> float:
        return float(self.gains.max(initial=0.0))

    @classmethod
    def make(cls, labels: Sequence[str | None], normalized: np.ndarray, gains: np.ndarray) -> _Snapshot:
        normalized.setflags(write=False)
        return cls(tuple(labels), normalized, gains, _background(labels, normalized))


def _background(labels: Sequence[str | None], normalized: np.ndarray) -> float | None:
    slots = [slot for slot, label in enumerate(labels) if label is not None]
    groups: dict[str, list[int]] = {}
    for row, slot in enumerate(slots):
        groups.setdefault(labels[slot], []).append(row)  # type: ignore[arg-type]
    if len(groups) < 2:
        return None
    vectors = normalized[slots].astype(np.float64)
    gram = vectors @ vectors.T
    # Same label (and the diagonal): not background. By group, not an n x n comparison of label strings
    # (20 ms at 1,024 entries).
    np.fill_diagonal(gram, -np.inf)
    for rows in groups.values():
        if len(rows) > 1:
            gram[np.ix_(rows, rows)] = -np.inf
    return float(np.clip(gram.max(), -1.0, 1.0))


def open_set_threshold(background: float | None, margin: float | None = DEFAULT_OPEN_SET_MARGIN,
                       min_score: float = -1.0) -> float:
    """The cosine a match must reach: ``min_score`` alone for a closed set (``margin`` None), else the
    higher of it and ``background + margin * (1 - background)``."""
    if margin is None:
        return float(min_score)
    if not 0.0 <= margin <= 1.0:
        raise InputError(f"open-set margin must be in [0, 1], got {margin}")
    bg = SINGLE_CLASS_BACKGROUND if background is None else background
    return max(float(min_score), bg + margin * (1.0 - bg))


def check_label(label: object) -> str:
    """The NFC form of a valid label: a string of 1..MAX_LABEL_CHARS printable characters (no control,
    line-break or format characters), no surrounding whitespace, not ``UNKNOWN``; InputError otherwise."""
    if not isinstance(label, str):
        raise InputError(f"label must be a string, got {type(label).__name__}")
    if len(label) > MAX_LABEL_CHARS:
        raise InputError(f"label has {len(label)} characters, at most {MAX_LABEL_CHARS}: {clip_repr(label)}")
    text = unicodedata.normalize("NFC", label)
    if not text.strip():
        raise InputError(f"label must be a non-empty string of at most {MAX_LABEL_CHARS} characters, "
                         f"got {clip_repr(label)}")
    if text != text.strip():
        raise InputError(f"label {clip_repr(label)} starts or ends with whitespace")
    bad = next((c for c in text if not c.isprintable()), None)
    if bad is not None:
        raise InputError(f"label {clip_repr(label)} holds the non-printable character U+{ord(bad):04X}")
    if text == UNKNOWN:
        raise InputError(f"label {UNKNOWN!r} is reserved for the open-set answer")
    return text


def l2_normalize(vector: object, dim: int, what: str = "embedding") -> np.ndarray:
    """float64 unit vector of a finite, non-zero (dim,) array; InputError naming the problem otherwise."""
    try:
        array = np.asarray(vector, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} is not numeric: {exc}") from exc
    if array.shape != (dim,):
        raise InputError(f"{what} has {array.size} values; this database holds {dim}-d embeddings")
    if not np.isfinite(array).all():
        raise InputError(f"{what} contains NaN/inf")
    norm = float(np.linalg.norm(array))
    if norm == 0.0:
        raise InputError(f"{what} is all zeros (no direction to compare)")
    return array / norm


class EmbeddingSimilarity:
    """A database of L2-normalised embeddings on a MatMul engine of its own (no other user may swap its
    weights); ``query`` may run while another thread changes the database."""

    def __init__(self, engine: MatMulEngine, embedding_dim: int) -> None:
        if embedding_dim < 1:
            raise ConfigError(f"embedding_dim must be >= 1, got {embedding_dim}")
        self.engine = engine
        self.embedding_dim = int(embedding_dim)
        self.chunks = math.ceil(self.embedding_dim / engine.cols)
        self.capacity = engine.rows // self.chunks
        if self.capacity < 1:
            raise ConfigError(f"a {engine.rows}x{engine.cols} template cannot hold {embedding_dim}-d "
                              f"embeddings")
        _, hi = engine.weight_range()
        self._row_limit = hi.astype(np.float64)  # 127 * s_r
        lo_in, hi_in = engine.quantization.input_range()
        lo_out, hi_out = engine.quantization.output_range()
        self._input_limit = min(-lo_in, hi_in)
        self._output_limit = min(-lo_out, hi_out) * 0.999  # strictly inside: rounding never saturates
        self._write_lock = threading.Lock()
        empty = _Snapshot((None,) * self.capacity, np.zeros((self.capacity, self.embedding_dim), np.float32),
                          np.zeros(self.capacity))
        self._matrix = np.zeros((engine.rows, engine.cols), dtype=np.float32)
        self._snapshots: dict[int, _Snapshot] = {}
        # Output element of entry i's k-th chunk: [k, i * chunks + k] (built once, not per query).
        self._chunk_rows = np.arange(self.chunks)[None, :]
        self._entry_cols = np.arange(self.capacity)[:, None] * self.chunks + self._chunk_rows
        self._publish(empty)
        # Compile (or load from numba's cache) the query path now, not on the first camera frame.
        engine.matmul(np.zeros((self.chunks, engine.cols)))

    # -- reading ---------------------------------------------------------------------------------------
    @property
    def _current(self) -> _Snapshot:
        return self._snapshots[self.engine.version]

    def __len__(self) -> int:
        return sum(label is not None for label in self._current.labels)

    @property
    def labels(self) -> list[str]:
        """Labels of the stored entries, one per entry (a label may have several entries), by slot."""
        return [label for label in self._current.labels if label is not None]

    def entries(self) -> list[tuple[int, str]]:
        return [(slot, label) for slot, label in enumerate(self._current.labels) if label is not None]

    def _query_batch(self, normalized: np.ndarray) -> tuple[np.ndarray, float]:
        """(chunks, cols) engine input for a unit vector, and its gain ``g_q``."""
        g_max = self._current.gain_max or 1.0
        g_q = min(self._input_limit / float(np.max(np.abs(normalized))), self._output_limit / g_max)
        size = self.chunks * self.engine.cols
        if size == self.embedding_dim:
            return (normalized * g_q).reshape(self.chunks, self.engine.cols), g_q
        padded = np.zeros(size)
        padded[: self.embedding_dim] = normalized * g_q
        return padded.reshape(self.chunks, self.engine.cols), g_q

    def scores(self, embedding: object,
               bound: bool = False) -> tuple[np.ndarray, _Snapshot, np.ndarray | None]:
        """Cosine scores of every slot (free slots: NaN), the snapshot they belong to, optional bounds."""
        normalized = l2_normalize(embedding, self.embedding_dim, "query embedding")
        for _ in range(_KEEP_VERSIONS):
            batch, g_q = self._query_batch(normalized)
            out, version = self.engine.matmul_versioned(batch)
            snapshot = self._snapshots.get(version)
            # g_q came from the newest gains: retry if the version that ran could have saturated with it.
            if snapshot is not None and snapshot.gain_max * g_q <= self._output_limit:
                break
        else:  # pragma: no cover - needs _KEEP_VERSIONS swaps during each of as many queries
            raise InputError("the database changed faster than a query could run")
        if self.chunks == 1:
            raw = out[0, : self.capacity].astype(np.float64)
        else:
            raw = out[self._chunk_rows, self._entry_cols].sum(axis=1, dtype=np.float64)  # (capacity,)
        divisor = snapshot.divisor * g_q  # NaN for free slots
        # int8 rounding can carry an exact match just past 1: a cosine stays in [-1, 1]
        score = np.clip(raw / divisor, -1.0, 1.0)
        bounds = None
        if bound:
            err = self.engine.error_bound(batch)
            bounds = err[self._chunk_rows, self._entry_cols].sum(axis=1) / divisor
        return score, snapshot, bounds

    def query(self, embedding: object, top_k: int = 1, bound: bool = False) -> list[Match]:
        """The ``top_k`` best labels (each by its best entry), best first. Empty database: empty list."""
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        score, snapshot, bounds = self.scores(embedding, bound)
        return self._ranked(score, snapshot, bounds, top_k)

    @staticmethod
    def _ranked(score: np.ndarray, snapshot: _Snapshot, bounds: np.ndarray | None,
                top_k: int) -> list[Match]:
        """Best entry of each of the ``top_k`` best labels, best first, ties by slot. Only the few best
        entries are sorted (a partition finds them, every entry tied with the last included); the full
        sort runs when they hold fewer than ``top_k`` labels."""
        key = -score  # ascending; free slots are NaN, which sorts and partitions last
        wanted = min(key.size, 4 * top_k)
        if wanted < key.size:
            kth = np.partition(key, wanted - 1)[wanted - 1]
            candidates = np.flatnonzero(key <= kth) if kth == kth else np.flatnonzero(key == key)
            matches = _walk(candidates[np.argsort(key[candidates], kind="stable")], score, snapshot, bounds,
                            top_k)
            if len(matches) == top_k or candidates.size == np.count_nonzero(key == key):
                return matches
        return _walk(np.argsort(key, kind="stable"), score, snapshot, bounds, top_k)

    def classify(self, embedding: object, top_k: int = 1, margin: float | None = DEFAULT_OPEN_SET_MARGIN,
                 min_score: float = -1.0) -> Decision:
        """Open-set decision: the ``top_k`` labels whose best cosine reaches the threshold calibrated from
        the database the query ran on (``open_set_threshold``; ``margin`` None: a closed set filtered by
        ``min_score``), ``UNKNOWN`` when none does."""
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        score, snapshot, _ = self.scores(embedding)
        threshold = open_set_threshold(snapshot.background, margin, min_score)
        ranked = self._ranked(score, snapshot, None, top_k)
        if not ranked:
            return Decision(None, math.nan, threshold, ())
        known = tuple(m for m in ranked if m.score >= threshold)
        return Decision(known[0].label if known else UNKNOWN, ranked[0].score, threshold, known)

    def threshold(self, margin: float | None = DEFAULT_OPEN_SET_MARGIN, min_score: float = -1.0) -> float:
        """The open-set threshold of the current database."""
        return open_set_threshold(self._current.background, margin, min_score)

    # -- changing --------------------------------------------------------------------------------------
    def _gain(self, normalized: np.ndarray, slot: int) -> float:
        rows = slice(slot * self.chunks, (slot + 1) * self.chunks)
        return float(self._row_limit[rows].min()) / float(np.max(np.abs(normalized)))

    def _publish(self, snapshot: _Snapshot, changed: Sequence[int] | None = None) -> None:
        """Swap the engine to ``snapshot`` (caller holds the write lock, or is __init__)."""
        c, cols = self.chunks, self.engine.cols
        slots = range(self.capacity) if changed is None else changed
        for slot in slots:
            padded = np.zeros(c * cols, dtype=np.float64)
            padded[: self.embedding_dim] = snapshot.normalized[slot] * snapshot.gains[slot]
            self._matrix[slot * c:(slot + 1) * c] = padded.reshape(c, cols)
        version = self.engine.version + 1
        self._snapshots[version] = snapshot  # readable before the swap makes it current
        try:
            report = self.engine.set_weights(self._matrix)
        except BaseException:
            del self._snapshots[version]
            old = self._snapshots[self.engine.version]
            for slot in slots:  # put the rows of the current version back
                padded = np.zeros(c * cols)
                padded[: self.embedding_dim] = old.normalized[slot] * old.gains[slot]
                self._matrix[slot * c:(slot + 1) * c] = padded.reshape(c, cols)
            raise
        if report.version != version or report.clipped_count:
            raise RuntimeError(f"embedding database swap went to version {report.version} (expected "
                               f"{version}) with {report.clipped_count} clipped: is the engine shared?")
        for old_version in sorted(self._snapshots)[:-_KEEP_VERSIONS]:
            del self._snapshots[old_version]

    def add(self, label: str, embedding: object) -> int:
        """Enrol one embedding under ``label`` (labels may repeat); returns its slot. Full: InputError."""
        return self.add_many([(label, embedding)])[0]

    def add_many(self, items: Sequence[tuple[str, object]]) -> list[int]:
        """Enrol several embeddings in one swap (all or none)."""
        checked = [(check_label(label), l2_normalize(e, self.embedding_dim)) for label, e in items]
        with self._write_lock:
            current = self._current
            free = [slot for slot, label in enumerate(current.labels) if label is None]
            if len(checked) > len(free):
                raise InputError(f"embedding database is full: capacity {self.capacity} entries "
                                 f"({self.embedding_dim}-d in {self.chunks} row(s) each on a "
                                 f"{self.engine.rows}x{self.engine.cols} template), {len(free)} free, "
                                 f"{len(checked)} asked; forget some or use a larger template")
            labels, normalized, gains = list(current.labels), current.normalized.copy(), current.gains.copy()
            slots = free[: len(checked)]
            for slot, (label, vector) in zip(slots, checked, strict=True):
                labels[slot] = label
                normalized[slot] = vector
                gains[slot] = self._gain(normalized[slot].astype(np.float64), slot)
            self._publish(_Snapshot.make(labels, normalized, gains), slots)
        return slots

    def remove(self, label: str) -> int:
        """Forget every entry of ``label``; returns how many. Unknown label: InputError."""
        label = check_label(label)
        with self._write_lock:
            current = self._current
            slots = [slot for slot, name in enumerate(current.labels) if name == label]
            if not slots:
                known = sorted(set(self.labels))
                shown = ", ".join(clip_repr(k) for k in known[:10]) + (", ..." if len(known) > 10 else "")
                raise InputError(f"no entry labelled {clip_repr(label)} (known: [{shown}])")
            labels, normalized, gains = list(current.labels), current.normalized.copy(), current.gains.copy()
            for slot in slots:
                labels[slot] = None
                normalized[slot] = 0.0
                gains[slot] = 0.0
            self._publish(_Snapshot.make(labels, normalized, gains), slots)
        return len(slots)

    def clear(self) -> None:
        with self._write_lock:
            empty = np.zeros((self.capacity, self.embedding_dim), np.float32)
            self._publish(_Snapshot.make((None,) * self.capacity, empty, np.zeros(self.capacity)))

    # -- persistence -----------------------------------------------------------------------------------
    def save(self, path: str | Path) -> int:
        """Write the entries (labels + unit float32 vectors, no pickles) to ``path`` atomically; count."""
        snapshot = self._current
        slots = [slot for slot, label in enumerate(snapshot.labels) if label is not None]
        meta = {"format": DATABASE_FORMAT, "embedding_dim": self.embedding_dim,
                "labels": [snapshot.labels[s] for s in slots]}
        with atomic_open(path) as handle:  # a failed write (disk full) leaves the old file whole
            np.savez(handle, embeddings=snapshot.normalized[slots], meta=np.array(json.dumps(meta)))
        return len(slots)

    def load(self, path: str | Path) -> int:
        """Replace the database with a saved one (any template size or scale); InputError, old one kept.
        ``read`` then ``replace``: a caller that serialises changes with other work (the recognition node's
        frame lock) reads the file outside its lock and holds it for ``replace`` only."""
        return self.replace(self.read(path))

    def read(self, path: str | Path) -> LoadedDatabase:
        """The entries of a saved database, read and checked for this one, its whole new version built; no
        lock taken and nothing changed (a slow or hung file system stalls this call only). InputError
        naming the file's problem."""
        path = Path(path)
        # at most float64 for every slot: a file of more is refused from its header, never read (a 512 MiB
        # array passed the file budget and was read whole before the capacity check)
        labels, vectors = read_database(path, self.capacity * self.embedding_dim * 8)
        if vectors.shape[1] != self.embedding_dim:
            raise InputError(f"{path}: holds {vectors.shape[1]}-d embeddings, this database "
                             f"{self.embedding_dim}-d")
        if len(labels) > self.capacity:
            raise InputError(f"{path}: holds {len(labels)} entries, this template's capacity is "
                             f"{self.capacity} (entries are never dropped: use a larger template)")
        names: list[str | None] = [None] * self.capacity
        normalized = np.zeros((self.capacity, self.embedding_dim), np.float32)
        gains = np.zeros(self.capacity)
        for slot, (label, vector) in enumerate(zip(labels, vectors, strict=True)):
            names[slot] = check_label(label)
            normalized[slot] = l2_normalize(vector, self.embedding_dim, f"{path}: entry {slot}")
            gains[slot] = self._gain(normalized[slot].astype(np.float64), slot)  # the engine's fixed scales
        return LoadedDatabase(path, len(labels), self, _Snapshot.make(names, normalized, gains))

    def replace(self, loaded: LoadedDatabase) -> int:
        """Swap in the entries ``read`` returned (one weight swap); their count. InputError for another
        database's ``read`` (its gains are of that engine's scales)."""
        if loaded.database is not self:
            raise InputError(f"{loaded.path}: read for another embedding database, not this one")
        with self._write_lock:
            self._publish(loaded.snapshot)
        return loaded.count


@dataclass(frozen=True, eq=False)
class LoadedDatabase:
    """A database file read and checked by ``EmbeddingSimilarity.read``, ready for its ``replace``."""

    path: Path
    count: int  # entries
    database: EmbeddingSimilarity = field(repr=False)
    snapshot: _Snapshot = field(repr=False)


def _walk(order: np.ndarray, score: np.ndarray, snapshot: _Snapshot, bounds: np.ndarray | None,
          top_k: int) -> list[Match]:
    """The first entry of each label along ``order``, up to ``top_k`` of them."""
    matches: list[Match] = []
    seen: set[str] = set()
    for slot in order.tolist():
        label = snapshot.labels[slot]
        if label is None or label in seen:
            continue
        seen.add(label)
        matches.append(Match(label, float(score[slot]), slot,
                             None if bounds is None else float(bounds[slot])))
        if len(matches) == top_k:
            break
    return matches


def read_database(path: Path, max_vector_bytes: int = MAX_DATABASE_BYTES) -> tuple[list[str], np.ndarray]:
    """(labels, float32 (n, D) vectors) of a database file, its embeddings array at most ``max_vector_bytes``;
    InputError naming the problem."""
    # npyfile: every array's size checked against the file before NumPy allocates it; no pickles.
    vectors, meta = read_npz_meta(path, "embedding database file", DATABASE_FORMAT, "embeddings",
                                  max_bytes=MAX_DATABASE_BYTES, array_bytes=max_vector_bytes,
                                  meta_bytes=MAX_META_BYTES)
    labels = meta.get("labels")
    if (vectors.ndim != 2 or vectors.dtype.kind != "f" or not isinstance(labels, list)
            or len(labels) != len(vectors) or vectors.shape[1] != meta.get("embedding_dim")):
        raise InputError(f"{path}: embeddings {vectors.dtype} {vectors.shape} do not match "
                         f"{len(labels) if isinstance(labels, list) else clip_repr(labels)} labels of "
                         f"{clip_repr(meta.get('embedding_dim'))}-d")
    return labels, vectors.astype(np.float32)
