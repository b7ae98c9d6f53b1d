"""Node process of test_vision_msgs_outputs: the perception node (namespace ``cam``) running the two-segment
SSD on the scripted accelerator of ``test/perception/_scripted_ssd.py`` (no device here), configured and
activated. The only test seam: the node's ``pipeline_config`` gets the scripted device object instead of a
device name. Ends on SIGTERM / SIGINT, or after ``--lifetime`` seconds so a crashed test leaves no orphan.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "perception"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lifetime", type=float, default=90.0)
    args = parser.parse_args(argv)

    import rclpy
    from _scripted_ssd import scripted_ssd
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.ros.perception import node as node_module
    from libredgetpu_ros.ros.spinning import spin_with_companions
    from rclpy.executors import ExternalShutdownException
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    ssd = scripted_ssd(fixture)
    named_config = node_module.pipeline_config

    def scripted_config(params):
        config = named_config(params)
        config.device = ssd.device
        return config

    node_module.pipeline_config = scripted_config
    rclpy.init()
    node = node_module.PerceptionNode("ssd", namespace="cam", parameter_overrides=[
        Parameter("model", value=",".join(str(p) for p in ssd.models)),
        Parameter("backend", value="edgetpu"), Parameter("labels", value=str(ssd.labels)),
        Parameter("score_threshold", value=0.3), Parameter("diagnostics_period", value=0.5)])
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    print("scripted_ssd_node: active", flush=True)
    timer = threading.Timer(args.lifetime, rclpy.try_shutdown)
    timer.daemon = True
    timer.start()
    try:
        spin_with_companions(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.teardown()
        node.destroy_node()
        rclpy.try_shutdown()
        ssd.device.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
