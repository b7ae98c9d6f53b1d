"""Recognition (place / object re-identification) lifecycle node: `ros2 launch` on a robot, or from the venv
after `source tools/env.sh`.

    ros2 launch libredgetpu_ros recognition.launch.py params_file:=/path/recognition.yaml \
        namespace:=front_camera image:=/front_camera/image_raw autostart:=true

With autostart the launch configures the node, then activates it once it reports ``inactive``; enrol what
the camera sees with ``ros2 service call /recognition/enroll libredgetpu_ros_interfaces/srv/Enroll
"{label: kitchen}"``.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from libredgetpu_ros.ros.launching import autostarted, installed_config, launch_arguments


def generate_launch_description() -> LaunchDescription:
    arguments = launch_arguments({
        "params_file": (installed_config("recognition.yaml"), "node parameters (config/*.yaml)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("recognition", None),
        "image": ("image_raw", "camera topic remapped onto the node's input topic"),
        "autostart": ("true", "configure and activate at start-up"),
    })
    node = LifecycleNode(
        package="libredgetpu_ros",
        executable="recognition_node",
        name=LaunchConfiguration("node_name"),
        namespace=LaunchConfiguration("namespace"),
        parameters=[LaunchConfiguration("params_file")],
        remappings=[("image_raw", LaunchConfiguration("image")),
                    ("image_raw/compressed", [LaunchConfiguration("image"), "/compressed"])],
        output="screen",
    )
    return LaunchDescription([*arguments, *autostarted(node)])
