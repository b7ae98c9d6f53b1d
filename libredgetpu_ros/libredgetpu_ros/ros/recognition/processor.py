"""The recognition node's processor (``ros/camera/processor.py``): an ``EmbeddingExtractor`` and an
``EmbeddingSimilarity`` database (the ``database`` file's, if any) opened from the node's parameters, and the
open-set decision as ``vision_msgs/Classification``; what the node runs per frame and what ``process-bag
--node-type recognition`` runs (``ros/bag_nodes.py``; the database is then the file's for the whole bag: the
live node's ``~/enroll`` / ``~/forget`` calls are not in a camera bag).

A frame holds one lock across its embedding and its match: the extractor is shared with ``~/enroll``
(LiteRT interpreters are not reentrant), and a database change (``~/enroll``, ``~/forget``, ``~/load``)
stages its weights on the engine's runner, which on an accelerator waits for the match in flight (one
device: ``matmul/device_runner.py``). The services wait for that lock at most ``FRAME_BUSY_WAIT_S`` and are
refused past it (a stuck frame would block the main executor for good: ``ros/frame_busy.py``). ``~/load``
reads and checks its file before it takes the lock and holds it for the swap only, so frames carry on
through a slow read. The database swaps its weights atomically, so a frame is matched against one database
version.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from std_msgs.msg import Header
from vision_msgs.msg import Classification, ObjectHypothesis

from libredgetpu_ros.errors import InputError
from libredgetpu_ros.ros.camera.processor import (
    CameraProcessor,
    FrameOutput,
    Wanted,
    Warn,
    shared_values,
    shared_warnings,
)
from libredgetpu_ros.ros.frame_busy import FRAME_BUSY_WAIT_S, frame_lock
from libredgetpu_ros.ros.params import dense_stream, share_stream

# The extractor's input size: the warm-up's blank frame without a first frame.
_WARM_UP_SIZE = 224

T = TypeVar("T")


def open_recognizer(p: Any, node: str = "") -> tuple[Any, Any]:
    """(extractor, database) the node's parameters ask for; nothing is left open when it fails; ``node``
    names their streams on a shared accelerator (``params.share_stream``)."""
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.embedding import EmbeddingSimilarity
    from libredgetpu_ros.robotics.extractor import EmbeddingExtractor

    # both on one accelerator: two streams of the node, each with its device_share_hz (edgetpu/broker.py)
    extractor = EmbeddingExtractor(p.model or None, backend=p.backend, device=p.device or None,
                                   rate_hz=p.device_share_hz,
                                   stream=share_stream(node, p.model or "embedding extractor"))
    engine = None
    try:
        engine = MatMulEngine.from_template(p.template, backend=p.backend, device=p.device or None,
                                            rate_hz=p.device_share_hz, stream=dense_stream(node, p.template))
        db = EmbeddingSimilarity(engine, extractor.dim)
        if p.database:
            db.load(p.database)
    except BaseException:
        extractor.close()
        if engine is not None:
            engine.close()
        raise
    return extractor, db


def decide(db: Any, embedding: Any, p: Any) -> Any:
    """The database's ``Decision`` for one embedding under the node's parameters (``top_k``, ``open_set``,
    ``open_set_margin``, ``min_score``)."""
    return db.classify(embedding, top_k=p.top_k, margin=p.open_set_margin if p.open_set else None,
                       min_score=p.min_score)


def classification(header: Header, decision: Any) -> Classification:
    """Known labels with their cosines; an open-set miss is one ``unknown`` hypothesis scored with the best
    cosine that fell short; a closed-set miss or an empty database: no hypothesis."""
    from libredgetpu_ros.robotics.embedding import UNKNOWN

    results = [ObjectHypothesis(class_id=m.label, score=float(m.score)) for m in decision.matches]
    if not results and decision.label == UNKNOWN:
        results = [ObjectHypothesis(class_id=UNKNOWN, score=float(decision.score))]
    return Classification(header=header, results=results)


def recognition_messages(header: Header, decision: Any, options: Any) -> list[tuple[str, Any]]:
    """(relative topic, message) for one frame's open-set decision (``decide``). ``options``: the node's
    parameters."""
    return [("classification", classification(header, decision))]


class RecognitionProcessor(CameraProcessor):
    """Recognition of one frame against the enrolled database; see the module docstring."""

    def __init__(self, params: Any, warn: Warn | None = None, node: str = "") -> None:
        super().__init__(params, warn, node)
        self.extractor, self.db = open_recognizer(params, node)
        self.out_types = {"classification": Classification}
        self._frame_lock = threading.Lock()  # a frame's embed + match vs the services (module docstring)
        self.last_rgb: np.ndarray | None = None  # the last frame (what ~/enroll enrols)
        self._last: tuple[str, float] | None = None
        self._unknown = 0

    def restart(self) -> None:
        """Activate: ~/enroll waits for a frame of now (it enrolled the last frame before the pause, another
        place by then, under the label given now); the last label and score are of that frame too."""
        self.last_rgb, self._last = None, None

    def embed(self, rgb: np.ndarray, region: tuple[int, int, int, int] | None = None) -> np.ndarray:
        """The embedding of ``rgb`` (of ``region``: x, y, width, height, when given), between frames."""
        with frame_lock(self._frame_lock, None):
            return self.extractor.embed(rgb, region=region)

    def enroll(self, label: str, rgb: np.ndarray, region: tuple[int, int, int, int] | None = None,
               wait_s: float | None = FRAME_BUSY_WAIT_S) -> int:
        """``~/enroll``: ``rgb``'s embedding (of ``region``) added under ``label``; its slot. A frame holding
        the lock past ``wait_s``: ``FrameBusyError``, nothing changed."""
        with frame_lock(self._frame_lock, wait_s):
            return self.db.add(label, self.extractor.embed(rgb, region=region))

    def change_database(self, change: Callable[[Any], T], wait_s: float | None = FRAME_BUSY_WAIT_S) -> T:
        """``change(db)`` (``~/forget``, ``~/load``'s swap) between two frames; a frame holding the lock past
        ``wait_s``: ``FrameBusyError``, nothing changed."""
        with frame_lock(self._frame_lock, wait_s):
            return change(self.db)

    def load_database(self, path: str, wait_s: float | None = FRAME_BUSY_WAIT_S) -> int:
        """``~/load``: the file read and checked with no lock held (frames carry on, however slow the
        read: a large file, a hung network mount), then its entries swapped in between two frames; the
        count. A bad file (InputError, OSError) or a frame holding the lock past ``wait_s``
        (``FrameBusyError``): nothing changed."""
        loaded = self.db.read(path)
        return self.change_database(lambda db: db.replace(loaded), wait_s)

    def warm_up(self, rgb: np.ndarray | None) -> None:
        blank = np.zeros((_WARM_UP_SIZE, _WARM_UP_SIZE, 3), np.uint8)
        with contextlib.suppress(InputError):  # embedding keeps no state; the database is not touched
            self.embed(rgb if rgb is not None else blank)

    def frame(self, header: Any, rgb: np.ndarray, wanted: Wanted | None = None,
              plane: Any = None, prepared: Any = None) -> FrameOutput:
        with self._frame_lock:  # the camera thread waits as long as it takes (a service at most 1 s)
            t0 = time.monotonic()
            embedding = self.extractor.embed(rgb)
            t1 = time.monotonic()
            decision = decide(self.db, embedding, self.params)
            t2 = time.monotonic()
        self.last_rgb = rgb
        self._last = None if decision.label is None else (decision.label, decision.score)
        if decision.label is not None and not decision.known:
            self._unknown += 1
        return FrameOutput(recognition_messages(header, decision, self.params),
                           {"embed": (t1 - t0) * 1e3, "match": (t2 - t1) * 1e3})

    def diagnostic_values(self) -> dict[str, object]:
        from libredgetpu_ros.models.template_catalogue import EXTRACTOR

        db, last, p = self.db, self._last, self.params
        return {"extractor": p.model or f"{EXTRACTOR} (catalogue default)",
                "backend": self.extractor.backend_name, "template": f"dense_{p.template}",
                "entries": len(db), "capacity": db.capacity, "labels": len(set(db.labels)),
                "threshold": db.threshold(p.open_set_margin if p.open_set else None, p.min_score),
                "last_label": last[0] if last else "", "last_score": last[1] if last else float("nan"),
                "unknown": self._unknown,
                # the extractor's and the database engine's streams on the accelerator the process shares
                **shared_values(self.extractor.shared_status(), "shared_extractor_"),
                **shared_values(self.db.engine.shared_status(), "shared_database_")}

    def diagnostic_warnings(self) -> list[str]:
        warnings = shared_warnings(self.extractor.shared_status()) or shared_warnings(
            self.db.engine.shared_status())  # one device: its fault reaches both streams, said once
        if len(self.db) == 0:
            warnings.append("recognition: the database is empty (call ~/enroll or ~/load)")
        return warnings

    def fallbacks(self) -> list[str]:
        return [self.extractor.runner.fallback, self.db.engine.fallback]

    def hardware_id(self) -> str:
        return self.params.device or self.params.backend

    def close(self) -> None:
        try:
            self.extractor.close()
        finally:
            self.db.engine.close()
