"""Servo tracker lifecycle node (spot or pattern): `ros2 launch` on a robot, or from the venv after
`source tools/env.sh`.

    ros2 launch libredgetpu_ros tracker.launch.py params_file:=/path/tracker_spot.yaml \
        namespace:=front_camera image:=/front_camera/image_raw autostart:=true
    ros2 launch libredgetpu_ros tracker.launch.py model:=color_red_64x64 color:=green backend:=cpu rviz:=true

Without ``params_file`` the installed ``config/tracker_spot.yaml`` is used; ``model`` (the node's ``template``
parameter: a *_edgetpu.tflite or a fixture name such as color_red_64x64), ``backend``, ``module``, ``color``,
``template_patch`` ``image_reliability`` and ``transport`` (raw | compressed: ``<image>/compressed``), when
given, override it. With autostart the launch configures the node, then activates it once it reports
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
from libredgetpu_ros.ros.robotics.params import TRACKER_PARAMS

OVERRIDES = ("model", "backend", "module", "color", "template_patch", "image_reliability", "transport")
RENAMED = {"model": "template"}  # launch argument -> the node parameter it sets


def generate_launch_description() -> LaunchDescription:
    return lifecycle_launch("tracker_node", {
        "params_file": (installed_config("tracker_spot.yaml"), "node parameters (config/*.yaml)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("tracker", "the node's name (its services and ~/ topics)"),
        **CAMERA_ARGUMENT,
        "model": ("", "template (parameter template): *_edgetpu.tflite or a name such as color_red_64x64; "
                      "'' = the params file's"),
        "backend": ("", "auto | cpu | edgetpu; '' = the params file's"),
        "module": ("", "spot | pattern; '' = the params file's"),
        "color": ("", "spot colour: a preset (red, green, ...) or 'R G B'; '' = the params file's"),
        "template_patch": ("", "pattern templates: reference patch image file; '' = the params file's"),
        "image_reliability": ("", "auto | best_effort | reliable; '' = the params file's"),
        "autostart": ("true", "configure and activate at start-up"),
    }, file_and_overrides(TRACKER_PARAMS, OVERRIDES, RENAMED), remappings=CAMERA_REMAPPINGS,
        rviz_config="tracker")
