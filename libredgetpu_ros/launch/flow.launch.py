"""Flow lifecycle node (optical flow, yaw rate, heading): `ros2 launch` on a robot, or from the venv after
`source tools/env.sh`.

    ros2 launch libredgetpu_ros flow.launch.py image:=/front_camera/image_raw \
        camera_info:=/front_camera/camera_info namespace:=front_camera
    ros2 launch libredgetpu_ros flow.launch.py fov_deg:=90 backend:=cpu rviz:=true

Without ``params_file`` the installed ``config/flow.yaml`` is used; ``model``, ``backend``, ``fov_deg``,
``search_range``, ``image_reliability`` and ``transport`` (raw | compressed: ``<image>/compressed``), when
given, override it. With autostart the launch emits configure, then activate once the node reports
``inactive``; without it: ``ros2 lifecycle set /flow configure``.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.substitutions import LaunchConfiguration
from libredgetpu_ros.ros.flow.params import PARAMS
from libredgetpu_ros.ros.launching import (
    CAMERA_ARGUMENT,
    CAMERA_REMAPPINGS,
    file_and_overrides,
    installed_config,
    lifecycle_launch,
)

OVERRIDES = ("model", "backend", "fov_deg", "search_range", "image_reliability", "transport")


def generate_launch_description() -> LaunchDescription:
    return lifecycle_launch("flow_node", {
        "params_file": (installed_config("flow.yaml"), "node parameters (config/flow.yaml)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("flow", "the node's name (its services and ~/ topics)"),
        **CAMERA_ARGUMENT,
        "camera_info": ("camera_info", "the camera's CameraInfo topic (field of view)"),
        "model": ("", "Gabor template: *_edgetpu.tflite path; '' = the params file's"),
        "backend": ("", "auto | cpu | edgetpu; '' = the params file's"),
        "fov_deg": ("", "horizontal field of view in degrees when no CameraInfo; '' = the params file's"),
        "search_range": ("", "displacements searched, in grid steps; '' = the params file's"),
        "image_reliability": ("", "auto | best_effort | reliable; '' = the params file's"),
        "autostart": ("true", "configure and activate at start-up (once)"),
    }, file_and_overrides(PARAMS, OVERRIDES),
        remappings=[*CAMERA_REMAPPINGS, ("camera_info", LaunchConfiguration("camera_info"))],
        rviz_config="flow")
