"""Looming (collision warning) lifecycle node: camera images in; zone densities, tau and time to contact out.

A :class:`~libredgetpu_ros.ros.camera.CameraNode` whose processor
(``robotics/processors.LoomingProcessor``, what ``process-bag`` runs too) is a ``LoomingDetector``:

- ``looming`` (libredgetpu_ros_interfaces/Looming: zones, tau, ttc; no standard message carries them),
  ``markers`` (a cube per zone, height and colour by density; on the camera's image plane once its
  CameraInfo arrives: ``camera/image_plane.py``), ``annotated`` (grid, tau, TTC; off by default), all
  stamped with the frame's header;
- the time to contact integrates over the frames' header stamps, never the wall clock, so a bag replayed
  into the node gives what processing the bag offline gives; stamps going backwards (a looped bag) restart
  the history;
- diagnostics WARN while tau is above ``warn_tau``.
"""

from __future__ import annotations

import sys

from libredgetpu_ros.ros.camera import CameraNode
from libredgetpu_ros.ros.camera.image_plane import ImagePlaneInput
from libredgetpu_ros.ros.robotics.params import LOOMING_PARAMS
from libredgetpu_ros.ros.robotics.processors import LoomingProcessor
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main


class LoomingNode(ImagePlaneInput, CameraNode):
    """Looming detection on the newest camera frame (``LoomingProcessor``); see the module docstring."""

    PARAMS = LOOMING_PARAMS
    PROCESSOR = LoomingProcessor
    DIAGNOSTICS_NAME = "looming"


def main(args: list[str] | None = None) -> int:
    return run_lifecycle_node_main(LoomingNode, args, retain_allocations=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
