"""Shared machinery of the launch_testing tests in this folder (they run under `launch_test`, not pytest).

Each ``test_<name>_launch.py`` describes one launch file as a :class:`LaunchCase` and gets its tests from
:func:`launch_tests`; the file is then a few lines, so testing a new launch file is a copy of one of them.
For every case, two launches (``launch_testing.parametrize``):

- ``good``: the installed launch file (``share/libredgetpu_ros/launch``, found through the ament index as
  ``ros2 launch`` finds it) with autostart and a params file written here; the node must reach ``active``,
  the parameters of the file must be in effect (read back with ``GetParameters``, as ``ros2 param get``
  does), and a result must arrive for the case's stimulus; with ``autostart_once``, a supervisor's
  deactivate -> cleanup -> configure must then leave the node ``inactive`` (autostart acts once, at start);
- ``broken``: the same with the case's ``broken`` parameters (a missing model); configure must fail, the
  node must stay ``unconfigured`` and the reason must be in its log.

After each launch, launch_testing stops the processes (SIGINT, escalating to SIGTERM/SIGKILL) and every
one of them must have exited with code 0. Every wait is bounded by :data:`WAIT_S`; `make test` bounds the
whole run of a file as well (tools/run_launch_tests.sh).
"""

from __future__ import annotations

import os
import tempfile
import time
import unittest
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import launch
import launch_testing
import launch_testing.actions
import launch_testing.asserts
from ament_index_python.packages import get_package_share_directory
from launch.actions import IncludeLaunchDescription, SetEnvironmentVariable
from launch.launch_description_sources import PythonLaunchDescriptionSource

WAIT_S = 30.0  # bound on each wait: process start, discovery (0.1-3 s), configure, one result


@dataclass(frozen=True)
class LaunchCase:
    """One launch file under test.

    ``node``: the launched node's fully qualified name. ``arguments``: launch arguments besides
    ``params_file``. ``params_key``: the node key of the params file (``/**`` or the node name).
    ``params``: a working parameter set; ``expect_params``: a subset that must be in effect.
    ``params_key`` empty: no ``params_file:=`` at all (the launch file's own default; ``params`` unused).
    ``broken``: overrides that make configure fail; ``failure_log``: text its log must then contain.
    ``result``: (message type, topic) that carries the node's output; ``stimulus(node)`` creates the input
    publisher(s) on ``node`` and returns a function that publishes one input. ``environment``: variables
    set for the launch (both scenarios); ``good_arguments`` / ``broken_arguments``: launch arguments of one
    scenario only (e.g. ``model:=`` over a params file whose model is missing). ``autostart_once``: check
    that autostart does not act again. ``check(result)``: assertions on the first result (what it must hold).
    ``also``: (message type, topic, latched, accept) of further outputs that must each carry a message
    (latched: subscribed transient local, for a message published once, like ``label_info``; ``accept``:
    None, or what a message must satisfy to count).
    """

    launch_file: str
    node: str
    arguments: dict[str, str]
    params_key: str
    params: dict[str, Any]
    expect_params: dict[str, Any]
    broken: dict[str, Any]
    failure_log: str
    result: tuple[type, str]
    stimulus: Callable[[Any], Callable[[], None]]
    environment: dict[str, str] = field(default_factory=dict)
    good_arguments: dict[str, str] = field(default_factory=dict)
    broken_arguments: dict[str, str] = field(default_factory=dict)
    autostart_once: bool = False
    check: Callable[[Any], None] | None = None
    also: tuple[tuple[type, str, bool, Callable[[Any], bool] | None], ...] = ()


def _params_file(key: str, params: dict[str, Any]) -> str:
    import yaml

    folder = Path(tempfile.mkdtemp(prefix="libredgetpu_ros_launch_test_"))
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump({key: {"ros__parameters": params}}))
    return str(path)


def _describe(case: LaunchCase, scenario: str) -> launch.LaunchDescription:
    params = dict(case.params) if scenario == "good" else {**case.params, **case.broken}
    path = os.path.join(get_package_share_directory("libredgetpu_ros"), "launch", case.launch_file)
    arguments = {**case.arguments,
                 **(case.good_arguments if scenario == "good" else case.broken_arguments),
                 **({"params_file": _params_file(case.params_key, params)} if case.params_key else {}),
                 "autostart": "true"}
    return launch.LaunchDescription([
        *(SetEnvironmentVariable(name, value) for name, value in case.environment.items()),
        IncludeLaunchDescription(PythonLaunchDescriptionSource(path), launch_arguments=arguments.items()),
        launch_testing.actions.ReadyToTest(),
    ])


