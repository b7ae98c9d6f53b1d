"""``device_share_hz`` on every node that can run on an Edge TPU (tracker, looming, flow, recognition,
control, reservoir; the perception node's is in ``test_device_select.py``): the same parameter in each node's
table, and through each node's own opening path (its processor, controller or ``open_reservoir``, from its
parameters) it reaches the broker as the weight of the node's stream on the shared accelerator: a 30 Hz node
gets two turns for a 15 Hz one's one while both always wait. Diagnostics show each node's stream by name with
its share.

Three accelerators are enumerated by a scripted libusb device list; opening one runs the real driver over the
recording transport with a scripted accelerator behind it (``edgetpu/simulated.py``). No real hardware.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .test_broker import MNV1, Gate
from .test_device_select import three  # noqa: F401  (the fixture: three scripted accelerators)

TRACKER = "robotics/tracker/bright_128x128_edgetpu.tflite"
LOOMING = "robotics/looming/looming_64x64_3x3_edgetpu.tflite"
FLOW = "robotics/optical_flow/gabor_64x64_p4_edgetpu.tflite"
DENSE = "matmul/dense_256_edgetpu.tflite"
EXTRACTOR = "robotics/embedding/mobilenet_v1_1.0_224_quant_embedding_extractor_edgetpu.tflite"


def _tables() -> dict[str, Any]:
    from libredgetpu_ros.ros.control.params import PARAM_TABLE
    from libredgetpu_ros.ros.flow.params import PARAMS as FLOW_PARAMS
    from libredgetpu_ros.ros.perception.params import PARAMS as PERCEPTION_PARAMS
    from libredgetpu_ros.ros.recognition.params import RECOGNITION_PARAMS
    from libredgetpu_ros.ros.reservoir.params import PARAM_TABLE as RESERVOIR_PARAMS
    from libredgetpu_ros.ros.robotics.params import LOOMING_PARAMS, TRACKER_PARAMS

    return {"perception": PERCEPTION_PARAMS, "tracker": TRACKER_PARAMS, "looming": LOOMING_PARAMS,
            "flow": FLOW_PARAMS, "recognition": RECOGNITION_PARAMS, "control": PARAM_TABLE,
            "reservoir": RESERVOIR_PARAMS}


def test_every_edge_tpu_node_has_the_device_share_parameter() -> None:
    from libredgetpu_ros.ros.params import DEVICE_SHARE_PARAM

    for node, table in _tables().items():
        spec = table.specs.get("device_share_hz")
        assert spec is DEVICE_SHARE_PARAM, node  # one definition: default, range, text, when applied
        assert table.defaults()["device_share_hz"] == 0.0
        assert spec.mutability == "configure"  # fixed while configured, like `device`
        described = spec.descriptor().floating_point_range[0]
        assert (described.from_value, described.to_value) == (0.0, 1000.0), node
        assert spec.check(1000.5) and spec.check(-1.0) and spec.check(30.0) is None
        assert "| `device_share_hz` | float | `0.0` | [0, 1000] | configure |" in table.markdown_table(), node
        values = table.values_type(**{**table.defaults(), "device_share_hz": 30.0})
        assert values.device_share_hz == 30.0


# The shipped params file of each node (config/): it lists device_share_hz, and the node's table takes it all.
CONFIGS = {"tracker": "tracker_spot.yaml", "looming": "looming.yaml", "flow": "flow.yaml",
           "recognition": "recognition.yaml", "control": "control.yaml", "reservoir": "reservoir.yaml",
           "perception": "perception_classify.yaml"}


def test_every_edge_tpu_node_config_lists_its_share() -> None:
    import yaml

    config = Path(__file__).resolve().parents[2] / "config"
    tables = _tables()
    for node, name in CONFIGS.items():
        params = yaml.safe_load((config / name).read_text())["/**"]["ros__parameters"]
        assert params["device_share_hz"] == 0.0, name
        tables[node].overrides(params)  # every key known; types, choices and ranges all valid


def _params(table: Any, **values: Any) -> Any:
    return table.values_type(**{**table.defaults(), "backend": "edgetpu", "device": "1", **values})


def _served_ratio(streams: list[Any], rounds: int = 90) -> float:
    """Served turns of streams[0] per turn of streams[1] while each always has a request waiting."""
    broker = streams[0].broker
    gate, order, done = Gate(), [], threading.Event()
    blocker = broker.stream("blocker")
    blocker.submit(gate)
    assert gate.entered.wait(10)

    def keep(stream: Any, label: int) -> Any:  # each served request resubmits itself: one always waits
        def job(dev: Any) -> None:
            order.append(label)
            if len(order) >= rounds:
                done.set()
            elif not done.is_set():
                stream.submit(job)
        return job

    for label, stream in enumerate(streams):
        stream.submit(keep(stream, label))
    gate.release.set()
    assert done.wait(10)
    blocker.close()
    return order.count(0) / order.count(1)


def test_tracker_and_looming_nodes_weigh_their_turns(three, fixture_path) -> None:  # noqa: F811
    """A tracker node at device_share_hz 30 and a looming node at 15 on accelerator "1", opened as the nodes
    (and process-bag) open them: their processors from their parameters."""
    from libredgetpu_ros.ros.robotics.params import LOOMING_PARAMS, TRACKER_PARAMS
    from libredgetpu_ros.ros.robotics.processors import LoomingProcessor, TrackerProcessor

    tracker = TrackerProcessor(_params(TRACKER_PARAMS, template=str(fixture_path(TRACKER)),
                                       device_share_hz=30.0))
    try:
        looming = LoomingProcessor(_params(LOOMING_PARAMS, template=str(fixture_path(LOOMING)),
                                           device_share_hz=15.0))
        try:
            streams = [p.module.runner.backend._stream for p in (tracker, looming)]
            broker = streams[0].broker
            assert streams[1].broker is broker and broker.key == "91-2" and broker._refs == 2
            assert [s.weight for s in streams] == [30.0, 15.0]
            assert _served_ratio(streams) == pytest.approx(2.0, abs=0.15)
            # each node's diagnostics name its own stream and show its share
            tracker_diag, looming_diag = tracker.diagnostic_values(), looming.diagnostic_values()
            assert tracker_diag["shared_stream"] == fixture_path(TRACKER).name
            assert looming_diag["shared_stream"] == fixture_path(LOOMING).name
            assert (tracker_diag["shared_rate_hz"], looming_diag["shared_rate_hz"]) == (30.0, 15.0)
            assert tracker_diag["shared_device_users"] == 2
            image = np.zeros((96, 128, 3), np.uint8)  # and both modules still run on the device
            tracker.warm_up(image)
            looming.warm_up(image)
            assert tracker.diagnostic_values()["shared_served"] > tracker_diag["shared_served"]
            assert looming.diagnostic_values()["shared_served"] > looming_diag["shared_served"]
        finally:
            looming.close()
    finally:
        tracker.close()


def test_two_trackers_on_one_template_get_their_own_streams(three, fixture_path) -> None:  # noqa: F811
    """Two tracker nodes of one process on the same template: one stream each, told apart by name."""
    from libredgetpu_ros.ros.robotics.params import TRACKER_PARAMS
    from libredgetpu_ros.ros.robotics.processors import TrackerProcessor

    opened = [TrackerProcessor(_params(TRACKER_PARAMS, template=str(fixture_path(TRACKER)),
                                       device_share_hz=share)) for share in (30.0, 0.0)]
    try:
        name = fixture_path(TRACKER).name
        diag = [p.diagnostic_values() for p in opened]
        assert [d["shared_stream"] for d in diag] == [name, f"{name}#2"]
        assert [d["shared_rate_hz"] for d in diag] == [30.0, 0.0]  # as configured
        assert [p.module.runner.backend._stream.weight for p in opened] == [30.0, 30.0]  # 0: like the highest
    finally:
        for p in opened:
            p.close()


def test_two_tracker_nodes_streams_are_named_by_their_nodes(three, fixture_path) -> None:  # noqa: F811
    """Tracker nodes /a/tracker and /b/tracker of one process on the same template, opened as the live node
    opens its processor (its fully qualified name): each stream, in the broker and in the node's diagnostics,
    says which node it serves; process-bag (no node) keeps the model's name."""
    from libredgetpu_ros.ros.robotics.params import TRACKER_PARAMS
    from libredgetpu_ros.ros.robotics.processors import TrackerProcessor

    params = _params(TRACKER_PARAMS, template=str(fixture_path(TRACKER)), device_share_hz=30.0)
    opened = [TrackerProcessor(params, node=node) for node in ("/a/tracker", "/b/tracker")]
    try:
        opened.append(TrackerProcessor(params))  # process-bag's
        name = fixture_path(TRACKER).name
        assert [p.diagnostic_values()["shared_stream"] for p in opened] == [
            f"/a/tracker: {name}", f"/b/tracker: {name}", name]
        assert opened[0].diagnostic_values()["shared_device_users"] == 3
        assert {p.module.runner.backend._stream.name for p in opened} == {
            f"/a/tracker: {name}", f"/b/tracker: {name}", name}
    finally:
        for p in opened:
            p.close()


