"""Weight swaps on the main executor answer while a frame's engine call is stuck (real nodes in their own
processes, real localhost-only DDS, ``_held_runner_node.py``).

The node's MatMul runner (the tracker's camera backend) holds one call until released and, like the Edge TPU
runner (one device), stages a new weight set only once no call is in flight. A recognition frame held in its
database match; a control state held in its W·x; a tracker frame in its inference. Then, from a supervisor:
the recognition node's ``~/enroll``, ``~/forget`` and ``~/load`` (each a database swap), the control node's
``~/set_weights``, the tracker's ``~/set_color`` must each answer within
``ANSWER_S`` (their bound is 1 s: ``ros/frame_busy.py``) with ``success`` / ``accepted`` false, "a frame is in
progress", nothing changed; what needs no swap (``~/save``, a dry run, ``get_state``) answers as usual; once
the call is released, the same requests succeed. Before, each swap waited for the held call inside the
runner's stage, on the main executor: no deactivate, no diagnostics, no other service for as long as the
call was stuck.

In process: the control node's swap takes that step lock around the runner's staging alone; its request
validation and quantization (with the blob) run with the lock free, so a state never waits for them.

The reservoir node's ``~/load_readout`` / ``~/save_readout`` with a state held in its W_res·x answer
``success`` as usual: they take no lock the state holds (the audit's check, docs/reliability.md section 14).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

HERE = Path(__file__).resolve().parent
supervision = load_helper(HERE / "_lifecycle_supervisor.py")
held = load_helper(HERE / "_held_runner_node.py")
_held_lock = load_helper(HERE / "_held_lock.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(240)]

WAIT_S = 40.0  # discovery and configure (the extractor's model) on a loaded machine
ANSWER_S = 10.0  # the bound (1 s) with room on a loaded machine; blocked behind the frame: no answer
BUSY = "frame is in progress"


def _answer(sup: Any, srv_type: type, name: str, **fields: Any) -> Any:
    """``<node>/<name>``'s answer, failing when none came within ANSWER_S (the main executor blocked)."""
    client = sup.node.create_client(srv_type, f"{sup.fqn}/{name}")
    try:
        assert client.wait_for_service(timeout_sec=WAIT_S), f"{sup.fqn}/{name} did not appear"
        future = client.call_async(srv_type.Request(**fields))
        sup.wait_for(f"{name}'s answer within {ANSWER_S:g} s while a frame is held (blocked behind it?)",
                     future.done, timeout=ANSWER_S)
        return future.result()
    finally:
        sup.node.destroy_client(client)


def _hold(sup: Any, folder: Path, publish: Any) -> None:
    """The next engine call held; published again each second until it is (camera frames are best effort,
    unlike the states ``held.hold_next_call`` publishes once)."""
    (folder / "arm").touch()
    sup.wait_for("an engine call to be held", lambda: "held" in held.events(folder), every=publish)


def _release(sup: Any, folder: Path) -> None:
    (folder / "release").touch()
    sup.wait_for("the held call to return",
                 lambda: "run-end" in held.events(folder)[held.events(folder).index("held"):])


