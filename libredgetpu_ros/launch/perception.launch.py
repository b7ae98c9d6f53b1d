"""Perception lifecycle node: `ros2 launch` on a robot, or from the venv after `source tools/env.sh`.

    ros2 launch libredgetpu_ros perception.launch.py params_file:=/path/perception_pose.yaml \
        namespace:=front_camera image:=/front_camera/image_raw autostart:=true

With autostart the launch emits the lifecycle transitions configure, then activate once the node reports
``inactive``. Without it, drive it yourself: ``ros2 lifecycle set /front_camera/perception configure``.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from libredgetpu_ros.ros.launching import autostarted, installed_config, launch_arguments


def generate_launch_description() -> LaunchDescription:
    arguments = launch_arguments({
        "params_file": (installed_config("perception_pose.yaml"),
                        "node parameters (config/perception_*.yaml)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("perception", None),
        "image": ("image_raw", "camera topic remapped onto the node's input topic"),
        "autostart": ("true", "configure and activate at start-up"),
    })
    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="perception_node",
        name=LaunchConfiguration("node_name"),
        namespace=LaunchConfiguration("namespace"),
        parameters=[LaunchConfiguration("params_file")],
        remappings=[("image_raw", LaunchConfiguration("image")),
                    ("image_raw/compressed", [LaunchConfiguration("image"), "/compressed"])],
        output="screen",
    )
    return LaunchDescription([*arguments, *autostarted(node)])
