"""Perception lifecycle node: camera images in; poses, detections, classes, masks, markers, diagnostics out.

A :class:`~libredgetpu_ros.ros.camera.CameraNode` (``ros/camera/``: lifecycle, image intake and QoS, threads,
fault handling, diagnostics), whose processor (``perception/processor.py``, what ``process-bag`` runs too)
is a ``PerceptionPipeline``:

- configure: load the model and open the backend/device (failure -> FAILURE, stays unconfigured, reason
  logged), create the result publishers for the model's task and publish the label map;
- each frame (camera thread): the pipeline on the newest frame, results published with its header; a
  ``DeviceError`` / ``BackendError`` (e.g. the accelerator unplugged) takes the node through
  ``on_error`` to ``unconfigured``;
- cleanup / shutdown / error: close the pipeline (releases the device);
- while active, the camera's ``sensor_msgs/CameraInfo`` (``camera_info_topic``, on the camera thread, in
  order with the frames) gives the markers their image plane (``camera/image_plane.py``, at
  ``marker_depth``); before one arrives they lie on z = 0 at ``marker_scale`` metres per pixel.

Runtime parameters (score threshold, result counts) go to the pipeline's ``set_options`` under a lock (the
processor's), so a value the pipeline refuses is refused to the caller and the running options stay.
"""

from __future__ import annotations

from typing import Any

from std_msgs.msg import Header
from vision_msgs.msg import LabelInfo

from libredgetpu_ros.errors import DeviceNotFoundError
from libredgetpu_ros.ros.camera import CameraNode
from libredgetpu_ros.ros.camera.image_plane import ImagePlaneInput
from libredgetpu_ros.ros.perception.params import LABEL_QOS, PARAMS
from libredgetpu_ros.ros.perception.processor import PerceptionProcessor


class PerceptionNode(ImagePlaneInput, CameraNode):
    """Runs a ``PerceptionPipeline`` (``PerceptionProcessor``) on the newest camera frame; see the module
    docstring."""

    PARAMS = PARAMS
    PROCESSOR = PerceptionProcessor
    DIAGNOSTICS_NAME = "perception"

    def __init__(self, node_name: str | None = None, **kwargs: Any) -> None:
        self._labels_pub: Any = None
        super().__init__(node_name, **kwargs)

    def open_processor(self) -> None:
        """The processor; ``require_accelerator`` refuses one on the CPU (a robot's node only: ``process-bag``
        runs the same model on the CPU of the machine it runs on)."""
        super().open_processor()
        processor: Any = self.processor
        choice = processor.on_cpu() if self.cfg.require_accelerator else None
        if choice is not None:
            self.close_processor()
            raise DeviceNotFoundError(f"require_accelerator is true but the model would run on the CPU "
                                      f"({choice})")

    def create_outputs(self) -> None:
        super().create_outputs()
        self._labels_pub = None  # the previous configure's was destroyed by the base
        self._publish_label_info()

    def runtime_params_changed(self, names: set[str]) -> None:
        if self._labels_pub is not None and "score_threshold" in names:
            self._publish_label_info()  # LabelInfo carries the threshold

    # -- label map ------------------------------------------------------------------------------------------

    def _publish_label_info(self) -> None:
        """The label map (vision_msgs/LabelInfo) of a detector/classifier with labels. Not a lifecycle
        publisher: the map is valid from configure on, and transient-local durability hands the latest one
        to subscribers that come later."""
        processor = self.processor
        if processor is None:
            return
        for _, msg in processor.latched(Header(stamp=self.get_clock().now().to_msg())):  # label_info only
            if self._labels_pub is None:
                self._labels_pub = self.output(LabelInfo, "label_info", LABEL_QOS, lifecycle=False)
            self._labels_pub.publish(msg)
