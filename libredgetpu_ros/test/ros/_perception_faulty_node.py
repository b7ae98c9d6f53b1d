"""The real perception node with two injected faults, for the crash-handling test (run as a script).

Unexpected faults of the node (not of a frame's data) in the camera path, which must take the node through
``on_error``:

- ``PerceptionPipeline.process`` raises ``RuntimeError`` for a frame ``POISON_WIDTH`` pixels wide (in frame
  processing: before the fix counted per frame while the node stayed 'active');
- ``Intake.arrived`` raises ``RuntimeError`` for a frame ``INTAKE_POISON_WIDTH`` wide (outside processing, so
  it escapes the camera callback: before the fix it ended the camera thread for good).

Everything else is the unmodified node (its ``main()``).
"""

from __future__ import annotations

import sys

import numpy as np

POISON_WIDTH = 13
INTAKE_POISON_WIDTH = 14


def main() -> int:
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline
    from libredgetpu_ros.ros.camera.intake import Intake
    from libredgetpu_ros.ros.perception_node import main as node_main

    original, original_arrived = PerceptionPipeline.prepare, Intake.arrived  # the frame's first stage

    def faulty(self: PerceptionPipeline, rgb: np.ndarray, *args: object, **kwargs: object) -> object:
        if rgb.shape[1] == POISON_WIDTH:
            raise RuntimeError("injected fault in the camera path")
        return original(self, rgb, *args, **kwargs)

    def faulty_arrived(self: Intake, msg: object, info: object) -> object:
        if getattr(msg, "width", 0) == INTAKE_POISON_WIDTH:
            raise RuntimeError("injected fault in the frame intake")
        return original_arrived(self, msg, info)

    PerceptionPipeline.prepare = faulty  # type: ignore[method-assign]
    Intake.arrived = faulty_arrived  # type: ignore[method-assign]
    return node_main(sys.argv)


if __name__ == "__main__":
    sys.exit(main())
