"""The perception node's parameters (its own merged with the camera base's image parameters, one table), its
label QoS and the pipeline configuration they give. ``RESULT_QOS`` is the camera base's."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rclpy.qos import QoSDurabilityPolicy, QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy

from libredgetpu_ros.backend_kinds import BACKEND_KINDS
from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.ros.camera import RESULT_QOS as RESULT_QOS  # re-exported: the nodes' result QoS
from libredgetpu_ros.ros.camera import ImageParams, camera_param_table
from libredgetpu_ros.ros.camera.image_plane import MARKER_PLANE_PARAMS
from libredgetpu_ros.ros.params import DEVICE_PARAM, DEVICE_SHARE_PARAM, ParamSpec
from libredgetpu_ros.threads import DEFAULT_LIBRARY_THREADS, MAX_LIBRARY_THREADS

TASKS = ("auto", "pose", "segment", "detect", "classify")
# LiteRT threads beyond this buy nothing on the boards this runs on; the range keeps a typo from asking 10^6.
MAX_CPU_THREADS = 64
ALL_CORES = max(1, min(MAX_CPU_THREADS, len(os.sched_getaffinity(0))))


@dataclass(frozen=True)
class PerceptionParams(ImageParams):
    model: str
    cpu_model: str
    backend: str
    require_accelerator: bool
    device: str
    device_share_hz: float
    task: str
    labels: str
    cpu_threads: int
    library_threads: int
    score_threshold: float
    max_results: int
    top_k: int
    publish_markers: bool
    publish_annotated: bool
    publish_overlay: bool
    marker_scale: float
    marker_depth: float
    camera_info_topic: str


PARAMS = camera_param_table([
    ParamSpec("model", "", "Compiled model (*_edgetpu.tflite), or the segments of a pipelined one "
              "comma-separated; the cpu backend runs its CPU twin."),
    ParamSpec("cpu_model", "", "CPU twin of the model for the cpu backend; empty: derived from `model`."),
    ParamSpec("backend", "auto", "Inference backend; auto prefers an attached Edge TPU.",
              choices=BACKEND_KINDS),
    ParamSpec("require_accelerator", False, "Fail configure unless the model runs on an accelerator (no CPU "
              "fallback), for a robot that needs its speed."),
    DEVICE_PARAM,
    DEVICE_SHARE_PARAM,
    ParamSpec("task", "auto", "What the model does; auto reads it from the model.", choices=TASKS),
    ParamSpec("labels", "", "Label file (one label per line, or 'id label'); empty: numeric ids."),
    ParamSpec("cpu_threads", 0, "Threads of LiteRT's interpreter on the cpu backend; 0: one per core this "
              "process may use.", range=(0, MAX_CPU_THREADS)),
    ParamSpec("library_threads", DEFAULT_LIBRARY_THREADS, "Threads of the BLAS / OpenMP / OpenCV pools the "
              "CPU tails (DeepLab, decoders) run on, process-wide; 0: the libraries' defaults (one per core) "
              "(threads.py, docs/perception_node.md).", range=(0, MAX_LIBRARY_THREADS)),
    ParamSpec("score_threshold", 0.5, "Minimum score of a pose/detection/class to publish.",
              range=(0.0, 1.0), mutability="runtime"),
    ParamSpec("max_results", 10, "Maximum number of poses/detections per image.",
              range=(1, 100), mutability="runtime"),
    ParamSpec("top_k", 5, "Classes published per image (classification).", range=(1, 1000),
              mutability="runtime"),
    ParamSpec("publish_markers", True, "Publish a visualization_msgs/MarkerArray on `markers`.",
              mutability="runtime"),
    ParamSpec("publish_annotated", False, "Publish the input with results drawn on `annotated` (costs CPU).",
              mutability="runtime"),
    ParamSpec("publish_overlay", False, "Publish the colourised mask blended over the input (segmentation).",
              mutability="runtime"),
    ParamSpec("marker_scale", 0.001, "Marker size in metres per image pixel (rviz) until a CameraInfo "
              "arrives; then markers lie on the camera's image plane at marker_depth.",
              range=(1e-6, 1.0), mutability="runtime"),
    *MARKER_PLANE_PARAMS,
], PerceptionParams)

# The label map (vision_msgs/LabelInfo) is published once per configure; transient-local keeps it for late
# subscribers, as the vision_msgs convention asks.
LABEL_QOS = QoSProfile(history=QoSHistoryPolicy.KEEP_LAST, depth=1,
                       reliability=QoSReliabilityPolicy.RELIABLE,
                       durability=QoSDurabilityPolicy.TRANSIENT_LOCAL)


def pipeline_config(p: PerceptionParams) -> Any:
    """The ``PipelineConfig`` the node opens for its parameters (also used by ``process-bag``)."""
    from libredgetpu_ros.perception.pipeline import PipelineConfig

    if not p.model:
        raise ConfigError("parameter model is empty: set it to a .tflite file")
    return PipelineConfig(model=p.model, cpu_model=p.cpu_model or None, backend=p.backend,
                          device=p.device or None, device_share_hz=p.device_share_hz, task=p.task,
                          labels=p.labels or None,
                          score_threshold=p.score_threshold, max_results=p.max_results, top_k=p.top_k,
                          cpu_threads=p.cpu_threads or ALL_CORES, library_threads=p.library_threads)
