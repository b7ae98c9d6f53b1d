"""Entry point of the perception lifecycle node (console script ``perception_node``); the node itself is in
``ros/perception/`` (see its ``node.py`` for the lifecycle and threads).

Run it with ``python -m libredgetpu_ros.ros.perception_node --ros-args --params-file F``. The names below are
re-exported for ``bringup.py``, ``process-bag``, the benches and tests that import them from here.
"""

from __future__ import annotations

import sys

from libredgetpu_ros.ros.perception import (
    LABEL_QOS,
    PARAMS,
    RESULT_QOS,
    TASKS,
    PerceptionNode,
    PerceptionParams,
    pipeline_config,
)
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main

__all__ = ["LABEL_QOS", "PARAMS", "RESULT_QOS", "TASKS", "PerceptionNode", "PerceptionParams", "main",
           "pipeline_config"]


def main(args: list[str] | None = None) -> int:
    """ROS's discovery and transport as the environment gives them (docs/install.md); large allocations
    retained (every frame passes through ~1 MB buffers, see ros/memory.py); Ctrl-C / SIGTERM tear down,
    exit 0."""
    return run_lifecycle_node_main(PerceptionNode, args, retain_allocations=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
