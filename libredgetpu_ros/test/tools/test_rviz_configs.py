"""The shipped rviz2 configs: valid YAML, every display on a topic its node publishes with a matching type,
the frame the results carry; and `rviz:=true` starting rviz2 with the config (and `rviz_fixed_frame`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

PKG = Path(__file__).resolve().parents[2]
RVIZ_DIR = PKG / "rviz"
NODES = PKG / "libredgetpu_ros" / "ros"
DISPLAY_OF = {"MarkerArray": "rviz_default_plugins/MarkerArray", "Marker": "rviz_default_plugins/Marker",
              "Image": "rviz_default_plugins/Image"}
# Launch files whose node publishes nothing rviz draws (commands, weights, SPU vectors, metrics,
# classifications): no config, by design (docs/install.md).
NOT_SPATIAL = {"control", "spu", "trainer", "reservoir", "recognition"}


def displays(config: dict) -> list[dict]:
    return config["Visualization Manager"]["Displays"]


def node_outputs(launch: str) -> dict[str, set[str]]:
    """'/topic' -> message type names the node of ``launch`` publishes, from the tables the node and
    process-bag share (the perception node's per task, the flow / tracker / looming nodes' output tables)."""
    from libredgetpu_ros.ros import conversions
    from libredgetpu_ros.ros.flow.messages import FLOW_OUTPUTS
    from libredgetpu_ros.ros.robotics.messages import LOOMING_OUTPUTS, TRACKER_OUTPUTS

    tables = {"flow": FLOW_OUTPUTS, "tracker": TRACKER_OUTPUTS, "looming": LOOMING_OUTPUTS}
    published: dict[str, set[str]] = {}
    if launch == "perception":
        for task in ("pose", "detect", "classify", "segment"):
            for name, mtype in conversions.output_topics(task):
                published.setdefault("/" + name, set()).add(mtype.__name__)
    for name, mtype in tables.get(launch, {}).items():
        published.setdefault("/" + name, set()).add(mtype.__name__)
    return published


def test_every_launch_file_with_visual_output_has_a_config() -> None:
    launches = {p.name.removesuffix(".launch.py") for p in (PKG / "launch").glob("*.launch.py")}
    configs = {p.stem for p in RVIZ_DIR.glob("*.rviz")}
    assert configs <= launches, f"configs without a launch file: {configs - launches}"
    assert launches - NOT_SPATIAL <= configs, f"launch files without an rviz config: {launches - configs}"
    for name in NOT_SPATIAL & launches:  # an rviz:=true that could show nothing would only mislead
        text = (PKG / "launch" / f"{name}.launch.py").read_text()
        assert "rviz(" not in text and "rviz_config=" not in text, name  # launching.rviz / lifecycle_launch


@pytest.mark.parametrize("path", sorted(RVIZ_DIR.glob("*.rviz")), ids=lambda p: p.name)
def test_config_matches_its_node(path: Path) -> None:
    from libredgetpu_ros.bags.make import MakeBagOptions
    from libredgetpu_ros.ros.demo import CAMERA_FRAME

    config = yaml.safe_load(path.read_text())
    fixed = config["Visualization Manager"]["Global Options"]["Fixed Frame"]
    assert fixed == CAMERA_FRAME == MakeBagOptions().frame_id  # demo, bags and rviz agree
    published = node_outputs(path.stem)
    subscribing = [d for d in displays(config) if "Topic" in d]
    assert subscribing
    for display in subscribing:
        topic = display["Topic"]
        assert topic["Value"] in published, f"{path.name}: {topic['Value']} not published by {path.stem}"
        assert display["Class"] in {DISPLAY_OF.get(t) for t in published[topic["Value"]]}, display["Name"]
        assert topic["Reliability Policy"] == "Reliable"  # what the nodes offer for results


def test_rviz_argument_starts_rviz2_with_the_config_and_frame(tmp_path: Path, monkeypatch) -> None:
    from launch import LaunchContext
    from launch.actions import ExecuteProcess, LogInfo
    from libredgetpu_ros.ros.launching import rviz

    context = LaunchContext()
    context.launch_configurations.update({"rviz": "true", "rviz_fixed_frame": "front_camera_optical"})
    monkeypatch.setenv("PATH", str(tmp_path))
    [message] = rviz("perception").execute(context)
    assert isinstance(message, LogInfo)  # no rviz2 on PATH: said, the launch goes on
    fake = tmp_path / "rviz2"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    [process] = rviz("perception").execute(context)
    assert isinstance(process, ExecuteProcess)
    cmd = [c[0].text if hasattr(c[0], "text") else str(c) for c in process.cmd]
    assert cmd[0] == str(fake) and cmd[1] == "-d" and cmd[2].endswith("rviz/perception.rviz")
    assert cmd[3:] == ["-f", "front_camera_optical"]
    context.launch_configurations["rviz"] = "false"
    assert rviz("perception").execute(context) == []
