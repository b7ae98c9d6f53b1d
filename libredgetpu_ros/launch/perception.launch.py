"""Perception lifecycle node: `ros2 launch` on a robot, or from the venv after `source tools/env.sh`.

    libredgetpu-ros models fetch posenet_mobilenet_v1_075_481_641      # once: the default config's model
    ros2 launch libredgetpu_ros perception.launch.py                  # PoseNet on image_raw, autostart
    ros2 launch libredgetpu_ros perception.launch.py model:=mobilenet_v1_0.25_128 task:=classify \
        namespace:=front_camera image:=/front_camera/image_raw
    ros2 launch libredgetpu_ros perception.launch.py params_file:=/path/perception_pose.yaml rviz:=true
    libredgetpu-ros models fetch ssd_mobilenet_v2_coco                 # once (offline: models import DIR)
    ros2 launch libredgetpu_ros perception.launch.py task:=detect      # config/perception_detect.yaml

``model``, ``backend``, ``task``, ``labels``, ``image_reliability``, ``transport`` (raw | compressed:
``<image>/compressed``) and ``require_accelerator``, when given, override the params file (default: the
installed ``config/perception_<task>.yaml`` of ``task:=``, PoseNet's ``perception_pose.yaml`` without one); a
model is a catalogue name (``libredgetpu-ros models list``) or a path. A model that is not there fails
configure with the command that fetches it in the log, and the node stays ``unconfigured``.

With autostart the launch emits configure, then activate if that configure succeeded -- once: a later
configure (after deactivate -> cleanup) leaves the node ``inactive``. Without it, drive it yourself:
``ros2 lifecycle set /front_camera/perception configure``.
"""

from __future__ import annotations

from launch import LaunchContext, LaunchDescription
from launch.substitutions import LaunchConfiguration
from libredgetpu_ros.perception.tasks import TASKS
from libredgetpu_ros.ros.launching import (
    CAMERA_ARGUMENT,
    CAMERA_REMAPPINGS,
    argument_overrides,
    installed_config,
    lifecycle_launch,
)
from libredgetpu_ros.ros.perception.params import PARAMS

OVERRIDES = ("model", "backend", "task", "labels", "image_reliability", "transport", "require_accelerator")


def params_file(context: LaunchContext) -> str:
    """The ``params_file`` argument, else the shipped config of the ``task`` argument (pose without one)."""
    given = LaunchConfiguration("params_file").perform(context).strip()
    if given:
        return given
    task = LaunchConfiguration("task").perform(context).strip()
    return installed_config(f"perception_{task if task in TASKS else 'pose'}.yaml")


def parameters(context: LaunchContext) -> list:
    return [params_file(context), argument_overrides(context, PARAMS, OVERRIDES)]


def generate_launch_description() -> LaunchDescription:
    return lifecycle_launch("perception_node", {
        "params_file": ("", "node parameters; '' = config/perception_<task>.yaml of task:= (pose: none)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("perception", "the node's name (its services and ~/ topics)"),
        **CAMERA_ARGUMENT,
        "model": ("", "catalogue name (libredgetpu-ros models list) or *_edgetpu.tflite path; '' = the "
                      "params file's"),
        "backend": ("", "auto | cpu | edgetpu; '' = the params file's"),
        "task": ("", "auto | pose | segment | detect | classify; '' = the params file's"),
        "labels": ("", "label file or catalogue name; '' = the params file's"),
        "image_reliability": ("", "auto | best_effort | reliable; '' = the params file's"),
        "require_accelerator": ("", "true: configure fails without an accelerator; '' = the params file's"),
        "autostart": ("true", "configure and activate at start-up (once)"),
    }, parameters, remappings=CAMERA_REMAPPINGS, rviz_config="perception")
