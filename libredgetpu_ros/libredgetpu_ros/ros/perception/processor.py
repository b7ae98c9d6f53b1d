"""The perception node's processor (``ros/camera/processor.py``): a ``PerceptionPipeline`` opened from the
node's parameters and ``conversions.result_messages``; what the node runs per frame and what ``process-bag
--node-type perception`` runs (``ros/bag_nodes.py``).

Runtime options (score threshold, result counts) go to the pipeline's ``set_options`` under a lock shared
with the frame's inference, so a value the pipeline refuses is refused to the caller and the running
options stay.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np

from libredgetpu_ros.errors import InputError, LibrEdgeTpuError
from libredgetpu_ros.ros import conversions
from libredgetpu_ros.ros.camera.processor import (
    CameraProcessor,
    FrameOutput,
    Wanted,
    Warn,
    described_hardware,
    shared_values,
    shared_warnings,
)
from libredgetpu_ros.ros.frame_busy import FrameBusyError, frame_lock
from libredgetpu_ros.ros.params import share_stream
from libredgetpu_ros.ros.perception.params import pipeline_config

_RUNTIME_OPTIONS = ("score_threshold", "max_results", "top_k")


class PerceptionProcessor(CameraProcessor):
    """A ``PerceptionPipeline`` on one frame; see the module docstring."""

    def __init__(self, params: Any, warn: Warn | None = None, node: str = "") -> None:
        import dataclasses

        from libredgetpu_ros.perception.pipeline import PerceptionPipeline

        super().__init__(params, warn, node)
        first_model = str(params.model).split(",", 1)[0].strip()  # a segmented model: its first file
        cfg = dataclasses.replace(pipeline_config(params), stream=share_stream(node, first_model))
        self.pipeline = PerceptionPipeline.from_config(cfg)
        self._lock = threading.Lock()  # the pipeline: a frame's inference vs set_options
        self.task: str = self.pipeline.task
        self.out_types = dict(conversions.output_topics(self.task))
        described = self.pipeline.describe()
        first = (described.get("segments") or [{}])[0]
        # What actually runs: the CPU twin on the cpu backend, the compiled file(s) on the accelerator.
        running = first.get("twin") or ",".join(described.get("models", []))
        self._describe = {"backend": described.get("backend", ""), "device": first.get("device", ""),
                          "choice": first.get("choice", ""), "fallback": first.get("fallback", ""),
                          "running": running,
                          "input_size": "x".join(str(v) for v in described.get("input_size", []))}

    def on_cpu(self) -> str | None:
        """Why the model runs on the CPU (the backend choice), or None when it runs on an accelerator."""
        if self._describe["backend"] != "cpu":
            return None
        return self._describe["choice"] or "backend cpu"

    def warm_up(self, rgb: np.ndarray | None) -> None:
        # the pipeline keeps no state between frames: the first frame is processed again for real
        width, height = self.pipeline.input_size
        with contextlib.suppress(InputError):
            self.pipeline.process(rgb if rgb is not None else np.zeros((height, width, 3), np.uint8))

    def prepare(self, rgb: np.ndarray) -> Any:
        """The model's input (``PerceptionPipeline.prepare``: check, resize, quantize); no lock: it touches
        no pipeline state."""
        return self.pipeline.prepare(rgb)

    def frame(self, header: Any, rgb: np.ndarray, wanted: Wanted | None = None,
              plane: Any = None, prepared: Any = None) -> FrameOutput:
        ready = self.ready(rgb, prepared)
        with self._lock:
            result = self.pipeline.run(ready)
        processed = time.monotonic()
        # Messages for topics nobody subscribes to are not even built (an annotated image costs more than
        # most models); a subscriber that has not matched yet would not have received them anyway.
        out = conversions.result_messages(header, rgb, result, self.params, wanted=wanted, plane=plane)
        return FrameOutput(out, {**result.timings, "publish": (time.monotonic() - processed) * 1e3})

    def latched(self, header: Any) -> list[tuple[str, Any]]:
        """The label map (vision_msgs/LabelInfo) of a detector / classifier with labels."""
        msg = conversions.label_info_msg(self.pipeline.labels, self.task, self.params.score_threshold, header)
        return [] if msg is None else [("label_info", msg)]

    def _shared(self) -> dict[str, Any]:
        # not under the lock, which a frame holds through its inference: counters only, safe to race
        return self.pipeline.shared_status()

    def diagnostic_values(self) -> dict[str, object]:
        d = self._describe
        values: dict[str, object] = {
            "task": self.task, "backend": d["backend"], "backend_choice": d["choice"], "device": d["device"],
            "model": self.params.model, "model_running": d["running"]}
        # this node's stream on the accelerator it shares with the process's other nodes (edgetpu/broker.py)
        values.update(shared_values(self._shared()))
        return values

    def diagnostic_warnings(self) -> list[str]:
        return shared_warnings(self._shared())

    def fallbacks(self) -> list[str]:
        return [self._describe["fallback"]]

    def hardware_id(self) -> str:
        return described_hardware(self._describe)

    def check_runtime_params(self, changes: dict[str, Any]) -> str | None:
        """The pipeline's own checks (e.g. PoseNet wants a threshold < 1), applied here."""
        if not any(name in changes for name in _RUNTIME_OPTIONS):
            return None
        merged = {name: changes.get(name, getattr(self.params, name)) for name in _RUNTIME_OPTIONS}
        try:
            # the main executor's parameter callback: a frame holding the pipeline past 1 s refuses it
            with frame_lock(self._lock):
                self.pipeline.set_options(**merged)
        except FrameBusyError as exc:
            return f"not applied: {exc}"
        except LibrEdgeTpuError as exc:
            return str(exc)
        return None

    def close(self) -> None:
        self.pipeline.close()
