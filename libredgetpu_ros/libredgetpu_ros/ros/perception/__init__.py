"""The perception lifecycle node, one concern per module: ``params`` (parameter table, QoS, pipeline
config), ``intake`` (frame arrival, skipped and lost frames), ``report`` (diagnostics and ``~/timing``),
``node`` (lifecycle and data path). The entry point is ``libredgetpu_ros.ros.perception_node:main``."""

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
