"""Entry point of the adaptive control node (``ros2 run libredgetpu_ros control_node``,
``python -m libredgetpu_ros.ros.control_node``). The node lives in ``ros/control/``: ``node.py`` (lifecycle,
state loop, services, diagnostics), ``params.py`` (the parameter table), ``controller.py`` (the engine side),
``codec.py`` and ``stats.py``."""

from __future__ import annotations

import sys

from libredgetpu_ros.ros.control.node import NODE_NAME, ControlNode, main

__all__ = ["NODE_NAME", "ControlNode", "main"]

if __name__ == "__main__":
    sys.exit(main())
