"""The perception lifecycle node: ``params`` (its parameter table merged with the camera base's image
parameters, label QoS, pipeline config) and ``node`` (the pipeline as a ``ros/camera/`` camera node: intake,
QoS, diagnostics and ``~/timing`` live there).
The entry point is ``libredgetpu_ros.ros.perception_node:main``."""

from libredgetpu_ros.ros.perception.node import PerceptionNode
from libredgetpu_ros.ros.perception.params import (
    LABEL_QOS,
    PARAMS,
    RESULT_QOS,
    TASKS,
    PerceptionParams,
    pipeline_config,
)

__all__ = ["LABEL_QOS", "PARAMS", "RESULT_QOS", "TASKS", "PerceptionNode", "PerceptionParams",
           "pipeline_config"]
