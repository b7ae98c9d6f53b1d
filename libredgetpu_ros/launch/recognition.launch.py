"""Recognition (place / object re-identification) lifecycle node: `ros2 launch` on a robot, or from the venv
after `source tools/env.sh`.

    ros2 launch libredgetpu_ros recognition.launch.py params_file:=/path/recognition.yaml \
        namespace:=front_camera image:=/front_camera/image_raw autostart:=true
    ros2 launch libredgetpu_ros recognition.launch.py database:=/path/places.npz backend:=cpu

Without ``params_file`` the installed ``config/recognition.yaml`` is used; ``model`` (the embedding
extractor), ``backend``, ``database`` ``image_reliability`` and ``transport`` (raw | compressed:
``<image>/compressed``), when given, override it. With autostart the launch configures the node, then
activates it once it reports ``inactive`` (once, at start); enrol what the camera sees with ``ros2 service
call /recognition/enroll libredgetpu_ros_interfaces/srv/Enroll "{label: kitchen}"``.
"""

from __future__ import annotations

from launch import LaunchDescription
from libredgetpu_ros.ros.launching import (
    CAMERA_ARGUMENT,
    CAMERA_REMAPPINGS,
    file_and_overrides,
    installed_config,
    lifecycle_launch,
)
from libredgetpu_ros.ros.recognition.params import RECOGNITION_PARAMS

OVERRIDES = ("model", "backend", "database", "image_reliability", "transport")


def generate_launch_description() -> LaunchDescription:
    return lifecycle_launch("recognition_node", {
        "params_file": (installed_config("recognition.yaml"), "node parameters (config/*.yaml)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("recognition", "the node's name (its services and ~/ topics)"),
        **CAMERA_ARGUMENT,
        "model": ("", "embedding extractor *_edgetpu.tflite; '' = the params file's"),
        "backend": ("", "auto | cpu | edgetpu; '' = the params file's"),
        "database": ("", "database file (.npz from ~/save) loaded at configure; '' = the params file's"),
        "image_reliability": ("", "auto | best_effort | reliable; '' = the params file's"),
        "autostart": ("true", "configure and activate at start-up"),
    }, file_and_overrides(RECOGNITION_PARAMS, OVERRIDES), remappings=CAMERA_REMAPPINGS)
