"""Recognition node: camera images in, ``vision_msgs/Classification`` (enrolled label, cosine score) out.

A :class:`~libredgetpu_ros.ros.camera.CameraNode` (image intake, QoS, compressed frames, pixel budget,
newest-frame policy, diagnostics, faults) whose processor is an ``EmbeddingExtractor`` (MobileNet feature
extractor, Edge TPU or CPU twin) and an ``EmbeddingSimilarity`` database on the MatMul engine:

- ``classification`` (vision_msgs/Classification, the frame's header): the ``top_k`` best labels with their
  cosine scores that clear the open-set threshold calibrated from the enrolled set (``open_set_margin``,
  ``min_score``), else one hypothesis ``unknown`` scored with the best cosine that fell short; empty while
  the database is empty. ``open_set: false`` gives the closed set (filtered by ``min_score`` only);
- ``~/enroll`` (Enroll: a label, and optionally a box of the last frame), ``~/forget`` (Forget: every entry
  of a label), ``~/save`` / ``~/load`` (FilePath: the database file; a file of another embedding size or
  with more entries than the template holds is refused and the database kept).

Changes are atomic weight swaps: a frame is matched against one database version, never half of one. The
extractor is shared by the camera thread and the enroll service under one lock (LiteRT interpreters are not
reentrant).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from std_msgs.msg import Header
from vision_msgs.msg import Classification, ObjectHypothesis

from libredgetpu_ros.errors import LibrEdgeTpuError
from libredgetpu_ros.ros.camera import CameraNode, Frame
from libredgetpu_ros.ros.recognition.params import RECOGNITION_PARAMS
from libredgetpu_ros.ros.services import MESSAGE_CHARS
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main
from libredgetpu_ros.textdata import clip, clip_repr
from libredgetpu_ros_interfaces.srv import Enroll, FilePath, Forget


def open_recognizer(p: Any) -> tuple[Any, Any]:
    """(extractor, database) the node's parameters ask for (also what offline processing uses)."""
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.embedding import EmbeddingSimilarity
    from libredgetpu_ros.robotics.extractor import EmbeddingExtractor

    extractor = EmbeddingExtractor(p.model or None, backend=p.backend, device=p.device or None)
    engine = None
    try:
        engine = MatMulEngine.from_template(p.template, backend=p.backend, device=p.device or None)
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
    ``open_set_margin``, ``min_score``): what the node and offline processing both classify with."""
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
    """(relative topic, message) for one frame's open-set decision (``decide``): what the node publishes
    and ``process-bag`` (``ros/bag_nodes.py``) writes. ``options``: the node's parameters."""
    return [("classification", classification(header, decision))]


