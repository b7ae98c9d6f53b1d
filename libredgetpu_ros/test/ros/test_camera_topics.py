"""``image_topics`` in a bringup entry: one camera node per topic, each in its own namespace with its own
parameters (ros/camera_topics.py through bringup.load_config); refused entries name the file and the item."""

from __future__ import annotations

import pytest
from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.ros.bringup import load_config
from libredgetpu_ros.ros.camera_topics import REMAP_LEADS, is_remap_name, is_ros_name


def _load(tmp_path, text: str):
    path = tmp_path / "cameras.yaml"
    path.write_text(text)
    return load_config(path)


def test_each_topic_becomes_a_node_in_its_own_namespace(tmp_path) -> None:
    specs = _load(tmp_path, """
nodes:
  - type: perception
    name: perception
    namespace: robot
    image_topics:
      - /front/image_raw
      - {topic: /rear/image_raw, image_reliability: best_effort}
      - {topic: /arm/wrist/color/image_raw, namespace: wrist, transport: compressed}
      - {topic: /arm/base/image_raw, namespace: /base}
      - top/image_raw
    parameters: {model: m_edgetpu.tflite, backend: auto}
""")
    # the topic's own namespace; an item's relative namespace (and a relative topic) under the entry's
    assert [(s.type, s.name, s.namespace) for s in specs] == [
        ("perception", "perception", "/front"), ("perception", "perception", "/rear"),
        ("perception", "perception", "/robot/wrist"), ("perception", "perception", "/base"),
        ("perception", "perception", "/robot/top")]
    assert [s.parameters["input_topic"] for s in specs] == [
        "/front/image_raw", "/rear/image_raw", "/arm/wrist/color/image_raw", "/arm/base/image_raw",
        "/robot/top/image_raw"]
    assert specs[1].parameters == {"model": "m_edgetpu.tflite", "backend": "auto",
                                   "image_reliability": "best_effort", "input_topic": "/rear/image_raw"}
    assert "image_reliability" not in specs[0].parameters and specs[2].parameters["transport"] == "compressed"


@pytest.mark.parametrize(("entry", "message"), [
    ("type: control\n    image_topics: [/a/image_raw]", "applies to camera nodes"),
    ("type: perception\n    image_topics: []", "non-empty list"),
    ("type: perception\n    image_topics: [/a/image_raw, /a/image_raw]", "would both publish under /a"),
    ("type: perception\n    image_topics: [image_raw]", "needs a namespace of its own"),
    ("type: perception\n    image_topics: ['/a/image raw']", "is not a ROS topic name"),
    ("type: perception\n    image_topics: [{topic: /a/x, input_topic: /b}]", "not input_topic"),
    ("type: perception\n    image_topics: [/a/x]\n    parameters: {input_topic: /b}",
     "leave input_topic out"),
])
def test_bad_entries_are_refused_naming_the_item(tmp_path, entry: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        _load(tmp_path, f"nodes:\n  - {entry}\n")
    assert "nodes[0]" in str(caught.value)


def test_the_shipped_cameras_bringup_starts_one_node_per_camera() -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "config" / "cameras.yaml"
    specs = load_config(path)
    assert [s.namespace for s in specs] == ["/front", "/rear", "/wrist"]
    assert {s.parameters["backend"] for s in specs} == {"auto"}
    assert specs[2].parameters["transport"] == "compressed"


@pytest.mark.parametrize(("text", "topic", "remap", "namespace"), [
    ("front/image_raw", True, True, True), ("/front/image_raw", True, True, False),
    ("_private/x", True, True, False), ("~/cmd", False, True, False), ("~cmd", False, False, False),
    ("a//b", False, False, False), ("a/", False, False, False), ("", False, False, False),
    ("9lives", False, False, False), ("a/9", False, False, False), ("a-b", False, False, False),
    ("front\n", False, False, False), ("~", False, False, False), (7, False, False, False),
])
def test_one_ros_name_grammar_for_topics_remappings_and_stream_namespaces(text, topic, remap,
                                                                           namespace) -> None:
    """The grammar bringup's remappings, image_topics' topics and their namespaces share (one token rule;
    a trailing newline, which the old `^...$` patterns let through, is no name)."""
    assert is_ros_name(text) == topic
    assert is_ros_name(text, REMAP_LEADS) == remap
    assert is_ros_name(text, ("",), letter_first=True) == namespace


# Names for bringup remappings, each compared with rcl's own verdict: the "~" forms (rcl's lexer knows only
# "~/"), "__" anywhere (rcl reads it as __node / __ns), and the token rules.
REMAP_CASES = [
    "front/image_raw", "/front/image_raw", "_private/x", "~/cmd", "~/a/b", "~cmd", "~", "~/", "~//a", "a/~",
    "a/~/b", "/~/a", "~~/a", "a//b", "a/", "", "9lives", "a/9", "_9", "a-b", "front\n", "_", "a_", "_a_/_b",
    "__node", "__ns", "__name", "__x", "a__b", "x/__y", "~/__a", "~__a", "a___b", "/", "a b", "*", "**",
]


@pytest.mark.ros
def test_remap_names_get_rcls_verdict(ros_env) -> None:
    """bringup's remapping check says what rcl says: a node given ``-r NAME:=dst`` and ``-r src:=NAME`` is
    created (rcl parsed both rules) exactly when ``is_remap_name`` accepts NAME. Before, ``~cmd`` and ``a__b``
    passed the check and failed the node's creation (RCLInvalidROSArgsError out of bringup)."""
    import rclpy
    from rclpy.impl.implementation_singleton import rclpy_implementation

    context = ros_env.init_rclpy()

    def rcl_takes(rule: str) -> bool:
        try:
            node = rclpy.create_node("remap_probe", context=context, cli_args=["--ros-args", "-r", rule],
                                     enable_rosout=False, start_parameter_services=False)
        except rclpy_implementation.RCLInvalidROSArgsError:  # rcl_parse_arguments refused the rule
            return False
        node.destroy_node()
        return True

    verdicts = {name: (is_remap_name(name), rcl_takes(f"{name}:=dst") and rcl_takes(f"src:={name}"))
                for name in REMAP_CASES}
    assert {n: v for n, v in verdicts.items() if v[0] != v[1]} == {}
    assert sum(ours for ours, _ in verdicts.values()) >= 8  # the comparison covers accepted names too


@pytest.mark.parametrize("name", ["~cmd", "a__b", "~/__x"])
def test_bringup_refuses_remappings_rcl_refuses(tmp_path, name: str) -> None:
    with pytest.raises(ConfigError, match=rf"remapping .*{name!r} is not a ROS name rcl remaps"):
        _load(tmp_path, f"nodes:\n  - type: perception\n    remappings:\n      {name}: /front/image_raw\n")
