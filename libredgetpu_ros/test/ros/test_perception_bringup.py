"""Parameter table, bringup files, the `bringup` command, the demo and the launch file."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from libredgetpu_ros.errors import ConfigError

PACKAGE = Path(__file__).resolve().parents[2]  # libredgetpu_ros/ (the ament package)


def _launch_module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), PACKAGE / "launch" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not os.environ.get("AMENT_PREFIX_PATH"), reason="the shipped configs are found through "
                    "AMENT_PREFIX_PATH: run inside `source tools/env.sh` (make test does)")
def test_launch_file_declares_its_arguments_and_resolves_params_file_and_overrides() -> None:
    """What perception.launch.py gives the node for the arguments given, without starting it (the
    launch_testing run of test/launch/test_perception_launch.py starts it)."""
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument

    launch = _launch_module("perception.launch.py")
    declared = {a.name for a in launch.generate_launch_description().entities
                if isinstance(a, DeclareLaunchArgument)}
    assert {"params_file", "namespace", "node_name", "autostart", *launch.OVERRIDES} <= declared

    def context(**arguments: str) -> LaunchContext:
        ctx = LaunchContext()
        ctx.launch_configurations.update({"params_file": "", "task": "", **{k: "" for k in launch.OVERRIDES}})
        ctx.launch_configurations.update(arguments)
        return ctx

    params_file, overrides = launch.parameters(context())
    assert Path(params_file).name == "perception_pose.yaml" and Path(params_file).is_file()
    assert overrides == {}
    params_file, overrides = launch.parameters(context(task="detect", model="ssd_mobilenet_v2_coco",
                                                       backend="cpu", require_accelerator="false"))
    assert Path(params_file).name == "perception_detect.yaml" and Path(params_file).is_file()
    assert overrides == {"task": "detect", "model": "ssd_mobilenet_v2_coco", "backend": "cpu",
                         "require_accelerator": False}
    assert launch.parameters(context(params_file="/x/mine.yaml", task="segment"))[0] == "/x/mine.yaml"
    with pytest.raises(ValueError, match="backend"):
        launch.parameters(context(backend="gpu"))


def test_config_files_hold_exactly_the_node_parameters() -> None:
    import yaml
    from libredgetpu_ros.ros.camera.params import DEPRECATED_PARAMS
    from libredgetpu_ros.ros.perception_node import PARAMS

    names = sorted(p.name for p in (PACKAGE / "config").glob("perception_*.yaml"))
    assert names == ["perception_classify.yaml", "perception_detect.yaml", "perception_pose.yaml",
                     "perception_segment.yaml"]
    for name in names:
        doc = yaml.safe_load((PACKAGE / "config" / name).read_text())
        params = doc["/**"]["ros__parameters"]
        assert set(params) == set(PARAMS.specs) - DEPRECATED_PARAMS, name
        PARAMS.overrides(params)  # types, choices and ranges all valid


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bringup.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "message"), [
    ("nodes: []", "at least one node"),
    ("nodes:\n  - type: lidar", "type 'lidar' is not one of"),
    ("nodes:\n  - type: perception\n    name: 9bad", "invalid node name"),
    ("nodes:\n  - type: perception\n    colour: red", "unknown key(s) colour"),
    ("nodes:\n  - type: perception\n  - type: perception", "duplicate node names"),
    ("nodes:\n  - type: perception\n    parameters:\n      model: $(fixture nope/missing.tflite)",
     "nope/missing.tflite"),
    ("nodes: [", "not valid YAML"),
    ("nodes:\n  - type: perception\n    remappings: [image_raw]", "'remappings' must be a mapping"),
    ("nodes:\n  - type: perception\n    remappings:\n      image_raw: 'cam image'", "is not a ROS name"),
    ("nodes:\n  - type: perception\n    remappings:\n      image_raw: a:=b", "is not a ROS name"),
])
def test_bad_bringup_files_are_refused_with_the_reason(tmp_path: Path, text: str, message: str) -> None:
    from libredgetpu_ros.ros.bringup import load_config

    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    assert message in str(info.value) and "bringup" in str(info.value)


@pytest.mark.parametrize(("qos", "message"), [
    ("{/x: {subscription: {depth: 1}}}", "expected {/topic: {publisher"),
    ("{/x: {publisher: {deadline: 5}}}", "qos_overrides of /x: deadline: 5"),
    ("{/x: {publisher: {depth: [1]}}}", "qos_overrides of /x: depth: [1]"),
    ("[1]", "expected {/topic"),
])
def test_bad_qos_overrides_in_a_bringup_file_are_refused(qos: str, message: str) -> None:
    import yaml
    from libredgetpu_ros.ros.bringup import node_class, parameter_overrides

    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("[", r"\[")):
        parameter_overrides(node_class("perception"), {"qos_overrides": yaml.safe_load(qos)})


def test_bringup_parameters_are_typed_by_the_node_table(tmp_path: Path, fixture_path) -> None:
    from libredgetpu_ros.ros.bringup import load_config, node_class, parameter_overrides

    text = ("nodes:\n  - type: perception\n    namespace: cam\n    parameters:\n"
            "      model: $(fixture images/cat.bmp)\n      score_threshold: 1\n")
    spec, = load_config(_write(tmp_path, text))
    assert spec.parameters["model"] == str(fixture_path("images/cat.bmp"))
    overrides = {p.name: p.value for p in parameter_overrides(node_class("perception"), spec.parameters)}
    assert overrides["score_threshold"] == 1.0 and isinstance(overrides["score_threshold"], float)
    for bad in ({"score_threshold": 2.0}, {"backend": "gpu"}, {"publish_markers": "yes"}, {"modle": "x"},
                {"deactivate_timeout": 0.0}):
        with pytest.raises(ConfigError):
            parameter_overrides(node_class("perception"), bad)
    # deactivate_timeout: every node's (params.MANAGED_NODE_PARAMS), typed beside the node's own table
    for kind in ("perception", "reservoir", "control"):
        typed = parameter_overrides(node_class(kind), {"deactivate_timeout": 3})
        assert [(p.name, p.value) for p in typed] == [("deactivate_timeout", 3.0)], kind


def test_an_unknown_bringup_parameter_lists_every_parameter_the_node_accepts() -> None:
    """The node's own table, every node's (the base's deactivate_timeout, rclpy's use_sim_time: it listed only
    the table's before) and bringup's qos_overrides."""
    from libredgetpu_ros.ros.bringup import node_class, parameter_overrides

    for kind in ("perception", "control", "reservoir"):
        cls = node_class(kind)
        with pytest.raises(ConfigError, match="unknown parameter") as raised:
            parameter_overrides(cls, {"modle": "x", "deactivate_timeout": 3})
        known = str(raised.value).split("; known: ", 1)[1].split(", ")
        assert set(known) == {*cls.PARAMS.specs, "deactivate_timeout", "use_sim_time", "qos_overrides"}, \
            (kind, known)
        assert len(known) == len(set(known)), known
    with pytest.raises(ConfigError, match="use_sim_time must be true/false"):
        parameter_overrides(node_class("control"), {"use_sim_time": "yes"})


@pytest.mark.ros
def test_use_sim_time_in_a_bringup_file_reaches_the_node(ros_env) -> None:
    """rclpy's own parameter (refused as unknown before): the node's clock follows /clock."""
    from libredgetpu_ros.ros.bringup import node_class, parameter_overrides

    cls = node_class("control")
    node = cls("sim_control", context=ros_env.init_rclpy(),
               parameter_overrides=parameter_overrides(cls, {"use_sim_time": True, "backend": "cpu"}))
    try:
        assert node.get_parameter("use_sim_time").value is True
        assert node.get_clock().ros_time_is_active
    finally:
        node.destroy_node()


@pytest.mark.ros
def test_bringup_remappings_reach_the_node(ros_env, tmp_path: Path, fixture_path) -> None:
    """A bringup file's ``remappings:`` are the node's own ``-r from:=to`` (resolved in its namespace, as
    under ``ros2 launch``): the active node reads the remapped camera topic and publishes where it says."""
    from libredgetpu_ros.ros.bringup import Bringup, load_config
    from rclpy.qos import ReliabilityPolicy

    model = fixture_path("classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite")
    text = ("nodes:\n  - type: perception\n    namespace: front\n    remappings:\n"
            "      image_raw: /front_camera/color/image_raw\n      classification: results/classification\n"
            f"    parameters:\n      model: {model}\n"
            "      backend: cpu\n      task: classify\n"
            "      qos_overrides:\n        /front/results/classification:\n          publisher:\n"
            "            reliability: best_effort\n            depth: 2\n")
    bringup = Bringup(load_config(_write(tmp_path, text)), context=ros_env.init_rclpy(), log=lambda _: None)
    try:
        bringup.start()
        node, = bringup.nodes
        # the camera's CameraInfo beside its image, as image_transport pairs them (markers' image plane)
        assert sorted(s.topic_name for s in node.subscriptions) == ["/front_camera/color/camera_info",
                                                                    "/front_camera/color/image_raw"]
        published = {name for name, _ in node.get_publisher_names_and_types_by_node("perception", "/front")}
        assert "/front/results/classification" in published and "/front/classification" not in published
        # qos_overrides as in a params file (ros/output_qos.py), on the remapped (resolved) output name
        qos = {p.topic_name: p.qos_profile for p in node.publishers}
        assert qos["/front/results/classification"].reliability == ReliabilityPolicy.BEST_EFFORT
        assert qos["/front/results/classification"].depth == 2
        assert qos["/front/annotated"].reliability == ReliabilityPolicy.RELIABLE
    finally:
        bringup.stop()


@pytest.mark.ros
def test_parameter_descriptors_and_validation_in_a_live_node(ros_env) -> None:
    from libredgetpu_ros.ros.perception_node import PARAMS, PerceptionNode
    from rclpy.parameter import Parameter

    node = PerceptionNode("perception_params", context=ros_env.init_rclpy())
    try:
        desc = node.describe_parameter("score_threshold")
        assert (desc.floating_point_range[0].from_value, desc.floating_point_range[0].to_value) == (0.0, 1.0)
        assert node.describe_parameter("input_topic").read_only
        assert node.describe_parameter("max_results").integer_range[0].to_value == 100
        results = node.set_parameters([
            Parameter("backend", value="gpu"),            # not a choice
            Parameter("input_topic", value="other"),      # read-only
            Parameter("max_results", value=101),           # out of range
            Parameter("model", value="/m_edgetpu.tflite"),  # unconfigured: accepted
            Parameter("top_k", value=3),                   # runtime: accepted
        ])
        assert [r.successful for r in results] == [False, False, False, True, True]
        assert "gpu" in results[0].reason
        assert node.cfg is None and node.read_config().top_k == 3  # typed view read on configure
        assert "| `score_threshold` | float | `0.5` | [0, 1] | runtime |" in PARAMS.markdown_table()
    finally:
        node.destroy_node()


@pytest.mark.ros
def test_bringup_command_runs_the_demo_config_and_stops_cleanly_on_sigterm(ros_env, fixture_path) -> None:
    from libredgetpu_ros.models.store import import_dir
    from lifecycle_msgs.srv import GetState
    from rclpy.node import Node

    # The shipped file names its model as users do (a catalogue name), found in the models cache.
    cache = ros_env.work_dir / "models"
    assert import_dir(fixture_path("posenet"), ["posenet_mobilenet_v1_075_481_641"], cache=cache)
    ros_env.env["LIBREDGETPU_ROS_MODELS"] = str(cache)
    assert "$(" not in (PACKAGE / "config" / "demo.yaml").read_text()  # no test-only substitution
    proc = ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.cli.main", "bringup",
                          str(PACKAGE / "config" / "demo.yaml")], "bringup")
    context = ros_env.init_rclpy()
    node = Node("bringup_probe", context=context)
    client = node.create_client(GetState, "/demo/perception/get_state")
    assert client.wait_for_service(timeout_sec=20.0)
    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    deadline = time.monotonic() + 20.0
    state = ""
    while state != "active" and time.monotonic() < deadline:
        future = client.call_async(GetState.Request())
        executor.spin_until_future_complete(future, timeout_sec=5.0)
        state = future.result().current_state.label if future.done() else ""
        time.sleep(0.1)
    assert state == "active"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    log = (ros_env.work_dir / "bringup.log").read_text()
    assert "/demo/perception: active" in log and "stopping" in log


@pytest.mark.ros
def test_demo_prints_poses_and_writes_annotated_images(ros_env, tmp_path: Path) -> None:
    out = tmp_path / "demo_out"
    args = [sys.executable, "-m", "libredgetpu_ros.ros.demo", "--frames", "4", "--out", str(out)]
    proc = ros_env.spawn(args, "demo")
    assert proc.wait(timeout=60) == 0
    log = (ros_env.work_dir / "demo.log").read_text()
    assert "test_couple.jpg   poses: 2" in log
    assert f"annotated images in {out}/" in log and "per second over the run" in log
    assert "fps_out=0.000" not in log  # a window rate read after the stream ended said the node was idle
    images = sorted(out.glob("frame_*.jpg"))
    assert images, log
    import cv2

    first = cv2.imread(str(images[0]))
    assert first is not None and first.shape[2] == 3