def test_control_and_reservoir_engines_weigh_their_turns(three, fixture_path) -> None:  # noqa: F811
    """Two control nodes' engines (device_share_hz 30 and 15) opened by the node's own Controller, and a
    reservoir node's engine (its open_reservoir) at 10 beside them."""
    from libredgetpu_ros.ros.control.controller import Controller
    from libredgetpu_ros.ros.control.params import PARAM_TABLE
    from libredgetpu_ros.ros.reservoir.node import open_reservoir
    from libredgetpu_ros.ros.reservoir.params import PARAM_TABLE as RESERVOIR_PARAMS

    controllers, reservoir = [], None
    try:
        for share in (30.0, 15.0):
            controllers.append(Controller(_params(PARAM_TABLE, template_path=str(fixture_path(DENSE)),
                                                  device_share_hz=share)))
        engines = [c.engine for c in controllers]
        assert [e.backend for e in engines] == ["edgetpu", "edgetpu"]
        streams = [e._runner._stream for e in engines]
        assert streams[1].broker is streams[0].broker and streams[0].broker.key == "91-2"
        assert [s.weight for s in streams] == [30.0, 15.0]
        assert _served_ratio(streams) == pytest.approx(2.0, abs=0.15)
        status = engines[0].shared_status()
        assert (status["stream"], status["rate_hz"]) == ("matmul dense_256", 30.0)
        assert engines[1].shared_status()["stream"] == "matmul dense_256#2"
        assert engines[0].matmul(np.zeros(engines[0].cols, np.float32)).shape == (engines[0].rows,)
        reservoir = open_reservoir(_params(RESERVOIR_PARAMS, template=256, device_share_hz=10.0))
        status = reservoir.engine.shared_status()
        assert (status["stream"], status["rate_hz"]) == ("matmul dense_256#3", 10.0)
        assert status["device_users"] == 3
    finally:
        if reservoir is not None:
            reservoir.engine.close()
        for c in controllers:
            c.close()


