"""A perception node in this process with one more node (a camera, a probe) on one executor, for the tests
that drive the node's callbacks themselves (``executor.spin_once``) instead of a node in its own process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def in_process_perception(ros_env: Any, name: str, model: Path | str, other: str,
                          **params: Any) -> Iterator[tuple[Any, Any, Any]]:
    """(a ``PerceptionNode`` named ``name`` running ``model`` on the CPU backend with ``params`` as parameter
    overrides, a plain node named ``other``, a ``SingleThreadedExecutor`` with both). On exit the executor is
    shut down, the perception node torn down and both nodes destroyed."""
    from libredgetpu_ros.ros.perception_node import PerceptionNode
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    context = ros_env.init_rclpy()
    overrides = {"model": str(model), "backend": "cpu", **params}
    node = PerceptionNode(name, context=context, parameter_overrides=[
        Parameter(key, value=value) for key, value in overrides.items()])
    companion = Node(other, context=context)
    executor = SingleThreadedExecutor(context=context)
    for n in (node, companion):
        executor.add_node(n)
    try:
        yield node, companion, executor
    finally:
        executor.shutdown()
        node.teardown()
        companion.destroy_node()
        node.destroy_node()
