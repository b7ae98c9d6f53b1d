"""Entry point of the perception lifecycle node (console script ``perception_node``); the node itself is in
``ros/perception/`` (see its ``node.py`` for the lifecycle and threads).

Run it with ``python -m libredgetpu_ros.ros.perception_node --ros-args --params-file F``. The names below are
re-exported for ``bringup.py``, ``process-bag``, the benches and tests that import them from here.
"""

from __future__ import annotations

import sys

import rclpy
from rclpy.executors import ExternalShutdownException

from libredgetpu_ros.ros.perception import (
    LABEL_QOS,
    PARAMS,
    RESULT_QOS,
    TASKS,
    PerceptionNode,
    PerceptionParams,
    pipeline_config,
)
from libredgetpu_ros.ros.spinning import spin_with_companions

__all__ = ["LABEL_QOS", "PARAMS", "RESULT_QOS", "TASKS", "PerceptionNode", "PerceptionParams", "main",
           "pipeline_config"]


def main(args: list[str] | None = None) -> int:
    from libredgetpu_ros.ros.environment import apply_localhost_only
    from libredgetpu_ros.ros.memory import retain_large_allocations

    # Fills in only what is unset (as the control node does): the shipped DDS profile (16 MiB shared-memory
    # segment, docs/perception_node.md "Large frames") unless the integrator named one.
    apply_localhost_only()
    # Before rclpy (its threads then allocate under the same rules): every frame passes through ~1 MB
    # buffers (see ros/memory.py for what was measured).
    retain_large_allocations()
    rclpy.init(args=args)
    node = PerceptionNode()
    try:
        spin_with_companions(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node.context.ok() and node.state_label() in ("inactive", "active", "unconfigured"):
            node.trigger_shutdown()
        else:
            # Ctrl-C / SIGTERM: rclpy has shut the context down (and started its own shutdown transition), so
            # no transition can complete; stop the camera path and release the device directly (idempotent).
            node.teardown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
