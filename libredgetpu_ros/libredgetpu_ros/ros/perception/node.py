"""Perception lifecycle node: camera images in; poses, detections, classes, masks, markers, diagnostics out.

A :class:`~libredgetpu_ros.ros.camera.CameraNode` (``ros/camera/``: lifecycle, image intake and QoS, threads,
fault handling, diagnostics), whose processor is a ``PerceptionPipeline``:

- configure: load the model and open the backend/device (failure -> FAILURE, stays unconfigured, reason
  logged), create the result publishers for the model's task and publish the label map;
- each frame (camera thread): the pipeline on the newest frame, results published with its header; a
  ``DeviceError`` / ``BackendError`` (e.g. the accelerator unplugged) takes the node through
  ``on_error`` to ``unconfigured``;
- cleanup / shutdown / error: close the pipeline (releases the device);
- while active, the camera's ``sensor_msgs/CameraInfo`` (``camera_info_topic``, on the camera thread, in
  order with the frames) gives the markers their image plane (``camera/image_plane.py``, at
  ``marker_depth``); before one arrives they lie on z = 0 at ``marker_scale`` metres per pixel.

Runtime parameters (score threshold, result counts) go to the pipeline's ``set_options`` under a lock, so
a value the pipeline refuses is refused to the caller and the running options stay.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from std_msgs.msg import Header
from vision_msgs.msg import LabelInfo

from libredgetpu_ros.errors import DeviceNotFoundError, LibrEdgeTpuError
from libredgetpu_ros.ros import conversions
from libredgetpu_ros.ros.camera import CameraNode, Frame
from libredgetpu_ros.ros.camera.image_plane import ImagePlaneInput
from libredgetpu_ros.ros.output_qos import output_publisher
from libredgetpu_ros.ros.perception.params import LABEL_QOS, PARAMS, pipeline_config

_RUNTIME_OPTIONS = ("score_threshold", "max_results", "top_k")


class PerceptionNode(ImagePlaneInput, CameraNode):
    """Runs a ``PerceptionPipeline`` on the newest camera frame; see the module docstring."""

    PARAMS = PARAMS
    DIAGNOSTICS_NAME = "perception"

    def __init__(self, node_name: str = "perception", **kwargs: Any) -> None:
        self._pipeline: Any = None
        self._pipeline_lock = threading.Lock()
        self._describe: dict[str, Any] = {}
        self._task = ""
        self._pubs: dict[str, Any] = {}
        self._labels_pub: Any = None
        super().__init__(node_name, **kwargs)

    # -- the camera-node hooks ------------------------------------------------------------------------------

    def open_processor(self) -> None:
        from libredgetpu_ros.perception.pipeline import PerceptionPipeline

        pipeline = PerceptionPipeline.from_config(pipeline_config(self.params))
        described = pipeline.describe()
        first = (described.get("segments") or [{}])[0]
        if self.params.require_accelerator and described.get("backend") == "cpu":
            pipeline.close()
            raise DeviceNotFoundError(f"require_accelerator is true but the model would run on the CPU "
                                      f"({first.get('choice') or 'backend cpu'})")
        with self._pipeline_lock:
            self._pipeline = pipeline
        self._task = pipeline.task
        # What actually runs: the CPU twin on the cpu backend, the compiled file(s) on the accelerator.
        running = first.get("twin") or ",".join(described.get("models", []))
        self._describe = {"backend": described.get("backend", ""), "device": first.get("device", ""),
                          "choice": first.get("choice", ""), "fallback": first.get("fallback", ""),
                          "running": running,
                          "input_size": "x".join(str(v) for v in described.get("input_size", []))}

    def close_processor(self) -> None:
        with self._pipeline_lock:
            pipeline, self._pipeline = self._pipeline, None
        self.close_logged(pipeline, "the pipeline")

    def create_outputs(self) -> None:
        self._pubs = {name: self.output(mtype, name) for name, mtype in conversions.output_topics(self._task)}
        self._publish_label_info()

    def destroy_outputs(self) -> None:
        self._pubs = {}
        if self._labels_pub is not None:
            self.destroy_publisher(self._labels_pub)
            self._labels_pub = None

    def process(self, rgb: Any, header: Header, frame: Frame) -> Mapping[str, float] | None:
        with self._pipeline_lock:
            if self._pipeline is None:
                return None
            result = self._pipeline.process(rgb)
        processed = time.monotonic()
        # Messages for topics nobody subscribes to are not even built (an annotated image costs more than
        # most models); a subscriber that has not matched yet would not have received them anyway.
        pubs = self._pubs
        plane = self.image_plane(int(rgb.shape[1]), int(rgb.shape[0]))
        for topic, msg in conversions.result_messages(header, rgb, result, self.params,
                                                      wanted=lambda t: pubs[t].get_subscription_count() > 0,
                                                      plane=plane):
            pubs[topic].publish(msg)
        return {**result.timings, "publish": (time.monotonic() - processed) * 1e3}

    def _shared(self) -> dict[str, Any]:
        # not under _pipeline_lock, which a frame holds through its inference: counters only, safe to race
        pipeline = self._pipeline
        return pipeline.shared_status() if pipeline is not None else {}

    def diagnostic_values(self) -> dict[str, object]:
        d = self._describe
        values: dict[str, object] = {
            "task": self._task, "backend": d.get("backend", ""), "backend_choice": d.get("choice", ""),
            "device": d.get("device", ""), "model": self.params.model, "model_running": d.get("running", "")}
        # this node's stream on the accelerator it shares with the process's other nodes (edgetpu/broker.py)
        values.update({f"shared_{k}": v for k, v in self._shared().items()})
        return values

    def diagnostic_warnings(self) -> list[str]:
        fallback = self._describe.get("fallback")
        warnings = [f"running on the CPU, not the accelerator the model is compiled for ({fallback}); "
                    f"require_accelerator: true refuses to start so"] if fallback else []
        shared = self._shared()
        if shared.get("faults"):
            warnings.append(f"device fault on the shared accelerator ({shared['faults']} so far, last: "
                            f"{shared['last_fault']}); reopened {shared['device_reopens']} time(s) for its "
                            f"{shared['device_users']} user(s)")
        return warnings

    def hardware_id(self) -> str:
        return str(self._describe.get("device") or self._describe.get("backend") or "cpu")

    def check_runtime_params(self, changes: dict[str, Any]) -> str | None:
        """The pipeline's own checks (e.g. PoseNet wants a threshold < 1), applied here."""
        if not any(name in changes for name in _RUNTIME_OPTIONS):
            return None
        merged = {name: changes.get(name, getattr(self.params, name)) for name in _RUNTIME_OPTIONS}
        with self._pipeline_lock:
            if self._pipeline is not None:
                try:
                    self._pipeline.set_options(**merged)
                except LibrEdgeTpuError as exc:
                    return str(exc)
        return None

    def runtime_params_changed(self, names: set[str]) -> None:
        if self._labels_pub is not None and "score_threshold" in names:
            self._publish_label_info()  # LabelInfo carries the threshold

    # -- label map ------------------------------------------------------------------------------------------

    def _publish_label_info(self) -> None:
        """The label map (vision_msgs/LabelInfo) of a detector/classifier with labels. Not a lifecycle
        publisher: the map is valid from configure on, and transient-local durability hands the latest one
        to subscribers that come later."""
        header = Header(stamp=self.get_clock().now().to_msg())
        msg = conversions.label_info_msg(self._pipeline.labels if self._pipeline else None, self._task,
                                         self.params.score_threshold, header)
        if msg is None:
            return
        if self._labels_pub is None:
            self._labels_pub = output_publisher(self, LabelInfo, "label_info", LABEL_QOS, lifecycle=False)
        self._labels_pub.publish(msg)
