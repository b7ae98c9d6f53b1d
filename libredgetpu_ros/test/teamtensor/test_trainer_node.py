"""The online-learning loop across processes: samples -> trainer node -> tt-worker (UDP) -> set_weights.

Four processes: ``tt-worker``, the control node (CPU twin of the Dense(256) template, 3 states -> 2
commands), the trainer node, and this test, which drives both lifecycles over DDS, streams samples of
``y = W·x + b`` to the trainer and a fixed state to the control node. Before training the control node's
command is zero; after the trainer has pushed the worker's weights it is ``W·x + b`` within the template's
quantization and the training error, and the weights the control node reports equal the trained weights the
trainer serves (to one int8 step).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from .._helpers import load_helper
from .._helpers import spin_until as spin_executor_until

pytestmark = [pytest.mark.timeout(120)]

TESTS = Path(__file__).resolve().parents[1]
harness = load_helper(TESTS / "ros" / "_control_harness.py")
loop = load_helper(Path(__file__).resolve().parent / "_trainer_loop.py")
T_CONFIGURE, T_ACTIVATE, CTL, TRAINER = loop.T_CONFIGURE, loop.T_ACTIVATE, loop.CTL, loop.TRAINER
STATE = np.array([0.6, -0.4, 0.8], np.float32)
COMMAND_TOLERANCE = 0.03  # |command - (W·x + b)|: output step 0.019 + input rounding + training error
WEIGHT_TOLERANCE = 0.003  # trained vs true weights (the template's weights span only about ±0.1)
TRAINED_MSE = 1e-4


@pytest.mark.ros
def test_trainer_pushes_trained_weights_into_a_running_control_node(ros_env):
    from std_msgs.msg import Float32MultiArray

    from libredgetpu_ros_interfaces.srv import GetWeights

    ctl = loop.start_loop(ros_env, input_size=3)
    try:
        node = ctl.node
        trainer_weights = node.create_client(GetWeights, f"{TRAINER}/get_weights")
        metrics: list[dict[str, float]] = []

        def on_metrics(msg) -> None:
            names = msg.layout.dim[0].label.split(",")
            metrics.append(dict(zip(names, msg.data, strict=True)))

        node.create_subscription(Float32MultiArray, f"{TRAINER}/metrics", on_metrics, 10)
        samples_pub = node.create_publisher(Float32MultiArray, "/tt/samples", 100)
        state_pub = node.create_publisher(Float32MultiArray, "/ctl/state", 10)

        assert ctl.transition(T_CONFIGURE) and ctl.transition(T_ACTIVATE)
        first = ctl.get_weights()
        w_max = np.frombuffer(first.weight_max, np.float32)
        rng = np.random.default_rng(5)
        w_true = (rng.uniform(-0.9, 0.9, size=(2, 3)) * w_max[:, None]).astype(np.float32)
        b_true = np.array([0.2, -0.1], np.float32)
        loop.trainer_transitions(ctl)

        def publish_state() -> None:
            msg = Float32MultiArray()
            msg.data = STATE.tolist()
            state_pub.publish(msg)

        publish_state()
        ctl.wait_for(lambda: len(ctl.recorded.plain_commands) > 0, 20.0, "a command before training")
        before = ctl.recorded.plain_commands[-1]
        assert np.abs(before).max() < 1e-6, before  # zero weights, no bias yet

        expected = w_true @ STATE + b_true
        w_min = np.frombuffer(first.weight_min, np.float32)
        step = float((w_max - w_min).max()) / 255.0  # one int8 step of the template's weights
        deadline = time.monotonic() + 60.0
        sample = Float32MultiArray()

        def control_weights():
            resp = ctl.get_weights()
            return resp.version, np.frombuffer(resp.data, np.float32).reshape(resp.rows, resp.cols)

        while True:
            for _ in range(64):  # ~4 batches of samples per round
                x = rng.uniform(-1.0, 1.0, 3).astype(np.float32)
                sample.data = np.concatenate([x, w_true @ x + b_true]).tolist()
                samples_pub.publish(sample)
            publish_state()
            time.sleep(0.05)
            version, w_control = control_weights()
            got = ctl.recorded.plain_commands[-1]
            trained = ctl.call(trainer_weights, GetWeights.Request())
            assert time.monotonic() < deadline, f"within 60 s: get_weights says {trained.message}"
            if not trained.success:  # answered at once: the first read of the weights is still out
                assert "not read from the worker yet" in trained.message, trained.message
                continue
            w_trained = np.frombuffer(trained.data, np.float32).reshape(trained.rows, trained.cols)
            b_trained = np.frombuffer(trained.bias, np.float32)
            # Done when training has converged, the control node holds those weights (from a push: training
            # may have moved them a little since) and its command follows.
            if (version > first.version and np.abs(w_trained - w_true).max() < WEIGHT_TOLERANCE
                    and np.abs(b_trained - b_true).max() < WEIGHT_TOLERANCE
                    and np.abs(w_control - w_trained).max() < step + WEIGHT_TOLERANCE
                    and np.abs(got - expected).max() < COMMAND_TOLERANCE):
                break
            assert time.monotonic() < deadline, (
                f"within 60 s: command {got} vs {expected}, trained {w_trained} vs {w_true}, "
                f"control {w_control}")
        assert np.abs(before - got).max() > 0.1  # the command really changed
        ctl.wait_for(lambda: metrics and metrics[-1].get("mse", 1.0) < TRAINED_MSE, 20.0,
                     f"published mse < {TRAINED_MSE}")
        assert metrics[-1]["batches_sent"] >= 1 and metrics[-1]["batches_failed"] == 0
    finally:
        ctl.close()


@pytest.mark.ros
def test_weights_of_another_shape_are_not_pushed(ros_env):
    from std_msgs.msg import Float32MultiArray

    ctl = loop.start_loop(ros_env, input_size=4)  # the controller takes 3 states
    try:
        samples_pub = ctl.node.create_publisher(Float32MultiArray, "/tt/samples", 100)
        assert ctl.transition(T_CONFIGURE) and ctl.transition(T_ACTIVATE)
        version = ctl.get_weights().version
        loop.trainer_transitions(ctl)
        log = ros_env.work_dir / "trainer_node.log"
        rng = np.random.default_rng(6)
        deadline = time.monotonic() + 30.0
        sample = Float32MultiArray()
        while "are not pushed" not in log.read_text():
            for _ in range(32):
                sample.data = rng.uniform(-1.0, 1.0, 6).astype(np.float32).tolist()
                samples_pub.publish(sample)
            time.sleep(0.05)
            assert time.monotonic() < deadline, "the trainer never reported the shape mismatch"
        time.sleep(1.2)  # two more push periods
        assert ctl.get_weights().version == version
        assert "are 2×4 (output_size×input_size) but the controller is 2×3" in log.read_text()
    finally:
        ctl.close()


@pytest.mark.ros
def test_configure_fails_cleanly_without_a_worker(ros_env):
    import socket

    from lifecycle_msgs.srv import ChangeState, GetState

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # a port nobody answers on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.trainer.node", "--ros-args", "-r", "__ns:=/tt",
                   "-p", f"worker_port:={port}", "-p", "connect_timeout:=0.5"], "trainer_node")
    node, executor = ros_env.probe("trainer_probe")
    change = node.create_client(ChangeState, f"{TRAINER}/change_state")
    get = node.create_client(GetState, f"{TRAINER}/get_state")
    assert change.wait_for_service(timeout_sec=20.0)
    req = ChangeState.Request()
    req.transition.id = T_CONFIGURE
    future = change.call_async(req)
    executor.spin_until_future_complete(future, timeout_sec=20.0)
    assert future.done() and future.result().success is False
    future = get.call_async(GetState.Request())
    executor.spin_until_future_complete(future, timeout_sec=10.0)
    assert future.result().current_state.label == "unconfigured"
    log = (ros_env.work_dir / "trainer_node.log").read_text()
    assert "configure failed: DeviceTimeoutError" in log and "did not answer Hello" in log
    assert f"libredgetpu-ros tt-worker --host 127.0.0.1 --port {port}" in log  # what to do about it


def test_config_file_and_docs_match_the_parameter_table_and_the_launch_file_compiles():
    import py_compile

    import yaml
    from libredgetpu_ros.ros.trainer.node import PARAM_TABLE

    package = TESTS.parent
    doc = yaml.safe_load((package / "config" / "trainer.yaml").read_text())
    assert doc["/**"]["ros__parameters"] == PARAM_TABLE.defaults()
    assert PARAM_TABLE.markdown_table().strip() in (package.parent / "docs" / "teamtensor.md").read_text()
    py_compile.compile(str(package / "launch" / "trainer.launch.py"), doraise=True)


def _call_timed(executor, client, request) -> tuple[float, object]:
    """(seconds until the answer, the answer) for one service call; 5 s bound."""
    t0 = time.monotonic()
    future = client.call_async(request)
    executor.spin_until_future_complete(future, timeout_sec=5.0)
    assert future.done(), f"no answer from {client.srv_name} within 5 s"
    return time.monotonic() - t0, future.result()


RESPONSIVE_S = 0.5  # a lifecycle, parameter or weights request must be answered within this while stalled


@pytest.mark.ros
def test_executor_answers_while_the_worker_is_stopped(ros_env):
    """SIGSTOP the worker mid-training: the trainer's sender retransmits a batch and its reads time out, yet
    get_state, get_parameters and get_weights are answered within 0.5 s throughout (the old node waited up
    to 5 s in the metrics timer and in get_weights); diagnostics say the worker is busy; after SIGCONT the
    metrics resume."""
    import os
    import signal

    from diagnostic_msgs.msg import DiagnosticArray
    from lifecycle_msgs.srv import ChangeState, GetState
    from rcl_interfaces.srv import GetParameters
    from std_msgs.msg import Float32MultiArray

    from libredgetpu_ros_interfaces.srv import GetWeights

    worker, port = loop.spawn_worker(ros_env)
    ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.trainer.node", "--ros-args", "-r", "__ns:=/tt",
                   "-p", f"worker_port:={port}", "-p", "batch_size:=8", "-p", "push_period:=0.0",
                   "-p", "metrics_period:=0.2", "-p", "read_timeout:=1.0", "-p", "retransmit_timeout:=0.02"],
                  "trainer_node")
    node, executor = ros_env.probe("trainer_probe")
    change = node.create_client(ChangeState, f"{TRAINER}/change_state")
    clients = {"get_state": (node.create_client(GetState, f"{TRAINER}/get_state"), GetState.Request()),
               "get_parameters": (node.create_client(GetParameters, f"{TRAINER}/get_parameters"),
                                  GetParameters.Request(names=["batch_size"])),
               "get_weights": (node.create_client(GetWeights, f"{TRAINER}/get_weights"),
                               GetWeights.Request())}
    metrics: list[dict[str, float]] = []
    node.create_subscription(Float32MultiArray, f"{TRAINER}/metrics",
                             lambda m: metrics.append(dict(zip(m.layout.dim[0].label.split(","), m.data,
                                                               strict=True))), 10)
    statuses: list[tuple[int, str]] = []
    node.create_subscription(DiagnosticArray, "/diagnostics",
                             lambda m: statuses.extend((s.level[0], s.message) for s in m.status), 50)
    samples = node.create_publisher(Float32MultiArray, "/tt/samples", 100)
    rng = np.random.default_rng(7)

    def publish_samples(count: int) -> None:
        for _ in range(count):
            samples.publish(Float32MultiArray(data=rng.uniform(-1.0, 1.0, 5).astype(np.float32).tolist()))

    assert change.wait_for_service(timeout_sec=20.0)
    for transition in (T_CONFIGURE, T_ACTIVATE):
        req = ChangeState.Request()
        req.transition.id = transition
        assert _call_timed(executor, change, req)[1].success
    for client, _ in clients.values():
        assert client.wait_for_service(timeout_sec=20.0)
    deadline = time.monotonic() + 20.0
    while not metrics:  # training works before the stall
        publish_samples(16)
        executor.spin_once(timeout_sec=0.1)
        assert time.monotonic() < deadline, "no ~/metrics within 20 s"
    weights_ok = _call_timed(executor, *clients["get_weights"])[1]
    assert weights_ok.success, weights_ok.message

    os.kill(worker.pid, signal.SIGSTOP)
    try:
        publish_samples(16)  # two batches: the sender retransmits the first to a stopped worker
        worst: dict[str, float] = dict.fromkeys(clients, 0.0)
        stalled_at = len(statuses)
        end = time.monotonic() + 3.0  # three read timeouts
        while time.monotonic() < end:
            for name, (client, request) in clients.items():
                latency, answer = _call_timed(executor, client, request)
                worst[name] = max(worst[name], latency)
                if name == "get_weights":  # the weights read before the stall, with their age
                    assert answer.success and "read from the worker" in answer.message, answer.message
            executor.spin_once(timeout_sec=0.1)
        print(f"slowest answers while the worker is stopped (s): {worst}")  # figure for docs (pytest -s)
        assert max(worst.values()) < RESPONSIVE_S, worst
        warned = [m for level, m in statuses[stalled_at:] if level == 1]
        assert any("worker busy or silent" in m or "worker reads fail" in m for m in warned), statuses[-5:]
        log = (ros_env.work_dir / "trainer_node.log").read_text()
        assert "reading metrics/weights from the worker failed: TimeoutError" in log
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    sent = metrics[-1]["batches_sent"]
    deadline = time.monotonic() + 20.0
    while metrics[-1]["batches_sent"] < sent + 2:  # the stalled batches arrive, metrics resume
        executor.spin_once(timeout_sec=0.1)
        assert time.monotonic() < deadline, f"metrics did not resume after SIGCONT: {metrics[-1]}"
    assert metrics[-1]["batches_failed"] == 0


@pytest.mark.ros
def test_a_session_thread_fault_is_logged_reported_and_ends_in_error_processing(ros_env):
    """An exception that is no protocol outcome (injected into the batch sender) is not silent: diagnostics
    ERROR naming it, the node goes through on_error to unconfigured, and configure works again. While
    inactive: reported at once, and activate goes through on_error."""
    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import Float32MultiArray

    with loop.in_process_trainer(ros_env, "fault_probe", batch_size=4) as rig:
        trainer, executor = rig.trainer, rig.executor
        errors: list[str] = []
        rig.probe.create_subscription(DiagnosticArray, "/diagnostics", lambda m: errors.extend(
            s.message for s in m.status if s.level[0] == 2), 10)
        samples = rig.probe.create_publisher(Float32MultiArray, "/tt/samples", 100)

        def state() -> str:
            return trainer._state_machine.current_state[1]

        trainer.trigger_configure()
        trainer.trigger_activate()
        assert state() == "active"

        async def broken_send(*args, **kwargs):
            raise RuntimeError("injected sender fault")

        trainer._session._source.send_batch = broken_send
        deadline = time.monotonic() + 20.0
        while state() != "unconfigured" or not errors:
            samples.publish(Float32MultiArray(data=[0.1, 0.2, 0.3, 0.4, 0.5]))
            executor.spin_once(timeout_sec=0.05)
            assert time.monotonic() < deadline, (state(), errors)
        assert any("session thread failed: RuntimeError: injected sender fault" in e for e in errors), errors
        assert trainer._session is None
        trainer.trigger_configure()
        assert state() == "inactive"  # recoverable: a new session

        errors.clear()  # the same fault while inactive: reported at once, activate goes through on_error
        trainer._session._source.send_batch = broken_send
        trainer._session.submit(np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32))
        while not errors:
            executor.spin_once(timeout_sec=0.05)
            assert time.monotonic() < deadline, "no ERROR diagnostics for a fault while inactive"
        assert state() == "inactive" and "injected sender fault" in errors[0]
        trainer.trigger_activate()
        assert state() == "unconfigured" and trainer._session is None


@pytest.mark.ros
def test_default_set_weights_service_resolves_in_the_trainer_namespace(ros_env):
    """Issue 22: the default set_weights service is relative, so a trainer launched with a namespace reaches
    the control node launched with the same one (it was '/control_node/set_weights': root namespace only)."""
    from libredgetpu_ros.ros.trainer.params import PARAM_TABLE
    from libredgetpu_ros.ros.trainer.push import WeightPusher
    from rclpy.node import Node

    default = PARAM_TABLE.defaults()["set_weights_service"]
    node = Node("trainer_node", namespace="arm", context=ros_env.init_rclpy())
    try:
        pusher = WeightPusher(node, default, "", (2, 3), {})
        clients = {name for name, _ in node.get_client_names_and_types_by_node("trainer_node", "/arm")}
        assert {"/arm/control_node/set_weights", "/arm/control_node/get_weights"} <= clients, clients
        pusher.destroy()
    finally:
        node.destroy_node()


@pytest.mark.ros
def test_counters_and_the_wrong_size_warning_start_again_at_configure(ros_env):
    """Configure again (after a cleanup, e.g. with another sample size): diagnostics count this session's
    samples, and its first wrong-size sample is warned about. Before, the counters ran on from the previous
    configuration, and the wrong-size warning (on the first one counted) stayed silent for the new one."""
    from std_msgs.msg import Float32MultiArray

    with loop.in_process_trainer(ros_env, "counter_probe", batch_size=4) as rig:
        trainer, executor = rig.trainer, rig.executor
        samples = rig.probe.create_publisher(Float32MultiArray, "/tt/samples", 100)
        warnings: list[str] = []

        class Logger:
            def __getattr__(self, name: str):
                return warnings.append if name == "warning" else (lambda *a, **k: None)

        def feed(data: list[float], counter: str, count: int) -> None:
            deadline = time.monotonic() + 20.0
            while trainer.counters[counter] < count:
                samples.publish(Float32MultiArray(data=data))
                executor.spin_once(timeout_sec=0.05)
                assert time.monotonic() < deadline, trainer.counters

        trainer.get_logger = Logger  # type: ignore[method-assign]
        trainer.trigger_configure()
        trainer.trigger_activate()
        feed([0.1] * 5, "samples", 1)
        feed([0.1] * 3, "wrong_size", 1)
        assert sum("sample of 3 values dropped" in w for w in warnings) == 1
        trainer.trigger_deactivate()
        trainer.trigger_cleanup()
        trainer.trigger_configure()
        trainer.trigger_activate()
        assert trainer._state_machine.current_state[1] == "active"
        assert trainer.counters["samples"] == 0 and trainer.counters["wrong_size"] == 0, trainer.counters
        feed([0.1] * 3, "wrong_size", 1)  # this configuration's first wrong-size sample: warned about
        assert sum("sample of 3 values dropped" in w for w in warnings) == 2, warnings


@pytest.mark.ros
def test_a_non_finite_sample_is_dropped_not_the_batch(ros_env):
    """A NaN sample among good ones: dropped and counted (``non_finite``, one WARN); the batch goes out with
    four good samples and the worker trains on it. Before, the NaN went into the batch: the worker refused
    the whole step ("diverged", in its own log only) while the trainer counted every sample sent and said
    "training": the good samples were lost and nothing said why."""
    from std_msgs.msg import Float32MultiArray

    with loop.in_process_trainer(ros_env, "nan_probe", batch_size=4, metrics_period=0.2) as rig:
        trainer, executor = rig.trainer, rig.executor
        samples = rig.probe.create_publisher(Float32MultiArray, "/tt/samples", 100)

        def spin_until(what: str, done) -> None:
            spin_executor_until(executor, what, done, detail=lambda: trainer.counters)

        trainer.trigger_configure()
        trainer.trigger_activate()
        spin_until("the subscription", lambda: samples.get_subscription_count() > 0)
        good = [0.5, -0.5, 0.25, 1.0, -1.0]
        for data in (good, good, [0.5, float("nan"), 0.25, 1.0, -1.0], good, good):
            samples.publish(Float32MultiArray(data=data))
        spin_until("five samples taken", lambda: trainer.counters["samples"] + trainer.counters.get(
            "non_finite", 0) >= 5)
        assert trainer.counters["non_finite"] == 1 and trainer.counters["samples"] == 4, trainer.counters
        spin_until("weights of a trained batch", lambda: trainer._trained is not None
                   and trainer._trained.version >= 1)
        assert np.abs(trainer._trained.weights).max() > 0, "the worker did not train on the batch"