class Probe:
    """An rclpy node in the launch_test process: lifecycle state, parameters, stimulus and results."""

    def __init__(self, name: str) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()

    def _call(self, srv_type: type, name: str, request: Any) -> Any:
        client = self.node.create_client(srv_type, name)
        try:
            if not client.wait_for_service(timeout_sec=WAIT_S):
                raise AssertionError(f"service {name} did not appear within {WAIT_S} s")
            future = client.call_async(request)
            self.executor.spin_until_future_complete(future, timeout_sec=WAIT_S)
            if not future.done():
                raise AssertionError(f"no answer from {name} within {WAIT_S} s")
            return future.result()
        finally:
            self.node.destroy_client(client)

    def state(self, node: str) -> str:
        from lifecycle_msgs.srv import GetState

        return self._call(GetState, f"{node}/get_state", GetState.Request()).current_state.label

    def wait_for_state(self, node: str, wanted: str) -> str:
        """Poll until ``node`` is in state ``wanted`` (autostart runs on its own schedule); the last state."""
        deadline = time.monotonic() + WAIT_S
        state = self.state(node)
        while state != wanted and time.monotonic() < deadline:
            time.sleep(0.2)
            state = self.state(node)
        return state

    def transition(self, node: str, label: str) -> bool:
        """``ros2 lifecycle set NODE LABEL``: whether the transition succeeded."""
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        ids = {"configure": Transition.TRANSITION_CONFIGURE, "activate": Transition.TRANSITION_ACTIVATE,
               "deactivate": Transition.TRANSITION_DEACTIVATE, "cleanup": Transition.TRANSITION_CLEANUP}
        request = ChangeState.Request(transition=Transition(id=ids[label]))
        return self._call(ChangeState, f"{node}/change_state", request).success

    def parameters(self, node: str, names: list[str]) -> dict[str, Any]:
        from rcl_interfaces.srv import GetParameters
        from rclpy.parameter import parameter_value_to_python

        answer = self._call(GetParameters, f"{node}/get_parameters", GetParameters.Request(names=names))
        return {n: parameter_value_to_python(v) for n, v in zip(names, answer.values, strict=True)}

    def wait_for_result(self, msg_type: type, topic: str, publish: Callable[[], None],
                        latched: bool = False, accept: Callable[[Any], bool] | None = None) -> Any:
        """Publish inputs until one result arrives on ``topic`` (discovery decides when the first gets in);
        ``latched``: subscribe reliable + transient local (a message published once, before we joined);
        ``accept``: only a message it accepts counts."""
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

        got: list[Any] = []
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL) if latched else qos_profile_sensor_data
        def take(msg: Any) -> None:
            if accept is None or accept(msg):
                got.append(msg)

        sub = self.node.create_subscription(msg_type, topic, take, qos)
        try:
            deadline = time.monotonic() + WAIT_S
            while not got and time.monotonic() < deadline:
                publish()
                self.executor.spin_once(timeout_sec=0.25)
            if not got:
                raise AssertionError(f"no {msg_type.__name__} on {topic} within {WAIT_S} s")
            return got[0]
        finally:
            self.node.destroy_subscription(sub)


def camera(node: Any, rgb: Any, topic: str = "/lt/camera", info: Any = None) -> Callable[[], None]:
    """A ``stimulus`` for camera nodes: a publisher on ``topic`` made on ``node`` and a function that
    publishes ``rgb`` (HxWx3 uint8) as one rgb8 Image of frame ``camera``; with ``info`` (a CameraInfo),
    that first on ``<topic namespace>/camera_info``, as a camera driver pairs them."""
    from sensor_msgs.msg import CameraInfo, Image

    msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", step=rgb.shape[1] * 3,
                data=rgb.tobytes())
    msg.header.frame_id = "camera"
    pub = node.create_publisher(Image, topic, 10)
    if info is None:
        return lambda: pub.publish(msg)
    info_pub = node.create_publisher(CameraInfo, topic.rsplit("/", 1)[0] + "/camera_info", 10)

    def publish() -> None:
        info_pub.publish(info)
        pub.publish(msg)

    return publish


def launch_tests(case: LaunchCase) -> tuple[Callable[..., Any], type, type]:
    """``generate_test_description`` and the two test classes for ``case``; bind them in the test module."""

    @launch_testing.parametrize("scenario", ["good", "broken"])
    def generate_test_description(scenario: str) -> tuple[launch.LaunchDescription, dict[str, Any]]:
        return _describe(case, scenario), {}

    class TestLaunchedNode(unittest.TestCase):
        def setUp(self) -> None:
            self.probe = Probe("launch_test_probe")

        def tearDown(self) -> None:
            self.probe.close()

        def test_node(self, proc_output: Any, scenario: str) -> None:
            if scenario == "broken":
                # The failed configure is logged by the node and reported by launch_ros; the node stays put.
                proc_output.assertWaitFor(case.failure_log, timeout=WAIT_S)
                self.assertEqual(self.probe.state(case.node), "unconfigured")
                return
            self.assertEqual(self.probe.wait_for_state(case.node, "active"), "active")
            got = self.probe.parameters(case.node, sorted(case.expect_params))
            self.assertEqual(got, case.expect_params)
            msg_type, topic = case.result
            publish = case.stimulus(self.probe.node)
            result = self.probe.wait_for_result(msg_type, topic, publish)
            if case.check is not None:
                case.check(result)
            for msg_type, topic, latched, accept in case.also:
                self.probe.wait_for_result(msg_type, topic, publish, latched=latched, accept=accept)
            if case.autostart_once:
                # A supervisor takes the node down and configures it again: autostart must not activate it
                # (its handler used to fire on every configure; the supervisor's own activate then failed).
                for label in ("deactivate", "cleanup", "configure"):
                    self.assertTrue(self.probe.transition(case.node, label), label)
                time.sleep(2.0)  # what launch would need to emit an activate (well under 1 s when it did)
                self.assertEqual(self.probe.state(case.node), "inactive")
                self.assertTrue(self.probe.transition(case.node, "activate"))

    @launch_testing.post_shutdown_test()
    class TestShutdown(unittest.TestCase):
        def test_every_process_exited_cleanly(self, proc_info: Any) -> None:
            launch_testing.asserts.assertExitCodes(proc_info)

    return generate_test_description, TestLaunchedNode, TestShutdown
