"""The image parameters every camera node shares, merged with a node's own into one ``ParamTable``, and the
topic and message type they make the node read (:func:`input_subscription`, image_transport's naming)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from libredgetpu_ros.ros.camera.qos import RELIABILITY_CHOICES
from libredgetpu_ros.ros.image_msgs import DEFAULT_MAX_PIXELS, MAX_PIXEL_BUDGET
from libredgetpu_ros.ros.params import DIAGNOSTICS_PERIOD, ParamSpec, ParamTable


@dataclass(frozen=True)
class ImageParams:
    """The shared image parameters; a node's values dataclass derives from this one and adds its own."""

    input_topic: str
    transport: str
    input_type: str
    image_reliability: str
    max_image_pixels: int
    input_timeout: float
    diagnostics_period: float


TRANSPORTS = ("raw", "compressed")
DEPRECATED_PARAMS = frozenset({"input_type"})  # accepted for old configs; shipped files leave them out


def input_subscription(params: ImageParams, resolved_topic: str) -> tuple[str, bool]:
    """(topic the node subscribes to, whether it carries CompressedImage) for ``input_topic`` resolved by
    the node (namespace and remappings applied): with ``transport`` compressed, ``<topic>/compressed`` as
    image_transport's subscriber does, so remapping the raw topic moves both; a deprecated ``input_type``
    takes the topic as given."""
    if params.input_type:
        return resolved_topic, params.input_type == "compressed"
    if params.transport == "compressed":
        return f"{resolved_topic.rstrip('/')}/compressed", True
    return resolved_topic, False


IMAGE_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("input_topic", "image_raw", "Camera topic, the raw one as image_transport names it (remap it; "
              "transport compressed reads <input_topic>/compressed).", mutability="read_only"),
    ParamSpec("transport", "raw", "image_transport of the camera: raw reads sensor_msgs/Image on "
              "input_topic, compressed reads sensor_msgs/CompressedImage (JPEG/PNG) on "
              "<input_topic>/compressed, decoded within max_image_pixels.", choices=TRANSPORTS,
              mutability="read_only"),
    ParamSpec("input_type", "", "Deprecated, use transport: raw or compressed reads input_topic itself as "
              "that type (e.g. image_raw/compressed); '' (default) follows transport.",
              choices=("", *TRANSPORTS), mutability="read_only"),
    ParamSpec("image_reliability", "auto", "Reliability of the image subscription: auto matches the "
              "publishers found on the topic (reliable when all of them are, else best_effort; re-checked "
              "when a publisher comes or goes); best_effort or reliable force it (docs/perception_node.md "
              "'Image QoS').", choices=RELIABILITY_CHOICES),
    ParamSpec("max_image_pixels", DEFAULT_MAX_PIXELS, "Frames with more pixels (width x height, read from "
              "a compressed frame's header before decoding) are refused as bad input (too_large).",
              range=(1, MAX_PIXEL_BUDGET), mutability="runtime"),
    ParamSpec("input_timeout", 5.0, "Seconds active without a frame before a WARN lists the image topics "
              "that exist (once per silence).", range=(0.5, 3600.0), mutability="runtime"),
    DIAGNOSTICS_PERIOD,
)


def camera_param_table(specs: Sequence[ParamSpec], values_type: type[ImageParams]) -> ParamTable:
    """One table: the node's own ``specs`` then :data:`IMAGE_PARAMS`; ``values_type`` must derive from
    :class:`ImageParams` (so it has the image fields) and add one field per own spec."""
    if not issubclass(values_type, ImageParams):
        raise TypeError(f"{values_type.__name__} must derive from ImageParams")
    return ParamTable([*specs, *IMAGE_PARAMS], values_type)
