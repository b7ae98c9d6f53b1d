"""The reservoir node as its own process over real (localhost-only) DDS, driven from outside: this process
publishes JointState states and supervises the lifecycle and services; a bag replayed by ``replay`` (a third
process) gives exactly the predictions of the node's reservoir run offline over the bag's states."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

supervision = load_helper(Path(__file__).resolve().parents[1] / "ros" / "_lifecycle_supervisor.py")
rigs = load_helper(Path(__file__).resolve().parent / "_reservoir_rigs.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]

WAIT_S, JOINTS = rigs.WAIT_S, rigs.JOINTS
_series, _joint_bag, _wait_done = rigs.series, rigs.joint_bag, rigs.wait_done


class Peer(supervision.LifecycleSupervisor):
    """Lifecycle supervisor, state publisher and prediction reader for one node."""

    def __init__(self, ros_env: Any, node: str) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState

        super().__init__(ros_env, "test_reservoir_peer", f"/{node}", WAIT_S)
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.states = self.node.create_publisher(JointState, "joints", qos)
        self.predictions: list[Any] = []
        self.node.create_subscription(JointState, f"/{node}/prediction", self.predictions.append, qos)

    def wait_subscribed(self) -> None:
        self.wait_for("the node's state subscription", lambda: self.states.get_subscription_count() > 0)

    def publish(self, values: np.ndarray, stamp_ns: int, names: list[str] | None = None) -> None:
        from sensor_msgs.msg import JointState

        msg = JointState(name=list(reversed(JOINTS)) if names is None else names,
                         position=[float(v) for v in (values[::-1] if names is None else values)])
        msg.header.frame_id = "arm"
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        self.states.publish(msg)


def _params(tmp: Path, **params: Any) -> Path:
    import yaml

    path = tmp / "reservoir.yaml"
    base = {"backend": "cpu", "template": 256, "state_size": 2, "joint_names": JOINTS, "seed": 5,
            "washout": 50, "diagnostics_period": 0.3, "state_topic": "joints", "state_queue": 1000}
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": {**base, **params}}}))
    return path


def _spawn(ros_env: Any, params: Path, node: str = "reservoir") -> None:
    ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.reservoir.node", "--ros-args", "-r",
                   f"__node:={node}", "-r", "joints:=/joints", "--params-file", str(params)], node)


def test_configure_names_the_kernels_it_compiled_once_and_never_from_a_warm_cache(ros_env,
                                                                                   tmp_path: Path) -> None:
    """An empty kernel cache folder (a robot's first boot): configure compiles the engine's and the
    reservoir's kernels and says so in one INFO line with the command that pre-builds them; the next node's
    configure on the same folder loads them and says nothing."""
    ros_env.env["LIBREDGETPU_ROS_NUMBA_CACHE"] = str(tmp_path / "numba_cache")
    ros_env.env.pop("NUMBA_CACHE_DIR", None)
    params = _params(tmp_path)
    lines = {}
    for node in ("reservoir", "reservoir_warm"):
        _spawn(ros_env, params, node)
        peer = Peer(ros_env, node)
        assert peer.transition("configure")
        log = ros_env.work_dir / f"{node}.log"

        def configured(log: Path = log) -> str:
            text = log.read_text()
            return text if "configured:" in text else ""

        text = peer.wait_for(f"{node}'s configured line", configured)
        lines[node] = [line for line in text.splitlines() if "libredgetpu-ros kernels build" in line]
    [cold] = lines["reservoir"]
    assert "INFO" in cold and "compiled the numba kernels of matmul, reservoir in" in cold, cold
    assert str(tmp_path / "numba_cache") in cold
    assert lines["reservoir_warm"] == []


def test_fit_predict_bad_states_and_readout_files(ros_env, tmp_path: Path) -> None:
    from diagnostic_msgs.msg import DiagnosticArray

    from libredgetpu_ros_interfaces.srv import FilePath, FitReadout

    _spawn(ros_env, _params(tmp_path))
    peer = Peer(ros_env, "reservoir")
    diags: list[Any] = []
    peer.node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 10)
    assert peer.transition("configure") and peer.transition("activate") and peer.state() == "active"
    peer.wait_subscribed()
    # Too early: two states are not a fit, the node says so and keeps running.
    early = peer.service(FitReadout, "fit", samples=0)
    assert not early.success and "at least 2 states" in early.message

    series = _series(700)
    for i, x in enumerate(series[:400]):
        peer.publish(x, 1_000_000_000 + i)
    # NaN/Inf and a missing joint: dropped and counted, the node runs on; an extra joint is ignored.
    peer.publish(np.array([np.nan, 0.0]), 5)
    peer.publish(np.array([0.0, np.inf]), 6)
    peer.publish(np.array([0.1, 0.2, 0.3]), 7, names=["shoulder", "elbow", "wrist"])
    peer.publish(np.array([0.1]), 8, names=["shoulder"])
    # A finite spike beyond the reservoir's MAX_MAGNITUDE (a sensor fault): dropped and counted too (it once
    # escaped the state callback as InputError and took the node through on_error to unconfigured).
    peer.publish(np.array([2e6, 0.0]), 9)

    def dropped() -> Any:
        for array in diags:
            for status in array.status:
                values = {kv.key: kv.value for kv in status.values}
                if values.get("states") == "405":
                    return values
        return None

    values = peer.wait_for("diagnostics counting 405 states", dropped)
    assert values["dropped_nan_inf"] == "2" and values["dropped_missing_joints"] == "1"
    assert values["dropped_out_of_range"] == "1" and peer.state() == "active"
    assert values["buffered"] == "401"
    fit = peer.service(FitReadout, "fit", samples=400)  # the last 400: the good series, then the extra joint
    assert fit.success and fit.samples_used == 399 - 50 and fit.train_nrmse < 0.1, fit.message

    # Predictions now: one per state, the input's header, the next state within NRMSE 0.1.
    start = len(peer.predictions)
    for i, x in enumerate(series[400:600]):
        peer.publish(x, 2_000_000_000 + i)
    got = peer.wait_for("200 predictions", lambda: len(peer.predictions) >= start + 200 and peer.predictions)
    preds = got[start:start + 200]
    assert [p.header.stamp.nanosec for p in preds] == list(range(200)) and preds[0].header.frame_id == "arm"
    assert preds[0].name == JOINTS
    predicted = np.array([p.position for p in preds])
    # Scored after a washout: the extra-joint state (0.1, 0.2) before them broke the series' continuity.
    error = np.sqrt(np.mean((predicted[50:-1] - series[451:600]) ** 2)) / series.std()
    print(f"live one-step-ahead NRMSE {error:.4f}")
    assert error < 0.1

    path = tmp_path / "readout.npz"
    assert peer.service(FilePath, "save_readout", path=str(path)).success and path.is_file()
    refused = peer.service(FilePath, "load_readout", path=str(tmp_path / "missing.npz"))
    assert not refused.success and "readout unchanged" in refused.message
    assert peer.service(FilePath, "load_readout", path=str(path)).success
    assert peer.state() == "active"


def test_bag_replayed_equals_offline(ros_env, tmp_path: Path) -> None:
    """States in a bag replayed into the node (its own process, ``replay`` a third) give exactly the
    predictions of the node's reservoir (same parameters and readout) run offline over the bag's states, after
    the ``washout`` (50) states every activate holds back."""
    from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig
    from libredgetpu_ros.ros.reservoir.states import read_bag_states

    from libredgetpu_ros_interfaces.srv import FilePath, FitReadout

    series = _series(900)
    bag = _joint_bag(tmp_path / "joints_bag", series[400:], start_ns=3_000_000_000)

    # The readout both sides use: fitted offline on the first 400 states, saved, loaded by the node.
    from libredgetpu_ros.matmul import MatMulEngine

    cfg = {"input_dim": 2, "seed": 5, "washout": 50}
    readout = tmp_path / "readout.npz"
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        offline = ReservoirComputer(engine, ReservoirConfig(**cfg))
        offline.fit(series[:399], series[1:400])
        offline.save_readout(readout)
        states, skipped = read_bag_states(bag, "/joints", "joint_state", "position", None, 2)
        assert skipped == 0 and len(states) == 500
        expected = np.array([offline.step_predict(x) for x in states])

    _spawn(ros_env, _params(tmp_path, readout=str(readout)))
    peer = Peer(ros_env, "reservoir")
    assert peer.transition("configure") and peer.transition("activate")
    replay = ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.cli.main", "replay", str(bag), "--rate",
                            "1", "--wait-subscribers", "1", "--wait-timeout", str(WAIT_S)], "replay")
    # The first 50 (the washout after activate) give none: the rest exactly the offline run's.
    got = peer.wait_for("450 predictions", lambda: len(peer.predictions) >= 450 and peer.predictions)
    assert replay.wait(timeout=WAIT_S) == 0
    peer.spin_for(0.3)
    live = np.array([p.position for p in peer.predictions])
    assert [p.header.stamp.nanosec for p in got[:3]] == [500_000_000, 510_000_000, 520_000_000]
    assert np.array_equal(live, expected[50:]), np.max(np.abs(live - expected[50:]))
    assert peer.service(FilePath, "save_readout", path=str(tmp_path / "again.npz")).success
    # ~/fit from the bag itself (its 500 states, the node's own input topic) and a bag without that topic.
    from_bag = peer.service(FitReadout, "fit", bag=str(bag), topic="")
    assert from_bag.success and from_bag.samples_used == 499 - 50, from_bag.message
    wrong = peer.service(FitReadout, "fit", bag=str(bag), topic="/elsewhere")
    assert not wrong.success and "has no topic '/elsewhere'" in wrong.message


def test_a_long_fit_leaves_the_executor_answering(ros_env, tmp_path: Path) -> None:
    """A fit on a bag of 12,000 states with a Dense(1024) reservoir takes seconds (reading the bag, driving
    the reservoir, the ridge solve): it runs off the executor, so lifecycle ``get_state`` and the other
    services are answered meanwhile (before, all of them waited for the fit: the same executor), a second
    fit is refused while one runs, and the fit's answer comes when it is done."""
    from libredgetpu_ros_interfaces.srv import FilePath, FitReadout

    bag = _joint_bag(tmp_path / "long_bag", _series(12_000))
    _spawn(ros_env, _params(tmp_path, template=1024))
    peer = Peer(ros_env, "reservoir")
    peer.wait_s = 120.0  # configure makes a 1024-unit reservoir (spectral radius): slow on a loaded machine
    assert peer.transition("configure") and peer.transition("activate")
    peer.wait_s = WAIT_S
    fit_client = peer.node.create_client(FitReadout, "/reservoir/fit")
    assert fit_client.wait_for_service(timeout_sec=WAIT_S)
    fit = fit_client.call_async(FitReadout.Request(bag=str(bag), topic="/joints"))
    peer.spin_for(0.3)  # the request reaches the node
    assert peer.state() == "active" and not fit.done(), "get_state waited for the fit"
    saved = peer.service(FilePath, "save_readout", path=str(tmp_path / "none.npz"))
    assert not saved.success and "no readout to save" in saved.message and not fit.done()
    again = peer.service(FitReadout, "fit", bag=str(bag), topic="/joints")
    assert not again.success and "a fit is running" in again.message
    peer.wait_for("the fit's answer", fit.done, timeout=240)
    answer = fit.result()
    assert answer.success and answer.samples_used == 11_999 - 50, answer.message
    assert peer.service(FilePath, "save_readout", path=str(tmp_path / "fitted.npz")).success


def test_a_fit_too_large_for_memory_is_refused_before_allocating(ros_env, monkeypatch) -> None:
    """In process: a fit whose states and features would exceed the node's budget (``MAX_FIT_BYTES``,
    lowered here) is refused with the numbers, the readout unchanged, before the reservoir is driven; fewer
    samples fit. Before, the fit allocated (2N + M + 1) * 8 bytes a step whatever the count: a long bag
    (an hour at 100 Hz, N = 1024: 5.9 GB) got the node killed by the OOM killer."""
    import libredgetpu_ros.ros.reservoir.node as node_module
    from libredgetpu_ros.errors import InputError
    from rclpy.parameter import Parameter
    from std_msgs.msg import Float64MultiArray

    from libredgetpu_ros_interfaces.srv import FitReadout

    node = node_module.ReservoirNode("reservoir_budget", context=ros_env.init_rclpy(), parameter_overrides=[
        Parameter("backend", value="cpu"), Parameter("template", value=256), Parameter("state_size", value=2),
        Parameter("state_type", value="float64_multi_array"), Parameter("washout", value=10)])
    try:
        node.trigger_configure()
        for x in _series(600):
            node._on_state(Float64MultiArray(data=[float(v) for v in x]))
        budget = 400 * (2 * 256 + 2 + 1) * 8  # 400 steps
        monkeypatch.setattr(node_module, "MAX_FIT_BYTES", budget, raising=False)
        driven: list[int] = []
        real_fit = node._rc.fit
        monkeypatch.setattr(node._rc, "fit",
                            lambda u, y, check=None: driven.append(len(u)) or real_fit(u, y, check=check))
        with pytest.raises(InputError, match=r"600 states .* at most 400 states"):
            node._fit(FitReadout.Request(samples=0), "", node.cfg, node._rc)
        assert driven == [] and node._rc.readout is None
        report, _ = node._fit(FitReadout.Request(samples=400), "", node.cfg, node._rc)
        assert driven == [399] and report.samples == 399 - 10
    finally:
        node.teardown()
        node.destroy_node()


def test_cleanup_cancels_a_fit_reading_a_slow_bag(ros_env, tmp_path: Path, monkeypatch) -> None:
    """In process, the node spun on an executor thread: a ``~/fit`` reading a bag slowly (each message held
    20 ms through the reader's ``state_vector`` seam: 3,000 messages, a minute) is cancelled by cleanup, which
    returns promptly; the fit answers ``cancelled by cleanup`` and the previous readout is unchanged. Before,
    cleanup waited for the whole read and solve (no time limit: a huge bag or a hung mount stalled cleanup
    and shutdown forever), and the fit's answer was lost with the service cleanup destroyed."""
    import threading
    import time

    slow = threading.Event()
    slow.set()
    rig = rigs.SpunFitRig(ros_env, tmp_path, monkeypatch, "reservoir_cancel",
                      lambda: time.sleep(0.02) if slow.is_set() else None)
    try:
        answer = rig.fit_from_bag()
        assert rig.cleanup_within(10.0), "cleanup waited for the fit reading the bag"
        assert _wait_done(answer), "the cancelled fit never answered"
        result = answer.result()
        assert not result.success and "cancelled by cleanup" in result.message, result.message
        assert rig.rc.readout is rig.before
        assert len(rig.read) < 3000
    finally:
        slow.clear()  # the old code: let the read finish so teardown returns
        rig.close()


def test_a_fit_run_keeps_the_first_cancel_across_threads() -> None:
    """FitRun's cancel is a threading.Event set under a lock: of many transitions cancelling at once from
    their threads, the first one's name is the one every reader sees, and check() raises with it."""
    import threading

    from libredgetpu_ros.ros.reservoir.fit_run import FitCancelled, FitRun

    run = FitRun()
    run.check()  # no cancel yet
    assert run.cancelled_by == ""
    start = threading.Barrier(8)

    def cancel(name: str) -> None:
        start.wait()
        run.cancel(name)

    threads = [threading.Thread(target=cancel, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first = run.cancelled_by
    assert first in {f"t{i}" for i in range(8)}
    run.cancel("shutdown")
    with pytest.raises(FitCancelled, match=f"cancelled by {first}$"):
        run.check()
    assert run.cancelled_by == first


def test_cleanup_cancels_a_fit_while_it_drives_the_reservoir(ros_env, tmp_path: Path, monkeypatch) -> None:
    """In process: a ``~/fit`` past its bag read, driving the reservoir over the 3,000 states (each step held
    2 ms through the reservoir's ``_advance``: 6 s), is cancelled by cleanup, which returns promptly; the fit
    answers ``cancelled by cleanup``, the previous readout unchanged. Before, the cancel was checked only
    before the whole drive and solve: cleanup waited ``deactivate_timeout`` (10 s) and went on without it."""
    import threading
    import time

    from libredgetpu_ros_interfaces.srv import FitReadout

    rig = rigs.SpunFitRig(ros_env, tmp_path, monkeypatch, "reservoir_drive_cancel", lambda: None)
    steps: list[int] = []
    real_advance = rig.rc._advance
    slow = threading.Event()
    slow.set()

    def slow_advance(x: np.ndarray, u: np.ndarray) -> np.ndarray:
        steps.append(1)
        if slow.is_set():
            time.sleep(0.002)
        return real_advance(x, u)

    monkeypatch.setattr(rig.rc, "_advance", slow_advance)
    try:
        answer = rig.client.call_async(FitReadout.Request(bag=str(rig.bag), topic="/joints"))
        deadline = time.monotonic() + WAIT_S
        while len(steps) < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(steps) >= 10 and not answer.done(), "the fit did not start driving the reservoir"
        assert rig.cleanup_within(5.0), "cleanup waited for the fit driving the reservoir"
        assert _wait_done(answer), "the cancelled fit never answered"
        result = answer.result()
        assert not result.success and "cancelled by cleanup" in result.message, result.message
        assert rig.rc.readout is rig.before
        assert len(steps) < 2999
    finally:
        slow.clear()  # the old code: let the drive finish so teardown returns
        rig.close()


def test_cleanup_leaves_a_fit_stuck_in_a_read_its_engine(ros_env, tmp_path: Path, monkeypatch) -> None:
    """A fit stuck in one message's read (a hung mount: the seam blocks until released) never reaches its
    next cancel check: cleanup waits ``deactivate_timeout`` (1 s) for it, then goes on, the engine left
    open under the fit; released, the fit answers ``cancelled by cleanup`` (checked before its next message)
    and closes the engine itself; the previous readout is unchanged."""
    import threading

    release = threading.Event()
    rig = rigs.SpunFitRig(ros_env, tmp_path, monkeypatch, "reservoir_stuck", lambda: release.wait(WAIT_S),
                      deactivate_timeout=1.0)
    closed: list[int] = []
    real_close = rig.rc.engine.close
    monkeypatch.setattr(rig.rc.engine, "close", lambda: closed.append(1) or real_close())
    try:
        answer = rig.fit_from_bag()
        assert rig.cleanup_within(15.0), "cleanup waited past deactivate_timeout for the stuck fit"
        assert closed == [] and not answer.done(), "the engine was closed under the fit"
        release.set()
        assert _wait_done(answer), "the released fit never answered"
        result = answer.result()
        assert not result.success and "cancelled by cleanup" in result.message, result.message
        assert rig.rc.readout is rig.before
        assert closed == [1]
    finally:
        release.set()
        rig.close()


def test_reactivate_restarts_the_state_and_holds_predictions_for_the_washout(ros_env) -> None:
    """In process: states, a readout fitted on them, predictions; deactivate, activate: the state restarts
    from zero and the next ``washout`` (20) states give no prediction (diagnostics ``warming_up``,
    ``states_until_valid``), the one after does; the fit buffer keeps the states from before the pause.
    Before, the first predictions after a pause of any length came from the old history, nothing saying so."""
    from libredgetpu_ros.ros.reservoir.node import ReservoirNode
    from rclpy.parameter import Parameter
    from std_msgs.msg import Float64MultiArray

    from libredgetpu_ros_interfaces.srv import FitReadout

    washout = 20
    node = ReservoirNode("reservoir_pause", context=ros_env.init_rclpy(), parameter_overrides=[
        Parameter("backend", value="cpu"), Parameter("template", value=256), Parameter("state_size", value=2),
        Parameter("state_type", value="float64_multi_array"), Parameter("washout", value=washout)])
    series = _series(700)

    def feed(rows: np.ndarray) -> None:
        for x in rows:
            node._on_state(Float64MultiArray(data=[float(v) for v in x]))

    try:
        node.trigger_configure()
        node.trigger_activate()
        _, _, values = node.diagnostic_status()
        assert values["warming_up"] and values["states_until_valid"] == washout  # the first activate too
        feed(series[:400])
        node._fit(FitReadout.Request(samples=0), "", node.cfg, node._rc)
        feed(series[400:410])
        assert node._stats.predictions == 10  # the washout long past
        node.trigger_deactivate()
        node.trigger_activate()
        assert not node._rc.state.any(), "the state was not restarted on activate"
        assert len(node._buffer) == 410  # pre-pause states kept for ~/fit
        feed(series[410:410 + washout - 1])
        _, message, values = node.diagnostic_status()
        assert values["warming_up"] and values["states_until_valid"] == 1 and "warming up" in message
        feed(series[410 + washout - 1:410 + washout])
        assert node._stats.predictions == 10, "a prediction within the washout after activate"
        feed(series[410 + washout:410 + washout + 5])
        assert node._stats.predictions == 15
        _, message, values = node.diagnostic_status()
        assert not values["warming_up"] and values["states_until_valid"] == 0 and message == "predicting"
    finally:
        node.teardown()
        node.destroy_node()


def test_every_activate_holds_predictions_for_the_washout_over_dds(ros_env, tmp_path: Path) -> None:
    """The node in its own process, a readout (fitted offline) loaded at configure, washout 50. Configure,
    activate, 60 states: the first 50 give no prediction, the last 10 do, each exactly what the reservoir run
    offline from a zero state over those 60 states gives; deactivate, activate, 60 other states: the same.
    Before, the first activate predicted from the first state (a state that had seen one input, in the
    transient the fit dropped); after a pause all 60 came from the state left before it (fixed earlier)."""
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig

    series = _series(800)
    readout = tmp_path / "readout.npz"
    runs = (series[600:660], series[700:760])
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        offline = ReservoirComputer(engine, ReservoirConfig(input_dim=2, seed=5, washout=50))
        offline.fit(series[:599], series[1:600])
        offline.save_readout(readout)
        expected = []
        for run in runs:
            offline.set_state(np.zeros(offline.size))
            expected.append(np.array([offline.step_predict(x) for x in run])[50:])

    _spawn(ros_env, _params(tmp_path, readout=str(readout)))
    peer = Peer(ros_env, "reservoir")
    assert peer.transition("configure")
    for n, (run, want) in enumerate(zip(runs, expected, strict=True)):
        if n:
            assert peer.transition("deactivate")
            peer.wait_for("the state subscription gone", lambda: peer.states.get_subscription_count() == 0)
        assert peer.transition("activate")
        peer.wait_subscribed()
        base = 1000 * (n + 1)
        for i, x in enumerate(run):
            peer.publish(x, base + i)
        peer.wait_for(f"10 predictions after activate {n + 1}",
                      lambda n=n: len(peer.predictions) >= 10 * (n + 1))
        peer.spin_for(0.5)  # no more come
        got = peer.predictions[10 * n:]
        assert [p.header.stamp.nanosec for p in got] == list(range(base + 50, base + 60)), n
        live = np.array([p.position for p in got])
        assert np.array_equal(live, want), (n, np.max(np.abs(live - want)))