def test_recognition_database_services_answer_while_a_match_is_held(ros_env, tmp_path: Path) -> None:
    from libredgetpu_ros.ros.camera import RESULT_QOS
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Classification

    from libredgetpu_ros_interfaces.srv import Enroll, FilePath, Forget

    folder, database = tmp_path / "runner", tmp_path / "db.npz"
    folder.mkdir()
    held.spawn(ros_env, folder, "libredgetpu_ros.ros.recognition.node", "recognition_held", {},
               remaps={"image_raw": "/held/camera", "classification": "/held/classification"})
    sup = supervision.LifecycleSupervisor(ros_env, "held_supervisor", "/recognition_held", WAIT_S)
    camera = sup.node.create_publisher(Image, "/held/camera", qos_profile_sensor_data)
    results: list[Any] = []
    sup.node.create_subscription(Classification, "/held/classification", results.append, RESULT_QOS)
    rgb = np.random.default_rng(5).integers(0, 256, (96, 96, 3), dtype=np.uint8)
    frame = Image(height=96, width=96, encoding="rgb8", step=96 * 3, data=rgb.tobytes())

    assert sup.transition("configure") and sup.transition("activate")
    sup.wait_for("a first classification", lambda: results, every=lambda: camera.publish(frame))
    enrolled = sup.service(Enroll, "enroll", label="cat")
    assert enrolled.success and enrolled.entries == 1, enrolled.message
    assert sup.service(FilePath, "save", path=str(database)).success

    _hold(sup, folder, lambda: camera.publish(frame))  # the next frame's database match
    try:
        swaps = (("enroll", Enroll, {"label": "dog"}), ("forget", Forget, {"label": "cat"}),
                 ("load", FilePath, {"path": str(database)}))
        for name, srv_type, fields in swaps:
            busy = _answer(sup, srv_type, name, **fields)
            assert not busy.success and BUSY in busy.message, (name, busy)
        saved = _answer(sup, FilePath, "save", path=str(tmp_path / "during.npz"))  # no swap: no lock
        assert saved.success and "saved 1 entries" in saved.message, saved.message
        assert sup.state() == "active"
    finally:
        _release(sup, folder)
    # Nothing changed by the refused calls: one entry, "cat"; the same calls succeed now.
    forgot = _answer(sup, Forget, "forget", label="cat")
    assert forgot.success and forgot.removed == 1, forgot.message
    loaded = _answer(sup, FilePath, "load", path=str(database))
    assert loaded.success and "loaded 1 entries" in loaded.message, loaded.message
    assert sup.transition("deactivate") and sup.transition("cleanup")


def test_control_set_weights_answers_while_a_state_is_held(ros_env, tmp_path: Path) -> None:
    from std_msgs.msg import Float32MultiArray

    from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

    held.spawn(ros_env, tmp_path, "libredgetpu_ros.ros.control_node", "control_held",
               {"state_size": 2, "command_size": 2, "state_topic": "/held/state", "stale_timeout": 30.0})
    sup = supervision.LifecycleSupervisor(ros_env, "held_supervisor", "/control_held", WAIT_S)
    commands, states = held.control_wires(sup, "control_held", "/held/state")
    weights = {"rows": 2, "cols": 2, "data": [0.05, 0.0, 0.0, 0.05], "request_id": "planner:1"}

    assert sup.transition("configure") and sup.transition("activate")
    publish = lambda: states.publish(Float32MultiArray(data=[0.5, -0.25]))  # noqa: E731
    sup.wait_for("a first command", lambda: commands, every=publish)
    version = sup.service(GetWeights, "get_weights").version
    _hold(sup, tmp_path, publish)
    try:
        busy = _answer(sup, SetWeights, "set_weights", **weights)
        assert not busy.accepted and BUSY in busy.message and busy.version == version, busy
        dry = _answer(sup, SetWeights, "set_weights", **{**weights, "request_id": "", "dry_run": True})
        assert dry.accepted, dry.message  # nothing staged: no wait
        assert _answer(sup, GetWeights, "get_weights").version == version
    finally:
        _release(sup, tmp_path)
    # The refused id was not recorded as answered: its retry swaps now.
    swapped = _answer(sup, SetWeights, "set_weights", **weights)
    assert swapped.accepted and swapped.version == version + 1, swapped.message
    assert sup.transition("deactivate") and sup.transition("cleanup")


class _StagingProbe:
    """The integer twin's arithmetic behind a runner that is not a ``TwinRunner`` (so the engine stages on
    it, as on an accelerator); its ``stage`` records whether ``lock`` is held at that moment."""

    name, choice, fallback = "cpu", "", ""

    def __init__(self, inner: Any, seen: dict[str, Any]) -> None:
        self._inner, self._seen = inner, seen

    def stage(self, parameters: Any) -> None:
        lock = self._seen.get("lock")
        if lock is not None:
            self._seen["stage"].append(lock.locked())
        self._inner.stage(parameters)

    def run(self, xq: np.ndarray, parameters: Any) -> np.ndarray:
        return self._inner.run(xq, parameters)

    def close(self) -> None:
        self._inner.close()


