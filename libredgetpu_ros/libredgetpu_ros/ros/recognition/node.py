"""Recognition node: camera images in, ``vision_msgs/Classification`` (enrolled label, cosine score) out.

A :class:`~libredgetpu_ros.ros.camera.CameraNode` (image intake, QoS, compressed frames, pixel budget,
newest-frame policy, diagnostics, faults) whose processor (``recognition/processor.py``, what
``process-bag`` runs too) is an ``EmbeddingExtractor`` (MobileNet feature
extractor, Edge TPU or CPU twin) and an ``EmbeddingSimilarity`` database on the MatMul engine:

- ``classification`` (vision_msgs/Classification, the frame's header): the ``top_k`` best labels with their
  cosine scores that clear the open-set threshold calibrated from the enrolled set (``open_set_margin``,
  ``min_score``), else one hypothesis ``unknown`` scored with the best cosine that fell short; empty while
  the database is empty. ``open_set: false`` gives the closed set (filtered by ``min_score`` only);
- ``~/enroll`` (Enroll: a label, and optionally a box of the last frame), ``~/forget`` (Forget: every entry
  of a label), ``~/save`` / ``~/load`` (FilePath: the database file; a file of another embedding size or
  with more entries than the template holds is refused and the database kept).

Changes are atomic weight swaps: a frame is matched against one database version, never half of one. A
frame holds the processor's lock across its embedding and match; ``~/enroll``, ``~/forget`` and ``~/load``
wait for it at most ``FRAME_BUSY_WAIT_S`` (``ros/frame_busy.py``) and are refused past it, database
unchanged ("a frame is in progress (stuck?)"); ``~/load`` reads and checks its file before it waits (frames
carry on through a slow read; a bad file is refused without the lock) and holds the lock for the swap only;
``~/save`` writes the current version and takes no lock.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from libredgetpu_ros.errors import LibrEdgeTpuError
from libredgetpu_ros.ros.camera import CameraNode
from libredgetpu_ros.ros.recognition.params import RECOGNITION_PARAMS
from libredgetpu_ros.ros.recognition.processor import RecognitionProcessor
from libredgetpu_ros.ros.services import MESSAGE_CHARS
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main
from libredgetpu_ros.textdata import clip, clip_repr
from libredgetpu_ros_interfaces.srv import Enroll, FilePath, Forget


class RecognitionNode(CameraNode):
    """Place / object recognition (``RecognitionProcessor``) on the newest camera frame; see the module
    docstring."""

    PARAMS = RECOGNITION_PARAMS
    PROCESSOR = RecognitionProcessor
    DIAGNOSTICS_NAME = "recognition"

    def __init__(self, node_name: str | None = None, **kwargs: Any) -> None:
        self._refused = 0
        self._last_refusal = ""
        super().__init__(node_name, **kwargs)

    def create_outputs(self) -> None:
        super().create_outputs()
        self.service(Enroll, "~/enroll", self._on_enroll)
        self.service(Forget, "~/forget", self._on_forget)
        self.service(FilePath, "~/save", self._on_save)
        self.service(FilePath, "~/load", self._on_load)

    # ----- services (main executor) -------------------------------------------------------------------
    def _refuse(self, resp: Any, exc: BaseException) -> Any:
        self._refused += 1
        self._last_refusal = clip(exc, MESSAGE_CHARS)  # requests carry paths and labels of any length
        resp.success, resp.message = False, f"refused, database unchanged: {self._last_refusal}"
        return resp

    def _on_enroll(self, req: Enroll.Request, resp: Enroll.Response) -> Enroll.Response:
        processor: Any = self.processor
        if processor is None:
            resp.success, resp.message = False, "node is not configured"
            return resp
        db, rgb = processor.db, processor.last_rgb
        if rgb is None:
            resp.success, resp.message = False, "no camera frame received yet: nothing to enrol"
            return resp
        region = (req.x, req.y, req.width, req.height) if req.use_region else None
        try:
            # a frame holding the lock past the bound: FrameBusyError, refused (the executor not blocked)
            slot = processor.enroll(req.label, rgb, region)
        except LibrEdgeTpuError as exc:
            return self._refuse(resp, exc)
        resp.success, resp.entries = True, len(db)
        resp.message = f"enrolled {clip_repr(req.label)} in slot {slot} ({len(db)} of {db.capacity} entries)"
        self.get_logger().info(resp.message)
        return resp

    def _on_forget(self, req: Forget.Request, resp: Forget.Response) -> Forget.Response:
        processor: Any = self.processor
        if processor is None:
            resp.success, resp.message = False, "node is not configured"
            return resp
        try:
            resp.removed = processor.change_database(lambda db: db.remove(req.label))
        except LibrEdgeTpuError as exc:
            return self._refuse(resp, exc)
        resp.success, resp.message = True, f"forgot {resp.removed} entries of {clip_repr(req.label)}"
        return resp

    def _on_save(self, req: FilePath.Request, resp: FilePath.Response) -> FilePath.Response:
        # the current version, read without the frame lock: a frame never changes the database
        return self._file_op(resp, lambda p: f"saved {p.db.save(req.path)} entries to {clip(req.path)}")

    def _on_load(self, req: FilePath.Request, resp: FilePath.Response) -> FilePath.Response:
        def load(processor: Any) -> str:  # the file read unlocked, then swapped in between two frames
            return f"loaded {processor.load_database(req.path)} entries from {clip(req.path)}"

        return self._file_op(resp, load)

    def _file_op(self, resp: Any, operation: Callable[[Any], str]) -> Any:
        processor: Any = self.processor
        if processor is None:
            resp.success, resp.message = False, "node is not configured"
            return resp
        try:
            resp.message = operation(processor)
        except (LibrEdgeTpuError, OSError) as exc:
            return self._refuse(resp, exc)
        resp.success = True
        return resp

    # ----- diagnostics --------------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        """The processor's, then what the services refused."""
        return {**super().diagnostic_values(), "refused": self._refused, "last_refusal": self._last_refusal}


def main(args: list[str] | None = None) -> int:
    """``ros2 run libredgetpu_ros recognition_node`` / ``python -m libredgetpu_ros.ros.recognition.node``."""
    return run_lifecycle_node_main(RecognitionNode, args, retain_allocations=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
