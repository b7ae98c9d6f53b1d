"""The camera nodes ``process-bag`` runs offline: per node type, its processor opened from the node's own
parameters and its own "result -> messages" function, the one the live node publishes from.

Each offline node turns one decoded frame (HxWx3 uint8 RGB + the frame's header) into the (relative topic,
message) pairs the live node would publish for it, in the same order:

- ``perception``: ``PerceptionPipeline`` + ``conversions.result_messages`` (and the latched ``label_info``);
- ``tracker``: ``open_tracker`` + ``track_fitted`` + ``robotics.messages.tracker_messages``;
- ``looming``: ``open_detector`` + ``robotics.messages.looming_messages``; the tau history and time to
  contact integrate over the frames' header stamps, as live (stamps going backwards restart it);
- ``flow``: ``open_compass`` + ``flow.messages.flow_messages``; the frame pair, rates and heading run on
  the header stamps, as live. The field of view is ``fov_deg``: a CameraInfo in the bag is not read (the
  live node with ``use_camera_info`` takes it from the camera; set ``fov_deg`` to the camera's);
- ``recognition``: ``open_recognizer`` (the extractor and the database file of ``database``) +
  ``recognition.node.recognition_messages``; the database is the file's for the whole bag (the live
  node's ``~/enroll`` / ``~/forget`` calls are not in a camera bag).

Optional outputs (markers, annotated images) are written when the parameters ask for them, as if someone
subscribed to them live. A frame's bad data raises ``ImageError`` / ``InputError`` (counted by the caller,
as the live node counts it); ``DeviceError`` / ``BackendError`` propagate (the node would stop too).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from libredgetpu_ros.errors import ConfigError, InputError
from libredgetpu_ros.ros.params import ParamTable

_log = logging.getLogger(__name__)


class OfflineNode(Protocol):
    out_types: dict[str, type]  # relative topic -> message class, every topic the node may publish

    def warm_up(self, rgb: np.ndarray | None) -> None:
        """Pay the first inference's one-off costs without changing any state a later frame sees."""

    def messages(self, header: Any, rgb: np.ndarray) -> list[tuple[str, Any]]:
        """One frame -> what the live node publishes for it."""

    def latched(self, header: Any) -> list[tuple[str, Any]]:
        """Transient-local messages the node publishes once on configure."""

    def close(self) -> None: ...


class PerceptionOffline:
    def __init__(self, params: Any, warn: Any = None) -> None:
        from libredgetpu_ros.perception.pipeline import PerceptionPipeline
        from libredgetpu_ros.ros.conversions import output_topics, result_messages
        from libredgetpu_ros.ros.perception_node import pipeline_config

        self.params = params
        self.pipeline = PerceptionPipeline.from_config(pipeline_config(params), logger=_log)
        self.out_types = dict(output_topics(self.pipeline.task))
        self._result_messages = result_messages

    def warm_up(self, rgb: np.ndarray | None) -> None:
        # the pipeline keeps no state between frames: the first frame is processed again for real
        width, height = self.pipeline.input_size
        with contextlib.suppress(InputError):
            self.pipeline.process(rgb if rgb is not None else np.zeros((height, width, 3), np.uint8))

    def messages(self, header: Any, rgb: np.ndarray) -> list[tuple[str, Any]]:
        return self._result_messages(header, rgb, self.pipeline.process(rgb), self.params)

    def latched(self, header: Any) -> list[tuple[str, Any]]:
        from libredgetpu_ros.ros.conversions import label_info_msg

        msg = label_info_msg(self.pipeline.labels, self.pipeline.task, self.params.score_threshold, header)
        return [] if msg is None else [("label_info", msg)]

    def close(self) -> None:
        self.pipeline.close()


