"""One processor per camera node type: the live node (its ``PROCESSOR``) and ``process-bag`` (the registry in
``ros/bag_nodes.py``) run the same class, opened from the same parameter table, so offline results cannot
drift from live ones by a second implementation. (That the two give equal messages for the same frames is
shown per node type over DDS: test_process_bag_robotics, test_bag_replay_live, test_flow_bag_replay,
test_recognition_node.)"""

from __future__ import annotations

import pytest
from libredgetpu_ros.errors import ConfigError

CAMERA_NODE_TYPES = ["perception", "tracker", "looming", "flow", "recognition"]


def test_every_camera_node_type_is_in_the_registry() -> None:
    from libredgetpu_ros.ros.bag_nodes import OFFLINE_NODES
    from libredgetpu_ros.ros.bringup import NODE_TYPES, node_class
    from libredgetpu_ros.ros.camera import CameraNode

    camera_types = [kind for kind in NODE_TYPES if issubclass(node_class(kind), CameraNode)]
    assert camera_types == list(OFFLINE_NODES) == CAMERA_NODE_TYPES


@pytest.mark.parametrize("node_type", CAMERA_NODE_TYPES)
def test_the_live_node_and_process_bag_run_one_processor_class(node_type: str) -> None:
    from libredgetpu_ros.ros.bag_nodes import param_table, processor_class
    from libredgetpu_ros.ros.bringup import node_class
    from libredgetpu_ros.ros.camera.processor import CameraProcessor

    node = node_class(node_type)
    assert node.PROCESSOR is processor_class(node_type)
    assert issubclass(node.PROCESSOR, CameraProcessor)
    assert node.PARAMS is param_table(node_type)


def test_an_unknown_node_type_is_a_config_error_naming_the_types() -> None:
    from libredgetpu_ros.ros.bag_nodes import OFFLINE_NODES, open_offline, processor_class

    with pytest.raises(ConfigError, match="process-bag runs perception, tracker"):
        processor_class("control")
    with pytest.raises(ConfigError, match=", ".join(OFFLINE_NODES)):
        open_offline("reservoir", None)


@pytest.mark.parametrize(("node_type", "template", "extra"), [
    ("tracker", "color_red_64x64", {"module": "spot"}),
    ("tracker", "pattern_64x64_16x16_1ch", {"module": "pattern"}),
    ("looming", "looming_64x64_3x3", {}),
])
def test_cpu_threads_reach_litert(node_type: str, template: str, extra: dict) -> None:
    """The tracker and looming nodes' ``cpu_threads`` is the thread count of the template's CPU twin (it was
    declared, documented and then never passed on)."""
    from libredgetpu_ros.ros.bag_nodes import param_table, processor_class

    table = param_table(node_type)
    params = table.values_type(**{**table.defaults(), "backend": "cpu", "cpu_threads": 2,
                                  "template": template, **extra})
    processor = processor_class(node_type)(params)
    try:
        assert processor.module.runner.backend.describe()["num_threads"] == 2
    finally:
        processor.close()
