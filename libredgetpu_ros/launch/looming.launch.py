"""Looming (collision warning) lifecycle node: `ros2 launch` on a robot, or from the venv after
`source tools/env.sh`.

    ros2 launch libredgetpu_ros looming.launch.py params_file:=/path/looming.yaml \
        namespace:=front_camera image:=/front_camera/image_raw autostart:=true
    ros2 launch libredgetpu_ros looming.launch.py model:=looming_64x64_3x3 backend:=cpu rviz:=true

Without ``params_file`` the installed ``config/looming.yaml`` is used; ``model`` (the node's ``template``
parameter), ``backend`` ``image_reliability`` and ``transport`` (raw | compressed: ``<image>/compressed``),
when given, override it. With autostart the launch configures the node, then activates it once it reports
``inactive`` (once, at start).
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
from libredgetpu_ros.ros.robotics.params import LOOMING_PARAMS

OVERRIDES = ("model", "backend", "image_reliability", "transport")
RENAMED = {"model": "template"}  # launch argument -> the node parameter it sets


def generate_launch_description() -> LaunchDescription:
    return lifecycle_launch("looming_node", {
        "params_file": (installed_config("looming.yaml"), "node parameters (config/*.yaml)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("looming", "the node's name (its services and ~/ topics)"),
        **CAMERA_ARGUMENT,
        "model": ("", "template (parameter template): *_edgetpu.tflite or a name such as "
                      "looming_64x64_3x3; '' = the params file's"),
        "backend": ("", "auto | cpu | edgetpu; '' = the params file's"),
        "image_reliability": ("", "auto | best_effort | reliable; '' = the params file's"),
        "autostart": ("true", "configure and activate at start-up"),
    }, file_and_overrides(LOOMING_PARAMS, OVERRIDES, RENAMED), remappings=CAMERA_REMAPPINGS,
        rviz_config="looming")
