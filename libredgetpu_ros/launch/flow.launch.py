"""Flow lifecycle node (optical flow, yaw rate, heading): `ros2 launch` on a robot, or from the venv after
`source tools/env.sh`.

    ros2 launch libredgetpu_ros flow.launch.py image:=/front_camera/image_raw \
        camera_info:=/front_camera/camera_info namespace:=front_camera

Without ``params_file`` the installed ``config/flow.yaml`` is used. With autostart the launch emits
configure, then activate once the node reports ``inactive``; without it: ``ros2 lifecycle set /flow
configure``.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from libredgetpu_ros.ros.launching import autostarted, installed_config, launch_arguments


def generate_launch_description() -> LaunchDescription:
    arguments = launch_arguments({
        "params_file": (installed_config("flow.yaml"), "node parameters (config/flow.yaml)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("flow", None),
        "image": ("image_raw", "camera topic remapped onto the node's input topic"),
        "camera_info": ("camera_info", "the camera's CameraInfo topic (field of view)"),
        "autostart": ("true", "configure and activate at start-up"),
    })
    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="flow_node",
        name=LaunchConfiguration("node_name"),
        namespace=LaunchConfiguration("namespace"),
        parameters=[LaunchConfiguration("params_file")],
        remappings=[("image_raw", LaunchConfiguration("image")),
                    ("image_raw/compressed", [LaunchConfiguration("image"), "/compressed"]),
                    ("camera_info", LaunchConfiguration("camera_info"))],
        output="screen",
    )
    return LaunchDescription([*arguments, *autostarted(node)])
