"""Node process of test_vision_msgs_outputs: ``libredgetpu-ros bringup`` of the perception node running the
two-segment SSD on the scripted accelerator of ``test/perception/_scripted_ssd.py`` (no device here). The
only test seam: the node's processor's ``pipeline_config`` gets the scripted device object instead of a
device name.

    _scripted_ssd_node.py BRINGUP_YAML [--duration S]    (the YAML names the models, labels, namespace)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "perception"))


def main(argv: list[str]) -> int:
    from _scripted_ssd import scripted_ssd
    from libredgetpu_ros.cli.main import main as cli
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.ros.perception import processor as node_module  # where the pipeline is opened

    ssd = scripted_ssd(fixture)
    named_config = node_module.pipeline_config

    def scripted_config(params):
        config = named_config(params)
        config.device = ssd.device
        return config

    node_module.pipeline_config = scripted_config
    try:
        return cli(["bringup", *argv])
    finally:
        ssd.device.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