def test_flow_and_recognition_nodes_pass_their_share(three, fixture_path) -> None:  # noqa: F811
    """The flow node's optical flow and the recognition node's extractor and database engine: each stream
    carries the node's device_share_hz and is named after the node."""
    from libredgetpu_ros.ros.flow.params import PARAMS as FLOW_PARAMS
    from libredgetpu_ros.ros.flow.processor import FlowProcessor
    from libredgetpu_ros.ros.recognition.params import RECOGNITION_PARAMS
    from libredgetpu_ros.ros.recognition.processor import RecognitionProcessor

    flow = FlowProcessor(_params(FLOW_PARAMS, model=str(fixture_path(FLOW)), device_share_hz=20.0),
                         node="/front/flow")
    try:
        assert flow.compass.flow.runner.backend._stream.weight == 20.0
        assert flow.diagnostic_values()["shared_rate_hz"] == 20.0
        assert flow.diagnostic_values()["shared_stream"] == f"/front/flow: {fixture_path(FLOW).name}"
        recognition = RecognitionProcessor(_params(RECOGNITION_PARAMS, model=str(fixture_path(EXTRACTOR)),
                                                   template=256, device_share_hz=5.0), node="/recognition")
        try:
            streams = [recognition.extractor.runner._stream, recognition.db.engine._runner._stream]
            assert {id(s.broker) for s in streams} == {id(flow.compass.flow.runner.backend._stream.broker)}
            assert [s.weight for s in streams] == [5.0, 5.0]
            diag = recognition.diagnostic_values()
            assert (diag["shared_extractor_rate_hz"], diag["shared_database_rate_hz"]) == (5.0, 5.0)
            assert (diag["shared_extractor_stream"], diag["shared_database_stream"]) == (
                f"/recognition: {fixture_path(EXTRACTOR).name}", "/recognition: dense_256")
        finally:
            recognition.close()
    finally:
        flow.close()


def _fault_once(stream: Any) -> None:
    """A device fault on ``stream``'s accelerator (the broker reopens it once; every stream on it hears)."""
    from libredgetpu_ros.errors import DeviceLostError

    calls: list[Any] = []

    def flaky(dev: Any) -> None:
        calls.append(dev)
        if len(calls) == 1:
            raise DeviceLostError("unplugged mid-transfer")

    stream.run(flaky, timeout=10)


