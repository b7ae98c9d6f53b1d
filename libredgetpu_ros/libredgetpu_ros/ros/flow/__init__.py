"""The flow lifecycle node: optical flow, yaw rate and heading from a camera (see node.py); its entry point is
``ros/flow_node.py``."""

from libredgetpu_ros.ros.flow.node import FlowNode
from libredgetpu_ros.ros.flow.params import PARAMS, FlowParams

__all__ = ["PARAMS", "FlowNode", "FlowParams"]
