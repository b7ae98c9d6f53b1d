"""The registry of the camera nodes ``process-bag`` runs: node type -> its parameter table and its processor,
the ``CameraProcessor`` subclass its live node runs (``PROCESSOR``; ``ros/camera/processor.py``), so offline
results are what the node publishes by construction (``test_camera_processors`` holds the classes equal).

A processor turns one decoded frame (HxWx3 uint8 RGB + the frame's header) into the (relative topic,
message) pairs the live node would publish for it, in the same order (``CameraProcessor.messages``:
``frame`` without the node's subscriber filter); offline every output the parameters ask for is written
(markers, annotated images), as if someone subscribed to it live:

- ``perception``: ``perception/processor.py`` (``PerceptionPipeline`` + ``conversions.result_messages``, and
  the latched ``label_info``); ``require_accelerator`` is the live node's only: offline the model runs where
  it can;
- ``tracker``, ``looming``: ``robotics/processors.py``; the looming tau history and time to contact integrate
  over the frames' header stamps, as live (stamps going backwards restart it);
- ``flow``: ``flow/processor.py``; the frame pair, rates and heading run on the header stamps, as live. The
  field of view is ``fov_deg``: a CameraInfo in the bag is not read (the live node with ``use_camera_info``
  takes it from the camera; set ``fov_deg`` to the camera's);
- ``recognition``: ``recognition/processor.py``; the database is the ``database`` file's for the whole bag
  (the live node's ``~/enroll`` / ``~/forget`` calls are not in a camera bag).

A frame's bad data raises ``ImageError`` / ``InputError`` (counted by the caller, as the live node counts
it); ``DeviceError`` / ``BackendError`` propagate (the node would stop too). Tables and processors are
imported when asked for: naming the node types costs no import.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.ros.params import ParamTable

if TYPE_CHECKING:
    from libredgetpu_ros.ros.camera.processor import CameraProcessor

_log = logging.getLogger(__name__)


def _lazy(module: str, name: str) -> Callable[[], Any]:
    return lambda: getattr(importlib.import_module(f"libredgetpu_ros.ros.{module}"), name)


# node type (as in bringup's NODE_TYPES) -> (its parameter table, its processor: the live node's PROCESSOR)
OFFLINE_NODES: dict[str, tuple[Callable[[], ParamTable], Callable[[], type[CameraProcessor]]]] = {
    "perception": (_lazy("perception.params", "PARAMS"),
                   _lazy("perception.processor", "PerceptionProcessor")),
    "tracker": (_lazy("robotics.params", "TRACKER_PARAMS"), _lazy("robotics.processors", "TrackerProcessor")),
    "looming": (_lazy("robotics.params", "LOOMING_PARAMS"), _lazy("robotics.processors", "LoomingProcessor")),
    "flow": (_lazy("flow.params", "PARAMS"), _lazy("flow.processor", "FlowProcessor")),
    "recognition": (_lazy("recognition.params", "RECOGNITION_PARAMS"),
                    _lazy("recognition.processor", "RecognitionProcessor")),
}


def _known(node_type: str) -> None:
    if node_type not in OFFLINE_NODES:
        raise ConfigError(f"node type {node_type!r}: process-bag runs {', '.join(OFFLINE_NODES)}")


def param_table(node_type: str) -> ParamTable:
    _known(node_type)
    return OFFLINE_NODES[node_type][0]()


def processor_class(node_type: str) -> type[CameraProcessor]:
    """The processor the live node of ``node_type`` runs (its ``PROCESSOR``)."""
    _known(node_type)
    return OFFLINE_NODES[node_type][1]()


def open_offline(node_type: str, params: Any) -> CameraProcessor:
    """The node's processor, opened from its parameters (a ``LibrEdgeTpuError`` if it cannot be); what it
    does otherwise than the live node, and what it substitutes, is logged."""
    cls: Any = processor_class(node_type)
    for note in cls.offline_notes(params):
        _log.warning("%s", note)
    return cls(params, warn=lambda text: _log.warning("%s", text))
