"""Entry point of the flow lifecycle node (console script ``flow_node``); the node itself is in ``ros/flow/``.

Run it with ``python -m libredgetpu_ros.ros.flow_node --ros-args --params-file F``.
"""

from __future__ import annotations

import sys

from libredgetpu_ros.ros.flow import PARAMS, FlowNode, FlowParams
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main

__all__ = ["PARAMS", "FlowNode", "FlowParams", "main"]


def main(args: list[str] | None = None) -> int:
    """Large allocations retained (ros/memory.py); Ctrl-C / SIGTERM tear down, exit 0."""
    return run_lifecycle_node_main(FlowNode, args, retain_allocations=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
