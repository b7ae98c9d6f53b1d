"""Parameters of the robotics nodes (their own merged with the camera base's image parameters, one table
each)."""

from __future__ import annotations

from dataclasses import dataclass

from libredgetpu_ros.backend_kinds import BACKEND_KINDS
from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.ros.camera import ImageParams, camera_param_table
from libredgetpu_ros.ros.camera.image_plane import MARKER_PLANE_PARAMS
from libredgetpu_ros.ros.params import DEVICE_PARAM, DEVICE_SHARE_PARAM, ParamSpec

MAX_CPU_THREADS = 64

_COMMON = [
    ParamSpec("template", "", "Robotics template: a compiled *_edgetpu.tflite, its twin or sidecar, or a "
              "name such as color_red_64x64 (model cache first: models fetch NAME; then "
              "$LIBREDGETPU_ROS_TEMPLATES, the fixtures)."),
    ParamSpec("backend", "auto", "auto prefers an attached Edge TPU; cpu runs the template's CPU twin.",
              choices=BACKEND_KINDS),
    DEVICE_PARAM,
    DEVICE_SHARE_PARAM,
    ParamSpec("cpu_threads", 1, "LiteRT threads on the cpu backend (the templates are small: 1 is fastest).",
              range=(1, MAX_CPU_THREADS)),
    ParamSpec("resize", True, "Resize frames to the template's input (false: frames of another size are "
              "refused as bad input)."),
    ParamSpec("publish_markers", True, "Publish a visualization_msgs/MarkerArray on `markers` (on the "
              "camera's image plane once its CameraInfo arrives, else marker_scale metres per template "
              "pixel).", mutability="runtime"),
    ParamSpec("publish_annotated", False, "Publish the frame with the result drawn on `annotated`.",
              mutability="runtime"),
    ParamSpec("marker_scale", 0.01, "Marker size in metres per template-input pixel (rviz) until a "
              "CameraInfo arrives; then markers lie on the camera's image plane at marker_depth.",
              range=(1e-6, 1.0), mutability="runtime"),
    *MARKER_PLANE_PARAMS,
]


@dataclass(frozen=True)
class _Common(ImageParams):
    template: str
    backend: str
    device: str
    device_share_hz: float
    cpu_threads: int
    resize: bool
    publish_markers: bool
    publish_annotated: bool
    marker_scale: float
    marker_depth: float
    camera_info_topic: str


@dataclass(frozen=True)
class TrackerParams(_Common):
    module: str
    mode: str
    color: str
    template_patch: str
    gain: float
    direction_threshold: float


TRACKER_PARAMS = camera_param_table([
    ParamSpec("module", "spot", "spot: bright / colour spot template; pattern: reference patch template.",
              choices=("spot", "pattern")),
    ParamSpec("mode", "checked", "checked: every result says whether it is valid (spot: one compact target; "
              "pattern: normalised correlation with a score); no offset and a zero servo error when not. "
              "libredgetpu: LibrEdgeTPU's decode alone, never checked.", choices=("checked", "libredgetpu")),
    *_COMMON,
    ParamSpec("color", "", "Spot colour templates: filter weights swapped in at configure, 'R G B' (e.g. "
              "'1 -0.5 -0.5') or a preset (red, green, blue, yellow, white, cyan, magenta); empty: the "
              "template's own. At run time: the ~/set_color service."),
    ParamSpec("template_patch", "", "Pattern templates: image file of the reference patch (kernel size) set "
              "at configure; empty: the template's own. At run time: ~/set_template_region."),
    ParamSpec("gain", 1.0, "servo_error = -gain * offset.", range=(-1000.0, 1000.0), mutability="runtime"),
    ParamSpec("direction_threshold", 0.1, "Dead zone of the direction in diagnostics (offset units).",
              range=(0.0, 1.0), mutability="runtime"),
], TrackerParams)


@dataclass(frozen=True)
class LoomingParams(_Common):
    ttc_mode: str
    max_gap: float
    ttc_window: int
    ttc_min_samples: int
    contact_tau: float
    warn_tau: float


LOOMING_PARAMS = camera_param_table([
    *_COMMON,
    ParamSpec("ttc_mode", "scale", "scale: time to contact in seconds from the expansion of the image centre "
              "between stamped frames, with ttc_valid and a reason (robotics/ttc.py); libredgetpu: "
              "LibrEdgeTPU's tau-rate formula (ttc_window, ttc_min_samples, contact_tau).",
              choices=("scale", "libredgetpu")),
    ParamSpec("max_gap", 0.5, "Seconds between frames (header stamps) beyond which the TTC history restarts "
              "(no TTC until it refills).", range=(0.001, 3600.0)),
    ParamSpec("ttc_window", 5, "Frames in the tau history the time to contact is estimated over.",
              range=(2, 1000)),
    ParamSpec("ttc_min_samples", 3, "Frames needed before a time to contact is given.", range=(2, 1000)),
    ParamSpec("contact_tau", 2.0, "tau taken as contact (LibrEdgeTPU: 2, the centre twice as dense).",
              range=(1.01, 100.0)),
    ParamSpec("warn_tau", 1.5, "Diagnostics WARN while tau is above this.", range=(0.0, 1000.0),
              mutability="runtime"),
], LoomingParams)


def parse_color(text: str) -> tuple[float, float, float] | None:
    """'' -> None; a preset name or 'R G B' -> weights; anything else is a ConfigError."""
    from libredgetpu_ros.robotics.spot import COLOR_PRESETS

    text = text.strip()
    if not text:
        return None
    if text.lower() in COLOR_PRESETS:
        return COLOR_PRESETS[text.lower()]
    try:
        values = [float(v) for v in text.replace(",", " ").split()]
    except ValueError:
        values = []
    if len(values) != 3:
        raise ConfigError(f"parameter color is {text!r}: give 'R G B' or one of {', '.join(COLOR_PRESETS)}")
    return values[0], values[1], values[2]