@pytest.mark.ros
def test_control_and_reservoir_nodes_show_their_stream_in_diagnostics(three, ros_env,  # noqa: F811
                                                                       fixture_path) -> None:
    """A control node (device_share_hz 30) and a reservoir node (10) configured in this process on accelerator
    "1": each node's diagnostics name its engine's stream (after the node) and share, as the camera nodes' do,
    and a device fault on the shared accelerator turns both WARN naming it."""
    from libredgetpu_ros.ros import diagnostics
    from libredgetpu_ros.ros.control_node import ControlNode
    from libredgetpu_ros.ros.reservoir.node import ReservoirNode
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    def params(**values: Any) -> list[Any]:
        return [Parameter(k, value=v) for k, v in {"backend": "edgetpu", "device": "1", **values}.items()]

    context = ros_env.init_rclpy()
    control = ControlNode("control_shared", context=context, parameter_overrides=params(
        template_path=str(fixture_path(DENSE)), device_share_hz=30.0))
    reservoir = ReservoirNode("reservoir_shared", context=context, parameter_overrides=params(
        template=256, device_share_hz=10.0))
    try:
        assert control.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert reservoir.trigger_configure() == TransitionCallbackReturn.SUCCESS
        (c_level, c_message, c_values), (r_level, r_message, r_values) = (control.diagnostic_status(),
                                                                         reservoir.diagnostic_status())
        # each stream named by its node (the fully qualified name) and its template
        assert (c_values["shared_stream"], c_values["shared_rate_hz"]) == (
            f"/control_shared: {fixture_path(DENSE).name}", 30.0)
        assert (r_values["shared_stream"], r_values["shared_rate_hz"]) == (
            "/reservoir_shared: dense_256", 10.0)
        assert c_values["shared_device_users"] == r_values["shared_device_users"] == 2
        assert c_values["shared_faults"] == r_values["shared_faults"] == 0
        assert (c_level, r_level) == (diagnostics.OK, diagnostics.OK) and "fault" not in c_message + r_message
        assert {"shared_served", "shared_p50_ms", "shared_device_reopens"} <= c_values.keys()

        _fault_once(control._ctl.engine._runner._stream)
        for level, message, values in (control.diagnostic_status(), reservoir.diagnostic_status()):
            assert level == diagnostics.WARN and values["shared_faults"] == 1
            assert message.startswith("device fault on the shared accelerator (1 so far, last: "
                                      "DeviceLostError: unplugged mid-transfer); reopened 1 time(s)")
    finally:
        for node in (control, reservoir):
            node.teardown()
            node.destroy_node()


def test_perception_node_stream_is_named_by_its_node(three, fixture_path) -> None:  # noqa: F811
    """The perception node's pipeline opened as the live node opens its processor: its stream says which
    node it serves."""
    from libredgetpu_ros.ros.perception.params import PARAMS
    from libredgetpu_ros.ros.perception.processor import PerceptionProcessor

    processor = PerceptionProcessor(_params(PARAMS, model=str(fixture_path(MNV1)), device_share_hz=12.0),
                                    node="/cam1/perception")
    try:
        values = processor.diagnostic_values()
        assert (values["shared_stream"], values["shared_rate_hz"]) == (
            f"/cam1/perception: {fixture_path(MNV1).name}", 12.0)
    finally:
        processor.close()


@pytest.mark.ros
def test_a_camera_node_warns_on_a_shared_device_fault(three, ros_env, fixture_path) -> None:  # noqa: F811
    """A tracker node (a CameraNode: its WARN comes from its processor's shared_warnings through the camera
    base) configured in this process on accelerator "1": OK with its stream named, then a device fault on
    the shared accelerator turns its status WARN naming the fault and the reopen, as the control and
    reservoir nodes' do (test above)."""
    from libredgetpu_ros.ros import diagnostics
    from libredgetpu_ros.ros.robotics.tracker_node import TrackerNode
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    params = {"backend": "edgetpu", "device": "1", "template": str(fixture_path(TRACKER)),
              "device_share_hz": 30.0}
    tracker = TrackerNode(context=ros_env.init_rclpy(),
                          parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    try:
        assert tracker.trigger_configure() == TransitionCallbackReturn.SUCCESS
        level, message, values = tracker.diagnostic_status()
        assert (values["shared_stream"], values["shared_rate_hz"]) == (
            f"/tracker: {fixture_path(TRACKER).name}", 30.0)
        assert values["shared_faults"] == 0
        assert level == diagnostics.OK and "fault" not in message, (level, message)

        _fault_once(tracker.processor.module.runner.backend._stream)
        level, message, values = tracker.diagnostic_status()
        assert level == diagnostics.WARN and values["shared_faults"] == 1, (level, message)
        assert message.startswith("device fault on the shared accelerator (1 so far, last: "
                                  "DeviceLostError: unplugged mid-transfer); reopened 1 time(s)"), message
    finally:
        tracker.teardown()
        tracker.destroy_node()
