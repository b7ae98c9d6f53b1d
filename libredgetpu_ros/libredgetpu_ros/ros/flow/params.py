"""The flow node's parameters: its own (template, flow and compass settings, outputs) merged with the camera
base's image parameters into one table."""

from __future__ import annotations

from dataclasses import dataclass

from libredgetpu_ros.backend_kinds import BACKEND_KINDS
from libredgetpu_ros.robotics.flow import (
    DEFAULT_MIN_CONFIDENCE,
    DEFAULT_MIN_MARGIN,
    DEFAULT_MIN_MATCH,
    DEFAULT_MIN_TEXTURE,
)
from libredgetpu_ros.ros.camera import ImageParams, camera_param_table
from libredgetpu_ros.ros.params import DEVICE_PARAM, DEVICE_SHARE_PARAM, ParamSpec


@dataclass(frozen=True)
class FlowParams(ImageParams):
    model: str
    backend: str
    device: str
    device_share_hz: float
    mode: str
    search_range: int
    pool_factor: int
    temperature: float
    min_texture: float
    min_confidence: float
    min_margin: float
    refine: bool
    min_match: float
    max_gap: float
    fov_deg: float
    use_camera_info: bool
    camera_info_topic: str
    projection: str
    publish_marker: bool
    marker_scale: float


PARAMS = camera_param_table([
    ParamSpec("model", "gabor_64x64_p4", "Gabor flow template: a name (gabor_64x64_p4, gabor_64x64_7k_4o_2s, "
              "gabor_128x128_p4, ...; model cache first: models fetch NAME; then $LIBREDGETPU_ROS_TEMPLATES, "
              "the fixtures) or any of its files."),
    ParamSpec("backend", "auto", "auto prefers an attached Edge TPU; cpu runs the template's twin.",
              choices=BACKEND_KINDS),
    DEVICE_PARAM,
    DEVICE_SHARE_PARAM,
    ParamSpec("mode", "normalized", "normalized: contrast-normalised correlation, no estimate without "
              "texture; libredgetpu: LibrEdgeTPU's formulas exactly.", choices=("normalized", "libredgetpu")),
    ParamSpec("search_range", 4, "Half-width of the displacement grid in grid steps (a grid step is the "
              "pool factor in model pixels); motion beyond it saturates.", range=(1, 8)),
    ParamSpec("pool_factor", 4, "CPU pooling of the standard template (the pooled template has its own).",
              range=(1, 16)),
    ParamSpec("temperature", 0.1, "Soft argmax temperature (libredgetpu mode).", range=(0.001, 100.0),
              mutability="runtime"),
    ParamSpec("min_texture", DEFAULT_MIN_TEXTURE, "Grey-level standard deviation below which a frame gives "
              "no estimate (reported as low_texture in diagnostics, not as motion).", range=(0.0, 255.0),
              mutability="runtime"),
    ParamSpec("min_confidence", DEFAULT_MIN_CONFIDENCE, "Normalised correlation of the best displacement "
              "below which a pair gives no estimate.", range=(-1.0, 1.0), mutability="runtime"),
    ParamSpec("min_margin", DEFAULT_MIN_MARGIN, "How far the best score must stand above any other "
              "outside its neighbourhood (repeating scenes give none).", range=(0.0, 2.0),
              mutability="runtime"),
    ParamSpec("refine", True, "Refine the device's peaks at the frame's resolution (normalized mode, pinhole "
              "projection): slow motion in camera-sized frames reads true; validity from the match there."),
    ParamSpec("min_match", DEFAULT_MIN_MATCH, "Refined pairs: normalised correlation of the frames at the "
              "refined motion below which a pair gives no estimate (motion beyond the search range, a "
              "changed scene).", range=(-1.0, 1.0), mutability="runtime"),
    ParamSpec("max_gap", 0.5, "Seconds between two frames' stamps beyond which the pair is reset instead "
              "of reporting a jump; 0: never.", range=(0.0, 3600.0), mutability="runtime"),
    ParamSpec("fov_deg", 60.0, "Horizontal field of view in degrees (used until a CameraInfo arrives when "
              "use_camera_info is true).", range=(1.0, 179.0), mutability="runtime"),
    ParamSpec("use_camera_info", True, "Take the field of view from sensor_msgs/CameraInfo on "
              "camera_info_topic (width and fx) when one is published."),
    ParamSpec("camera_info_topic", "camera_info", "CameraInfo topic of the camera.", mutability="read_only"),
    ParamSpec("projection", "pinhole", "pinhole: frames remapped to equal-angle columns before the flow "
              "(yaw exact across the view); linear: LibrEdgeTPU's fov/width.", choices=("pinhole", "linear")),
    ParamSpec("publish_marker", True, "Publish an rviz arrow (visualization_msgs/Marker) of the image-plane "
              "flow on flow_marker.", mutability="runtime"),
    ParamSpec("marker_scale", 0.001, "Arrow length in metres per pixel/s of flow (rviz).",
              range=(1e-6, 1.0), mutability="runtime"),
], FlowParams)