class RecognitionNode(CameraNode):
    """Place / object recognition on the newest camera frame; see the module docstring."""

    PARAMS = RECOGNITION_PARAMS
    DIAGNOSTICS_NAME = "recognition"

    def __init__(self, node_name: str = "recognition", **kwargs: Any) -> None:
        self._extractor: Any = None
        self._db: Any = None
        self._embed_lock = threading.Lock()
        self._pub: Any = None
        self._last_rgb: Any = None
        self._last: tuple[str, float] | None = None
        self._refused = 0
        self._unknown = 0
        self._last_refusal = ""
        super().__init__(node_name, **kwargs)

    def open_processor(self) -> None:
        extractor, db = open_recognizer(self.params)
        with self._embed_lock:
            self._extractor, self._db = extractor, db

    def close_processor(self) -> None:
        with self._embed_lock:
            extractor, db = self._extractor, self._db
            self._extractor = self._db = None
        self._last_rgb = self._last = None
        self.close_logged(extractor, "the extractor")
        self.close_logged(None if db is None else db.engine, "the database engine")

    def create_outputs(self) -> None:
        self._pub = self.output(Classification, "classification")
        self.service(Enroll, "~/enroll", self._on_enroll)
        self.service(Forget, "~/forget", self._on_forget)
        self.service(FilePath, "~/save", self._on_save)
        self.service(FilePath, "~/load", self._on_load)

    def destroy_outputs(self) -> None:
        self._pub = None

    def process(self, rgb: Any, header: Header, frame: Frame) -> Mapping[str, float] | None:
        db = self._db
        if db is None:
            return None
        t0 = time.monotonic()
        with self._embed_lock:
            if self._extractor is None:
                return None
            embedding = self._extractor.embed(rgb)
        t1 = time.monotonic()
        decision = decide(db, embedding, self.params)
        t2 = time.monotonic()
        self._last_rgb = rgb
        self._last = None if decision.label is None else (decision.label, decision.score)
        if decision.label is not None and not decision.known:
            self._unknown += 1
        for _, msg in recognition_messages(header, decision, self.params):  # one topic: classification
            self._pub.publish(msg)
        return {"embed": (t1 - t0) * 1e3, "match": (t2 - t1) * 1e3}

    # ----- services (main executor) -------------------------------------------------------------------
    def _refuse(self, resp: Any, exc: BaseException) -> Any:
        self._refused += 1
        self._last_refusal = clip(exc, MESSAGE_CHARS)  # requests carry paths and labels of any length
        resp.success, resp.message = False, f"refused, database unchanged: {self._last_refusal}"
        return resp

    def _on_enroll(self, req: Enroll.Request, resp: Enroll.Response) -> Enroll.Response:
        db, rgb = self._db, self._last_rgb
        if db is None:
            resp.success, resp.message = False, "node is not configured"
            return resp
        if rgb is None:
            resp.success, resp.message = False, "no camera frame received yet: nothing to enrol"
            return resp
        region = (req.x, req.y, req.width, req.height) if req.use_region else None
        try:
            with self._embed_lock:
                embedding = self._extractor.embed(rgb, region=region)
            slot = db.add(req.label, embedding)
        except LibrEdgeTpuError as exc:
            return self._refuse(resp, exc)
        resp.success, resp.entries = True, len(db)
        resp.message = f"enrolled {clip_repr(req.label)} in slot {slot} ({len(db)} of {db.capacity} entries)"
        self.get_logger().info(resp.message)
        return resp

    def _on_forget(self, req: Forget.Request, resp: Forget.Response) -> Forget.Response:
        db = self._db
        if db is None:
            resp.success, resp.message = False, "node is not configured"
            return resp
        try:
            resp.removed = db.remove(req.label)
        except LibrEdgeTpuError as exc:
            return self._refuse(resp, exc)
        resp.success, resp.message = True, f"forgot {resp.removed} entries of {clip_repr(req.label)}"
        return resp

    def _on_save(self, req: FilePath.Request, resp: FilePath.Response) -> FilePath.Response:
        return self._file_op(resp, lambda db: f"saved {db.save(req.path)} entries to {clip(req.path)}")

    def _on_load(self, req: FilePath.Request, resp: FilePath.Response) -> FilePath.Response:
        return self._file_op(resp, lambda db: f"loaded {db.load(req.path)} entries from {clip(req.path)}")

    def _file_op(self, resp: Any, operation: Any) -> Any:
        db = self._db
        if db is None:
            resp.success, resp.message = False, "node is not configured"
            return resp
        try:
            resp.message = operation(db)
        except (LibrEdgeTpuError, OSError) as exc:
            return self._refuse(resp, exc)
        resp.success = True
        return resp

    # ----- diagnostics --------------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        db, last = self._db, self._last
        extractor = self._extractor
        from libredgetpu_ros.models.template_catalogue import EXTRACTOR

        values: dict[str, object] = {"extractor": self.params.model or f"{EXTRACTOR} (catalogue default)",
                                     "backend": "" if extractor is None else extractor.backend_name,
                                     "template": f"dense_{self.params.template}"}
        if db is not None:
            p = self.params
            values.update(entries=len(db), capacity=db.capacity, labels=len(set(db.labels)),
                          threshold=db.threshold(p.open_set_margin if p.open_set else None, p.min_score))
        values.update(last_label=last[0] if last else "", last_score=last[1] if last else float("nan"),
                      unknown=self._unknown, refused=self._refused, last_refusal=self._last_refusal)
        return values

    def diagnostic_warnings(self) -> list[str]:
        db = self._db
        if db is not None and len(db) == 0:
            return ["recognition: the database is empty (call ~/enroll or ~/load)"]
        return []

    def hardware_id(self) -> str:
        return self.params.device or self.params.backend


def main(args: list[str] | None = None) -> int:
    """``ros2 run libredgetpu_ros recognition_node`` / ``python -m libredgetpu_ros.ros.recognition.node``."""
    return run_lifecycle_node_main(RecognitionNode, args, retain_allocations=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