class FlowOffline:
    def __init__(self, params: Any, warn: Any = None) -> None:
        from libredgetpu_ros.ros.flow.messages import FLOW_OUTPUTS
        from libredgetpu_ros.ros.flow.node import open_compass

        self.params = params
        self.compass = open_compass(params)
        self.out_types = dict(FLOW_OUTPUTS)
        if params.use_camera_info:
            _log.warning("process-bag reads no CameraInfo: the flow node's field of view is fov_deg "
                         "(%g deg)", params.fov_deg)

    def warm_up(self, rgb: np.ndarray | None) -> None:
        flow = self.compass.flow
        rgb = rgb if rgb is not None else np.zeros((flow.height, flow.width, 3), np.uint8)
        with contextlib.suppress(InputError):  # features() only: the frame pair and heading are untouched
            flow.features(rgb)

    def messages(self, header: Any, rgb: np.ndarray) -> list[tuple[str, Any]]:
        from libredgetpu_ros.ros.flow.messages import flow_messages, stamp_seconds

        c = self.compass
        result = c.step(rgb, stamp_seconds(header))
        return flow_messages(header, result, c.heading_deg, c.fov_deg, c.projection, rgb.shape[1],
                             self.params)

    def latched(self, header: Any) -> list[tuple[str, Any]]:
        return []

    def close(self) -> None:
        self.compass.close()


class RecognitionOffline:
    def __init__(self, params: Any, warn: Any = None) -> None:
        from vision_msgs.msg import Classification

        from libredgetpu_ros.ros.recognition.node import open_recognizer

        self.params = params
        self.extractor, self.db = open_recognizer(params)
        self.out_types = {"classification": Classification}

    def warm_up(self, rgb: np.ndarray | None) -> None:
        with contextlib.suppress(InputError):  # embedding keeps no state; the database is not touched
            self.extractor.embed(rgb if rgb is not None else np.zeros((224, 224, 3), np.uint8))

    def messages(self, header: Any, rgb: np.ndarray) -> list[tuple[str, Any]]:
        from libredgetpu_ros.ros.recognition.node import decide, recognition_messages

        decision = decide(self.db, self.extractor.embed(rgb), self.params)
        return recognition_messages(header, decision, self.params)

    def latched(self, header: Any) -> list[tuple[str, Any]]:
        return []

    def close(self) -> None:
        try:
            self.extractor.close()
        finally:
            self.db.engine.close()


def _perception_params() -> ParamTable:
    from libredgetpu_ros.ros.perception_node import PARAMS

    return PARAMS


def _flow_params() -> ParamTable:
    from libredgetpu_ros.ros.flow.params import PARAMS

    return PARAMS


def _recognition_params() -> ParamTable:
    from libredgetpu_ros.ros.recognition.params import RECOGNITION_PARAMS

    return RECOGNITION_PARAMS


def _lazy(module: str, name: str) -> Callable[[], Any]:
    return lambda: getattr(importlib.import_module(module), name)


_ROBOTICS = "libredgetpu_ros.ros.robotics"
# node type (as in bringup's NODE_TYPES) -> (its parameter table, its processor: the live node's PROCESSOR);
# both imported when asked for
OFFLINE_NODES: dict[str, tuple[Callable[[], ParamTable], Callable[[], type]]] = {
    "perception": (_perception_params, lambda: PerceptionOffline),
    "tracker": (_lazy(f"{_ROBOTICS}.params", "TRACKER_PARAMS"),
                _lazy(f"{_ROBOTICS}.processors", "TrackerProcessor")),
    "looming": (_lazy(f"{_ROBOTICS}.params", "LOOMING_PARAMS"),
                _lazy(f"{_ROBOTICS}.processors", "LoomingProcessor")),
    "flow": (_flow_params, lambda: FlowOffline),
    "recognition": (_recognition_params, lambda: RecognitionOffline),
}


def _known(node_type: str) -> None:
    if node_type not in OFFLINE_NODES:
        raise ConfigError(f"node type {node_type!r}: process-bag runs {', '.join(OFFLINE_NODES)}")


def param_table(node_type: str) -> ParamTable:
    _known(node_type)
    return OFFLINE_NODES[node_type][0]()


def processor_class(node_type: str) -> type:
    """The processor the live node of ``node_type`` runs (its ``PROCESSOR``)."""
    _known(node_type)
    return OFFLINE_NODES[node_type][1]()


def open_offline(node_type: str, params: Any) -> OfflineNode:
    """The node's processor, opened from its parameters (a ``LibrEdgeTpuError`` if it cannot be); what it
    does otherwise than the live node is logged."""
    cls: Any = processor_class(node_type)
    for note in getattr(cls, "offline_notes", lambda p: [])(params):
        _log.warning("process-bag: %s", note)
    return cls(params, warn=lambda text: _log.warning("%s", text))