def test_control_swap_validates_and_quantizes_outside_the_step_lock(ros_env, monkeypatch) -> None:
    """A real control node in process, its runner staging (``_StagingProbe``): during a ``~/set_weights``
    the step lock is free while the request is validated and quantized (the blob built), held while the
    runner stages; a dry run never takes it. On the code of 712d734 the lock was held across all of
    ``Controller.set_weights``. Then: the same swap with the lock held elsewhere answers busy (not device
    trouble), and on the integer twin the node makes no lock at all."""
    from libredgetpu_ros.matmul import engine as engine_module
    from libredgetpu_ros.matmul import runners
    from libredgetpu_ros.matmul.twin import TwinRunner
    from libredgetpu_ros.ros.control import controller as controller_module
    from libredgetpu_ros.ros.control.node import ControlNode
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    from libredgetpu_ros_interfaces.srv import SetWeights

    seen: dict[str, Any] = {"lock": None, "stage": [], "validate": [], "quantize": []}

    def recording(key: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen[key].append(seen["lock"].locked() if seen["lock"] is not None else None)
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(controller_module, "validate_weights_request",
                        recording("validate", controller_module.validate_weights_request))
    for name in ("quantize_to_blob", "quantize_rows"):  # the compiled pass (blob included) or NumPy's
        monkeypatch.setattr(engine_module, name, recording("quantize", getattr(engine_module, name)))
    params = {"backend": "cpu", "template": 256, "state_size": 2, "command_size": 2}
    context = ros_env.init_rclpy()
    node = ControlNode("control_swap_lock", context=context,
                       parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    try:
        runners.register_runner("cpu", lambda template, _device: _StagingProbe(TwinRunner(template.quant),
                                                                               seen))
        try:
            assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS  # the engine opens here
        finally:
            runners.register_runner("cpu", runners._cpu_twin)
        assert node._ctl.engine.stages_weights and node._step_lock is not None
        seen["lock"] = node._step_lock
        for key in ("stage", "validate", "quantize"):
            seen[key].clear()
        request = SetWeights.Request(rows=2, cols=2, data=[0.05, 0.0, 0.0, 0.05], request_id="planner:1")
        dry = node._on_set_weights(SetWeights.Request(rows=2, cols=2, data=[0.05] * 4, dry_run=True),
                                   SetWeights.Response())
        assert dry.accepted and seen["stage"] == [], dry.message  # a dry run stages nothing
        swapped = node._on_set_weights(request, SetWeights.Response())
        assert swapped.accepted, swapped.message
        assert seen["stage"] == [True], seen  # the staging under the step lock
        assert seen["validate"] == [False, False], seen  # the dry run's and the swap's: lock free
        assert seen["quantize"] and not any(seen["quantize"]), seen
        busy = _held_lock.answer_while_held(node._step_lock, lambda: node._on_set_weights(
            SetWeights.Request(rows=2, cols=2, data=[0.1, 0.0, 0.0, 0.1]), SetWeights.Response()))
        assert not busy.accepted and BUSY in busy.message and "Error" not in busy.message, busy
        assert busy.version == swapped.version == node._ctl.engine.version
    finally:
        node.teardown()
        node.destroy_node()
    twin = ControlNode("control_twin_lock", context=context,
                       parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    try:
        assert twin.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert not twin._ctl.engine.stages_weights and twin._step_lock is None  # compiled kernel or not
    finally:
        twin.teardown()
        twin.destroy_node()


def test_tracker_set_color_answers_while_a_frame_is_held(ros_env, tmp_path: Path) -> None:
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    from libredgetpu_ros_interfaces.srv import SetColor

    held.spawn(ros_env, tmp_path, "backend:libredgetpu_ros.ros.robotics.tracker_node", "tracker_held",
               {"module": "spot", "template": "color_red_64x64"}, remaps={"image_raw": "/held/camera"})
    sup = supervision.LifecycleSupervisor(ros_env, "held_supervisor", "/tracker_held", WAIT_S)
    camera = sup.node.create_publisher(Image, "/held/camera", qos_profile_sensor_data)
    rgb = np.random.default_rng(7).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    frame = Image(height=64, width=64, encoding="rgb8", step=64 * 3, data=rgb.tobytes())
    green = {"r": 0.0, "g": 1.0, "b": 0.0}

    assert sup.transition("configure") and sup.transition("activate")
    version = _answer(sup, SetColor, "set_color", r=1.0, g=0.0, b=0.0).version  # free: swapped
    _hold(sup, tmp_path, lambda: camera.publish(frame))
    try:
        busy = _answer(sup, SetColor, "set_color", **green)
        assert not busy.success and BUSY in busy.message and busy.version == version, busy
        assert sup.state() == "active"
    finally:
        _release(sup, tmp_path)
    swapped = _answer(sup, SetColor, "set_color", **green)
    assert swapped.success and swapped.version == version + 1, swapped.message
    assert sup.transition("deactivate") and sup.transition("cleanup")


def test_reservoir_readout_services_answer_while_a_state_is_held(ros_env, tmp_path: Path) -> None:
    """The reservoir node's ``~/load_readout`` and ``~/save_readout`` (main executor) while a state's W_res·x
    is held in the runner. The node builds no readout engine (the readout is a NumPy product on the state),
    so the held call holds no lock a load needs: both answer as usual and the load takes effect (the
    audit's suspected hang through ``ReservoirComputer._lock`` needs a ``readout_engine``, which only a
    library caller passes)."""
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float64MultiArray

    from libredgetpu_ros_interfaces.srv import FilePath

    readout = tmp_path / "readout.npz"
    series = np.stack([np.sin(np.arange(400) * 0.1), np.cos(np.arange(400) * 0.13)], axis=1)
    with MatMulEngine.from_template(256, backend="cpu") as engine:  # the test's own process: the CPU twin
        offline = ReservoirComputer(engine, ReservoirConfig(input_dim=2, seed=5, washout=50))
        offline.fit(series[:-1], series[1:])
        offline.save_readout(readout)
    folder = tmp_path / "runner"
    folder.mkdir()
    # washout: a fitting choice (not checked by the load), 0 here: predictions at once
    held.spawn(ros_env, folder, "libredgetpu_ros.ros.reservoir.node", "reservoir_held",
               {"state_size": 2, "state_type": "float64_multi_array", "state_topic": "/held/joints",
                "seed": 5, "washout": 0})
    sup = supervision.LifecycleSupervisor(ros_env, "held_supervisor", "/reservoir_held", WAIT_S)
    states = sup.node.create_publisher(Float64MultiArray, "/held/joints", QoSProfile(depth=10))
    predictions: list[Any] = []
    sup.node.create_subscription(Float64MultiArray, "/reservoir_held/prediction", predictions.append,
                                 QoSProfile(depth=100))

    assert sup.transition("configure") and sup.transition("activate")
    sup.wait_for("the node's state subscription", lambda: states.get_subscription_count() > 0)
    publish = lambda: states.publish(Float64MultiArray(data=[0.5, -0.25]))  # noqa: E731
    held.first_call_then_hold(sup, folder, publish)
    try:
        loaded = _answer(sup, FilePath, "load_readout", path=str(readout))
        assert loaded.success and "loaded readout" in loaded.message, loaded.message
        saved = _answer(sup, FilePath, "save_readout", path=str(tmp_path / "during.npz"))
        assert saved.success, saved.message
        assert sup.state() == "active"
    finally:
        _release(sup, folder)
    # The readout loaded during the held call is the node's: the next states are predicted.
    sup.wait_for("a prediction from the readout loaded while the state was held", lambda: predictions,
                 every=publish)
    assert sup.transition("deactivate") and sup.transition("cleanup")
