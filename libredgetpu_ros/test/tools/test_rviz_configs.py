"""The shipped rviz2 configs: valid YAML, every display on a topic its node publishes with a matching type
(named relative to the node), the frame the results carry; `rviz:=true` starting rviz2 with a copy of the
config whose topics are under the launch's namespace (and `rviz_fixed_frame`); and a real `ros2 launch ...
rviz:=true namespace:=cam1` handing a fake rviz2 (a script that records its config) topics under /cam1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from libredgetpu_ros.ros.rviz_config import topic_displays

PKG = Path(__file__).resolve().parents[2]
RVIZ_DIR = PKG / "rviz"
NODES = PKG / "libredgetpu_ros" / "ros"
DISPLAY_OF = {"MarkerArray": "rviz_default_plugins/MarkerArray", "Marker": "rviz_default_plugins/Marker",
              "Image": "rviz_default_plugins/Image"}
# Displays of the node's camera input (remapped by the launch like the node's subscription): the Camera
# display draws the markers over the image.
INPUT_DISPLAYS = {"image_raw": {"rviz_default_plugins/Camera", "rviz_default_plugins/Image"}}
# Launch files whose node publishes nothing rviz draws (commands, weights, SPU vectors, metrics,
# classifications; cameras: one node per camera namespace, whose own launch files have configs): no config,
# by design (docs/install.md).
NOT_SPATIAL = {"control", "spu", "trainer", "reservoir", "recognition", "cameras"}


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
    subscribing = list(topic_displays(config))
    assert subscribing and len(subscribing) == len([d for d in displays(config) if "Topic" in d])
    for display in subscribing:
        topic = display["Topic"]
        # relative to the node, so that the launch can put it under its namespace
        assert not topic["Value"].startswith(("/", "~")), f"{path.name}: {topic['Value']} is not relative"
        if topic["Value"] in INPUT_DISPLAYS:
            assert display["Class"] in INPUT_DISPLAYS[topic["Value"]], display["Name"]
            continue
        name = "/" + topic["Value"]
        assert name in published, f"{path.name}: {name} not published by {path.stem}"
        assert display["Class"] in {DISPLAY_OF.get(t) for t in published[name]}, display["Name"]
        assert topic["Reliability Policy"] == "Reliable"  # what the nodes offer for results


def test_rviz_argument_starts_rviz2_with_the_config_and_frame(tmp_path: Path, monkeypatch) -> None:
    from launch import LaunchContext
    from launch.actions import ExecuteProcess, LogInfo
    from libredgetpu_ros.ros import launching
    from libredgetpu_ros.ros.launching import rviz

    monkeypatch.setattr(launching, "get_package_share_directory", lambda package: str(PKG))  # this checkout's
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
    assert cmd[0] == str(fake) and cmd[1] == "-d" and Path(cmd[2]).name == "perception.rviz"
    assert cmd[3:] == ["-f", "front_camera_optical"]
    topics = [d["Topic"]["Value"] for d in topic_displays(yaml.safe_load(Path(cmd[2]).read_text()))]
    assert topics == ["/markers", "/annotated", "/segmentation_overlay", "/image_raw"]  # no namespace: root
    context.launch_configurations["rviz"] = "false"
    assert rviz("perception").execute(context) == []


@pytest.mark.parametrize("path", sorted(RVIZ_DIR.glob("*.rviz")), ids=lambda p: p.name)
@pytest.mark.parametrize("namespace", ["cam1", "/robot/front_camera/"])
def test_rviz_argument_puts_every_topic_under_the_namespace(path: Path, namespace: str, tmp_path: Path,
                                                            monkeypatch) -> None:
    from launch import LaunchContext
    from libredgetpu_ros.ros.launching import rviz

    fake = tmp_path / "rviz2"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    from libredgetpu_ros.ros import launching

    monkeypatch.setattr(launching, "get_package_share_directory", lambda package: str(PKG))  # this checkout's
    context = LaunchContext()
    context.launch_configurations.update({"rviz": "true", "namespace": namespace})
    [process] = rviz(path.stem).execute(context)
    cmd = [c[0].text if hasattr(c[0], "text") else str(c) for c in process.cmd]
    given = yaml.safe_load(Path(cmd[2]).read_text())
    shipped = yaml.safe_load(path.read_text())
    prefix = "/" + namespace.strip("/") + "/"
    assert [d["Topic"]["Value"] for d in topic_displays(given)] == \
        [prefix + d["Topic"]["Value"] for d in topic_displays(shipped)]
    # the rest of the config is the shipped one
    for display in topic_displays(given):
        display["Topic"]["Value"] = display["Topic"]["Value"].removeprefix(prefix)
    assert given == shipped


def test_resolve_rules() -> None:
    from libredgetpu_ros.errors import ConfigError
    from libredgetpu_ros.ros.rviz_config import resolve

    assert resolve("markers", "") == "/markers"
    assert resolve("markers", "/a//b/") == "/a/b/markers"
    assert resolve("/tf", "cam1") == "/tf"  # an absolute topic stays the user's choice
    from libredgetpu_ros.ros.rviz_config import namespaced

    config = {"Visualization Manager": {"Displays": [
        {"Topic": {"Value": "image_raw"}}, {"Displays": [{"Topic": {"Value": "markers"}}]}]}}
    out = namespaced(config, "cam1", {"image_raw": "/usb_cam/image_raw"})
    assert [d["Topic"]["Value"] for d in topic_displays(out)] == ["/usb_cam/image_raw", "/cam1/markers"]
    relative = namespaced(config, "cam1", {"image_raw": "camera/image"})  # a relative remap: under /cam1
    assert [d["Topic"]["Value"] for d in topic_displays(relative)] == ["/cam1/camera/image", "/cam1/markers"]
    with pytest.raises(ConfigError, match="private"):
        resolve("~/markers", "cam1")


FAKE_RVIZ2 = """#!/bin/sh
# records the config it was started with, then stays up like rviz2 until signalled
while [ $# -gt 0 ]; do
    if [ "$1" = "-d" ]; then cp "$2" "{record}.tmp" && mv "{record}.tmp" "{record}"; fi
    shift
done
trap 'exit 0' INT TERM
while :; do sleep 0.2; done
"""


@pytest.mark.ros
@pytest.mark.timeout(120)
def test_ros2_launch_rviz_namespace_hands_rviz2_topics_under_it(ros_env, tmp_path: Path) -> None:
    """`ros2 launch perception.launch.py rviz:=true namespace:=cam1 image:=/cam1/color/image_raw` (this
    checkout's launch file, run by path): the config a fake rviz2 receives has every display's topic under
    /cam1, the Camera display on the camera topic the node reads."""
    record = tmp_path / "rviz_config_seen.rviz"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "rviz2"
    fake.write_text(FAKE_RVIZ2.format(record=record))
    fake.chmod(0o755)
    env = dict(ros_env.env)
    env["AMENT_PREFIX_PATH"] = sys.prefix
    env["PATH"] = f"{bin_dir}:{Path(sys.prefix) / 'bin'}:{env.get('PATH', '')}"
    log = tmp_path / "launch.log"
    proc = subprocess.Popen([str(Path(sys.prefix) / "bin" / "ros2"), "launch",
                             str(PKG / "launch" / "perception.launch.py"), "rviz:=true", "namespace:=cam1",
                             "image:=/cam1/color/image_raw", "autostart:=false"],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not record.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert record.exists(), log.read_text()
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    topics = [d["Topic"]["Value"] for d in topic_displays(yaml.safe_load(record.read_text()))]
    # the Camera display on the camera topic the node reads (image:=), its markers and images under /cam1
    assert topics == ["/cam1/markers", "/cam1/annotated", "/cam1/segmentation_overlay",
                      "/cam1/color/image_raw"]
