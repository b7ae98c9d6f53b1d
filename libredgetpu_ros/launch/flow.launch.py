"""Flow lifecycle node (optical flow, yaw rate, heading): `ros2 launch` on a robot, or from the venv after
`source tools/env.sh`.

    ros2 launch libredgetpu_ros flow.launch.py image:=/front_camera/image_raw \
        camera_info:=/front_camera/camera_info namespace:=front_camera
    ros2 launch libredgetpu_ros flow.launch.py fov_deg:=90 backend:=cpu rviz:=true

Without ``params_file`` the installed ``config/flow.yaml`` is used; ``model``, ``backend``, ``fov_deg``,
``search_range`` and ``image_reliability``, when given, override it. With autostart the launch emits
configure, then activate once the node reports ``inactive``; without it: ``ros2 lifecycle set /flow
configure``.
"""

from __future__ import annotations

from launch import LaunchContext, LaunchDescription
from launch.actions import OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from libredgetpu_ros.ros.flow.params import PARAMS
from libredgetpu_ros.ros.launching import (
    RVIZ_ARGUMENT,
    argument_overrides,
    autostarted,
    installed_config,
    launch_arguments,
    rviz,
)

OVERRIDES = ("model", "backend", "fov_deg", "search_range", "image_reliability")


def _node_and_transitions(context: LaunchContext) -> list:
    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="flow_node",
        name=LaunchConfiguration("node_name"),
        namespace=LaunchConfiguration("namespace"),
        parameters=[LaunchConfiguration("params_file"), argument_overrides(context, PARAMS, OVERRIDES)],
        remappings=[("image_raw", LaunchConfiguration("image")),
                    ("image_raw/compressed", [LaunchConfiguration("image"), "/compressed"]),
                    ("camera_info", LaunchConfiguration("camera_info"))],
        output="screen",
    )
    return autostarted(node)


def generate_launch_description() -> LaunchDescription:
    arguments = launch_arguments({
        "params_file": (installed_config("flow.yaml"), "node parameters (config/flow.yaml)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("flow", None),
        "image": ("image_raw", "camera topic remapped onto the node's input topic"),
        "camera_info": ("camera_info", "the camera's CameraInfo topic (field of view)"),
        "model": ("", "Gabor template: *_edgetpu.tflite path; '' = the params file's"),
        "backend": ("", "auto | cpu | edgetpu; '' = the params file's"),
        "fov_deg": ("", "horizontal field of view in degrees when no CameraInfo; '' = the params file's"),
        "search_range": ("", "displacements searched, in grid steps; '' = the params file's"),
        "image_reliability": ("", "auto | best_effort | reliable; '' = the params file's"),
        "autostart": ("true", "configure and activate at start-up (once)"),
        **RVIZ_ARGUMENT,
    })
    return LaunchDescription([*arguments, OpaqueFunction(function=_node_and_transitions), rviz("flow")])
