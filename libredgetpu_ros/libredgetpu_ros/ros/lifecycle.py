"""Lifecycle callbacks the package's nodes share.

Every node releases what ``on_configure`` made in one idempotent ``teardown()``; cleanup and shutdown both
end there. A node that takes states (control, reservoir) also runs its state subscription on a companion
node (:class:`StateLoopNode`). A node lists these mixins before ``LifecycleNode`` so their definitions win.
"""

from __future__ import annotations

from typing import Any

from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn


class TeardownOnCleanup:
    """``on_cleanup`` and ``on_shutdown`` call the node's ``teardown()`` and succeed."""

    def teardown(self) -> None:  # each node defines its own
        raise NotImplementedError

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.teardown()
        return TransitionCallbackReturn.SUCCESS


class StateLoopNode:
    """The state subscription on its own node, ``<name>_loop``, which the host process spins on its own
    executor (``companion_nodes``, ros/spinning.py): a state never queues behind a service call, a parameter
    request or a timer. The loop node has no parameters, no global arguments (the state topic is resolved by
    this node, its remaps included) and no rosout.

    The node calls :meth:`start_state_loop` in ``__init__`` and :meth:`subscribe_state` in ``on_activate``;
    deactivate drops the subscription. It has ``_crash`` (a ``spinning.CompanionFault``: a crash of the loop
    thread) and ``teardown()``: after a crash, deactivate returns ERROR and ``on_error`` tears the node down
    so it ends ``unconfigured`` and can be configured again (the loop's executor thread keeps running)."""

    _crash: Any

    def start_state_loop(self) -> None:
        from rclpy.node import Node

        self.loop_node = Node(f"{self.get_name()}_loop", namespace=self.get_namespace(), context=self.context,
                              use_global_arguments=False, enable_rosout=False, start_parameter_services=False)
        self._sub: Any = None

    def subscribe_state(self, msg_type: type, topic: str, callback: Any, qos: Any, **options: Any) -> Any:
        """Subscribe the loop node to ``topic`` (resolved by this node); logged, returned."""
        topic = self.resolve_topic_name(topic)
        self._sub = self.loop_node.create_subscription(msg_type, topic, callback, qos, **options)
        self.get_logger().info(f"active: subscribed to {self._sub.topic_name}")
        return self._sub

    def _drop_subscription(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            self.loop_node.destroy_subscription(sub)

    def companion_nodes(self) -> list[Any]:
        """Nodes a host process must spin besides this one, each on its own executor (``ros/spinning.py``):
        the state loop."""
        return [self.loop_node]

    def destroy_node(self) -> None:
        self.loop_node.destroy_node()
        super().destroy_node()  # type: ignore[misc]

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._drop_subscription()
        if self._crash.cause is not None:
            return TransitionCallbackReturn.ERROR  # -> ErrorProcessing -> on_error
        return super().on_deactivate(state)  # type: ignore[misc]

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.get_logger().error(f"error processing (from {state.label}): closing the engine; configure to "
                                "start again")
        self.teardown()
        self._crash.clear()
        return TransitionCallbackReturn.SUCCESS


__all__ = ["StateLoopNode", "TeardownOnCleanup"]
