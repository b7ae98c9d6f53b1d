"""The shipped rviz2 configs: valid YAML, every display on a topic a node publishes, the right frame."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

RVIZ_DIR = Path(__file__).resolve().parents[2] / "rviz"


def displays(config: dict) -> list[dict]:
    return config["Visualization Manager"]["Displays"]


def topics_of(config: dict) -> dict[str, str]:
    """display class -> topic name, for displays that subscribe."""
    return {d["Topic"]["Value"]: d["Class"] for d in displays(config) if "Topic" in d}


def test_every_launch_file_with_visual_output_has_a_config() -> None:
    assert (RVIZ_DIR / "perception.rviz").is_file()


@pytest.mark.parametrize("path", sorted(RVIZ_DIR.glob("*.rviz")), ids=lambda p: p.name)
def test_config_is_well_formed(path: Path) -> None:
    config = yaml.safe_load(path.read_text())
    manager = config["Visualization Manager"]
    assert manager["Global Options"]["Fixed Frame"]
    for display in displays(config):
        assert display["Class"].startswith(("rviz_default_plugins/", "rviz_common/"))
        if "Topic" in display:
            topic = display["Topic"]
            assert topic["Value"].startswith("/")
            # Our result publishers are reliable: a best-effort display would still match, a reliable one too;
            # keep the profile rviz shows equal to what the node offers.
            assert topic["Reliability Policy"] == "Reliable"


def test_perception_config_matches_the_node_outputs() -> None:
    from libredgetpu_ros.bags.make import MakeBagOptions
    from libredgetpu_ros.ros import conversions
    from libredgetpu_ros.ros.demo import CAMERA_FRAME

    config = yaml.safe_load((RVIZ_DIR / "perception.rviz").read_text())
    published: dict[str, set[str]] = {}
    for task in ("pose", "detect", "classify", "segment"):
        for name, mtype in conversions.output_topics(task):
            published.setdefault("/" + name, set()).add(mtype.__name__)
    expected_class = {"MarkerArray": "rviz_default_plugins/MarkerArray",
                      "Image": "rviz_default_plugins/Image"}
    for topic, display_class in topics_of(config).items():
        assert topic in published, f"{topic} is not a perception output"
        assert display_class in {expected_class.get(t) for t in published[topic]}
    fixed = config["Visualization Manager"]["Global Options"]["Fixed Frame"]
    assert fixed == CAMERA_FRAME == MakeBagOptions().frame_id  # demo, bags, rviz agree
