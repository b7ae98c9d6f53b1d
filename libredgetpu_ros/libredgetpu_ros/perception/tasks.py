"""What a compiled model does, read from its graph, and the post-processing head for each task.

A head turns the backend's boundary tensors into results in model-input coordinates and maps them back to
the original image. Heads are rebuilt when options change (cheap: they only read op options).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ConfigError, ModelFormatError
from libredgetpu_ros.postprocess.results import ClassScore, Detection, Keypoint, Pose

TASKS: tuple[str, ...] = ("pose", "segment", "detect", "classify")

POSE_OP = "PosenetDecoderOp"
DETECT_OP = "TFLite_Detection_PostProcess"
SEGMENT_OPS = frozenset({"ARG_MAX", "RESIZE_BILINEAR"})


def detect_task(model: Any, boundary_output_shapes: list[tuple[int, ...]]) -> str:
    """The task of the last (or only) compiled segment, from the CPU ops after its Edge TPU op."""
    names = {op.opcode_name for op in model.operators}
    if POSE_OP in names:
        return "pose"
    if DETECT_OP in names:
        return "detect"
    if names & SEGMENT_OPS:
        return "segment"
    if len(boundary_output_shapes) == 1:
        shape = boundary_output_shapes[0]
        if len(shape) >= 2 and int(np.prod(shape[:-1])) == 1 and shape[-1] > 1:
            return "classify"
    where = getattr(model, "path", None) or "model"
    raise ModelFormatError(f"{where}: cannot tell the task from the graph (ops: {', '.join(sorted(names))}; "
                           f"outputs {boundary_output_shapes}); pass --task")


def check_task(requested: str, detected: str, where: str) -> str:
    """The task to run: ``detected`` for "auto", else ``requested`` if the model supports it."""
    if requested == "auto":
        return detected
    if requested not in TASKS:
        raise ConfigError(f"task must be auto or one of {', '.join(TASKS)}, got {requested!r}")
    if requested != detected:
        raise ModelFormatError(f"{where}: task {requested!r} requested, but this is a {detected!r} model")
    return requested


@dataclasses.dataclass(frozen=True, slots=True)
class HeadOptions:
    """User options; None keeps the model's own default (decoder op options, or top_k for classifiers)."""

    score_threshold: float | None = None
    max_results: int | None = None
    top_k: int = 5

    def validate(self) -> HeadOptions:
        if self.score_threshold is not None and not 0.0 <= self.score_threshold <= 1.0:
            raise ConfigError(f"score_threshold must be in [0, 1], got {self.score_threshold}")
        if self.max_results is not None and self.max_results < 1:
            raise ConfigError(f"max_results must be >= 1, got {self.max_results}")
        if self.top_k < 1:
            raise ConfigError(f"top_k must be >= 1, got {self.top_k}")
        return self


@dataclasses.dataclass(slots=True)
class HeadOutput:
    poses: list[Pose] = dataclasses.field(default_factory=list)
    detections: list[Detection] = dataclasses.field(default_factory=list)
    classes: list[ClassScore] = dataclasses.field(default_factory=list)
    mask: np.ndarray | None = None


def make_head(task: str, model: Any, labels: dict[int, str] | None, options: HeadOptions):
    """A callable ``(outputs, input_size, image_size) -> HeadOutput`` for ``task``."""
    if task == "pose":
        return _PoseHead(model, options)
    if task == "segment":
        return _SegmentHead(model)
    if task == "detect":
        return _DetectHead(model, labels, options)
    if task == "classify":
        return _ClassifyHead(model, labels, options)
    raise ConfigError(f"unknown task {task!r}")


def _scales(input_size: tuple[int, int], image_size: tuple[int, int]) -> tuple[float, float]:
    return image_size[0] / input_size[0], image_size[1] / input_size[1]


class _PoseHead:
    def __init__(self, model: Any, options: HeadOptions) -> None:
        from libredgetpu_ros.postprocess.posenet import PoseDecoder

        self.decoder = PoseDecoder.from_model(model, max_detections=options.max_results,
                                              score_threshold=options.score_threshold)

    def __call__(self, outputs: Mapping[str, np.ndarray], input_size: tuple[int, int],
                 image_size: tuple[int, int]) -> HeadOutput:
        sx, sy = _scales(input_size, image_size)
        poses = [Pose([Keypoint(k.name, k.id, k.x * sx, k.y * sy, k.score) for k in pose.keypoints],
                      pose.score) for pose in self.decoder.decode(outputs)]
        return HeadOutput(poses=poses)


class _SegmentHead:
    def __init__(self, model: Any) -> None:
        from libredgetpu_ros.postprocess.deeplab import DeepLabTail

        self.tail = DeepLabTail.from_model(model)

    def __call__(self, outputs: Mapping[str, np.ndarray], input_size: tuple[int, int],
                 image_size: tuple[int, int]) -> HeadOutput:
        import cv2

        classes = np.asarray(self.tail(outputs))
        if classes.max(initial=0) > 255:
            raise ModelFormatError(f"segmentation produced class id {int(classes.max())} > 255")
        mask = classes.astype(np.uint8, copy=False)
        if (mask.shape[1], mask.shape[0]) != image_size:
            mask = cv2.resize(mask, image_size, interpolation=cv2.INTER_NEAREST_EXACT)
        return HeadOutput(mask=mask)


class _DetectHead:
    def __init__(self, model: Any, labels: dict[int, str] | None, options: HeadOptions) -> None:
        from libredgetpu_ros.postprocess.ssd import SsdDecoder

        kwargs: dict[str, Any] = {"labels": labels}
        if options.score_threshold is not None:
            kwargs["score_threshold"] = options.score_threshold
        if options.max_results is not None:
            kwargs["max_detections"] = options.max_results
        self.decoder = SsdDecoder.from_model(model, **kwargs)

    def __call__(self, outputs: Mapping[str, np.ndarray], input_size: tuple[int, int],
                 image_size: tuple[int, int]) -> HeadOutput:
        w, h = image_size
        scale = np.array([w, h, w, h], dtype=np.float64)
        limit = scale  # clip boxes to the image
        detections = []
        for det in self.decoder.decode(outputs):
            box = np.clip(np.asarray(det.box, dtype=np.float64) * scale, 0.0, limit)
            detections.append(Detection(det.class_id, det.label, det.score, tuple(float(v) for v in box)))
        return HeadOutput(detections=detections)


class _ClassifyHead:
    def __init__(self, model: Any, labels: dict[int, str] | None, options: HeadOptions) -> None:
        from libredgetpu_ros.postprocess.classify import Classifier

        self.classifier = Classifier.from_model(model, labels=labels)
        self.k = options.top_k  # max_results bounds poses and detections, not classes
        self.threshold = options.score_threshold or 0.0

    def __call__(self, outputs: Mapping[str, np.ndarray], input_size: tuple[int, int],
                 image_size: tuple[int, int]) -> HeadOutput:
        return HeadOutput(classes=list(self.classifier.top_k(outputs, self.k, self.threshold)))
