"""The real tracker node with a fault injected under its ``~/set_color`` handler, for the service-guard test
(run as a script): ``SpotTracker.set_color`` raises ``RuntimeError`` (an exception type no handler refuses
by design) for a colour whose red weight is exactly ``POISON_RED``. Everything else is the unmodified node
(its ``main()``)."""

from __future__ import annotations

import sys

POISON_RED = 0.123


def main() -> int:
    from libredgetpu_ros.robotics.spot import SpotTracker
    from libredgetpu_ros.ros.robotics.tracker_node import main as node_main

    original = SpotTracker.set_color

    def faulty(self: SpotTracker, rgb: tuple[float, float, float]) -> object:
        if rgb[0] == POISON_RED:
            raise RuntimeError("injected fault under the set_color handler")
        return original(self, rgb)

    SpotTracker.set_color = faulty  # type: ignore[method-assign]
    return node_main(sys.argv)


if __name__ == "__main__":
    sys.exit(main())
