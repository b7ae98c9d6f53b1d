"""process-bag names its output topics without a node: ``bag_processing.NodeConfig.resolve`` expands and
remaps names itself. It must give what rcl gives the live node (``Node.resolve_topic_name`` with the same
namespace, name and ``-r`` remappings), or a processed bag's topics would not be the live node's and
compare-bags / rviz configs would miss them."""

from __future__ import annotations

import pytest
from libredgetpu_ros.ros.bag_processing import NodeConfig

CASES = [  # (namespace, node name, remappings in order, topic)
    ("", "perception", (), "image_raw"),
    ("/robot1", "perception", (), "image_raw"),
    ("/robot1", "perception", (), "~/timing"),
    ("/a/b", "tracker", (), "offset"),
    ("/robot1", "perception", (), "/camera/image_raw"),
    ("/robot1", "perception", (("image_raw", "/front/image_raw"),), "image_raw"),
    ("/robot1", "perception", (("/robot1/image_raw", "front/image"),), "image_raw"),
    ("/robot1", "perception", (("image_raw", "first"), ("image_raw", "second")), "image_raw"),
    ("/robot1", "perception", (("detections", "/out/detections"),), "detections"),
    ("/robot1", "perception", (("other", "/x"),), "detections"),
    ("", "flow", (("~/heading", "heading"),), "~/heading"),
    ("/r", "looming", (("/r/looming/markers", "/viz/markers"),), "~/markers"),
]


@pytest.mark.ros
@pytest.mark.parametrize(("namespace", "name", "remappings", "topic"), CASES)
def test_offline_names_are_the_live_nodes(ros_env, namespace, name, remappings, topic) -> None:
    import rclpy

    context = ros_env.init_rclpy()
    args = ["--ros-args"] + [item for src, dst in remappings for item in ("-r", f"{src}:={dst}")]
    node = rclpy.create_node(name, namespace=namespace or None, context=context, cli_args=args,
                             enable_rosout=False, start_parameter_services=False)
    try:
        live = node.resolve_topic_name(topic)
    finally:
        node.destroy_node()
    offline = NodeConfig(params=None, namespace=namespace, name=name, node_type="perception",
                         remappings=remappings).resolve(topic)
    assert offline == live
