"""Lifecycle callbacks the package's nodes share.

Every node releases what ``on_configure`` made in one idempotent ``teardown()``; cleanup and shutdown both
end there. A node lists this mixin before ``LifecycleNode`` so these definitions win.
"""

from __future__ import annotations

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


__all__ = ["TeardownOnCleanup"]
