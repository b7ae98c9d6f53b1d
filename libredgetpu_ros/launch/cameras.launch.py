"""Several cameras on one accelerator: the nodes of a bringup file in one process (docs/multi_camera.md).

    libredgetpu-ros models fetch mobilenet_v2_1.0_224         # once: the default config's model
    ros2 launch libredgetpu_ros cameras.launch.py              # config/cameras.yaml: /front, /rear, /wrist
    ros2 launch libredgetpu_ros cameras.launch.py config:=libredgetpu_ros/config/cameras.yaml

``ros2 launch`` gives every node action a process of its own, and processes cannot share an accelerator (the
second open is refused, naming the first); so this launch file starts one ``libredgetpu-ros bringup`` process
for the file's nodes (an ``image_topics`` entry: one camera node per topic), which takes each node to
``active`` and shares the device between them. The process ends with the launch (Ctrl-C; on SIGTERM to the
launch too: ``ros/lifetime.py``).
"""

from __future__ import annotations

import sys

from launch import LaunchDescription
from launch.actions import ExecuteProcess
from launch.substitutions import LaunchConfiguration
from libredgetpu_ros.ros.launching import STOP_WITH_LAUNCH, installed_config, launch_arguments


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        *launch_arguments({"config": (installed_config("cameras.yaml"),
                                      "bringup file of the camera nodes (image_topics: a node per camera)")}),
        ExecuteProcess(cmd=[sys.executable, "-m", "libredgetpu_ros.cli.main", "bringup",
                            LaunchConfiguration("config")],
                       name="cameras", output="screen", prefix=STOP_WITH_LAUNCH),
    ])
