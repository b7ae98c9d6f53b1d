"""Markers on the camera's image plane: a camera node that draws rviz markers reads the camera's
``sensor_msgs/CameraInfo`` and hands its markers a :class:`~libredgetpu_ros.ros.conversions.ImagePlane`.

One piece for every node with markers (perception, tracker, looming): :data:`MARKER_PLANE_PARAMS`
(``marker_depth``, ``camera_info_topic``) in the node's table, and :class:`ImagePlaneInput` before
:class:`~libredgetpu_ros.ros.camera.CameraNode` in its bases. The CameraInfo is taken on the camera thread,
in order with the frames and never concurrently with ``process``, while the node is active.
"""

from __future__ import annotations

from sensor_msgs.msg import CameraInfo

from libredgetpu_ros.ros.camera.qos import CAMERA_INFO_QOS
from libredgetpu_ros.ros.conversions import ImagePlane
from libredgetpu_ros.ros.params import ParamSpec

MARKER_PLANE_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("marker_depth", 1.0, "Depth in metres of the image plane markers are drawn on once the "
              "camera's CameraInfo is known (they overlay the image in rviz's Camera display; an object's "
              "real depth when one is known).", range=(0.01, 1000.0), mutability="runtime"),
    ParamSpec("camera_info_topic", "", "CameraInfo topic of the camera (markers on its image plane); empty: "
              "camera_info beside the image topic, as image_transport pairs them.", mutability="read_only"),
)


class ImagePlaneInput:
    """Mixin for a ``CameraNode`` whose parameters hold :data:`MARKER_PLANE_PARAMS`, ``publish_markers``
    and ``input_topic``: subscribes to the camera's CameraInfo while active (on the node's data path, with
    the frames); :meth:`image_plane` gives the markers' plane for a frame."""

    _plane_info: CameraInfo | None = None  # the newest, on the camera thread

    def create_inputs(self) -> None:
        super().create_inputs()
        self.data_subscription(CameraInfo, self.camera_info_topic(), self._on_plane_info, CAMERA_INFO_QOS)

    def drop_inputs(self) -> None:
        super().drop_inputs()
        self._plane_info = None  # the camera may change before the next activate

    def camera_info_topic(self) -> str:
        """``camera_info_topic``, or ``camera_info`` in the (remapped) image topic's namespace."""
        params, resolve = self.cfg, self.resolve_topic_name
        if params.camera_info_topic:
            return resolve(params.camera_info_topic)
        return resolve(params.input_topic).rsplit("/", 1)[0] + "/camera_info"

    def _on_plane_info(self, msg: CameraInfo) -> None:
        self._plane_info = msg

    def image_plane(self, width: int, height: int) -> ImagePlane | None:
        """The markers' image plane for a ``width`` x ``height`` frame from the newest CameraInfo; None
        without one, with markers off, for an uncalibrated camera (K all zero), and (with a bad-input count,
        one warning) for a K that is no pinhole camera."""
        info = self._plane_info
        if info is None or not self.cfg.publish_markers:
            return None
        try:
            return ImagePlane.from_camera_info(info, width, height, self.cfg.marker_depth)
        except ValueError as exc:
            self._plane_info = None
            if self.stats.bad_input.add("camera_info") == 1:
                self.get_logger().warning(f"camera info ignored (markers stay at marker_scale): {exc}")
            return None
