"""Cross-process tests of the adaptive control node over real (localhost-only) DDS.

The node runs in its own process on the CPU twin of the Dense(256) template; a third process publishes
JointState at 500 Hz; this process drives the lifecycle, plays the planner and records every command.
References: the weights the node reports back (get_weights, checked against what was sent within the
per-row quantization step) and the template's input/output scales read from its JSON sidecar.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import time
from pathlib import Path

import _control_harness as harness  # registered by conftest.py
import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

HERE = Path(__file__).resolve().parent

NS = "/ctl"
FQN = f"{NS}/control_node"
JOINTS = ["shoulder", "elbow", "wrist", "grip", "base", "tilt", "pan", "roll"]
ROWS = 4  # commands
COLS = len(JOINTS)
T_CONFIGURE, T_CLEANUP, T_ACTIVATE, T_DEACTIVATE = (harness.T_CONFIGURE, harness.T_CLEANUP,
                                                    harness.T_ACTIVATE, harness.T_DEACTIVATE)


def _tolerance(quant: dict, weights: np.ndarray) -> np.ndarray:
    """Per-row bound of |y - Wq·x|: input rounding (x to its int8 grid) plus one output step."""
    return 0.5 * quant["input_scale"] * np.abs(weights).sum(axis=1) + quant["output_scale"] + 1e-6


def _weights(resp) -> np.ndarray:
    return np.frombuffer(resp.data, np.float32).reshape(resp.rows, resp.cols)


@pytest.fixture
def quant(fixture_path) -> dict:
    return json.loads(fixture_path("matmul/dense_256_edgetpu.json").read_text())


def _start(ros_env, *params: str) -> harness.ControlHarness:
    return harness.start_configured(ros_env, NS, *params)


def test_swaps_under_load_are_atomic_and_bad_requests_refused(ros_env, quant, tmp_path):
    ctl = _start(ros_env, "state_type:=joint_state", f"joint_names:={json.dumps(JOINTS)}",
                 f"state_size:={COLS}", f"command_size:={ROWS}", "stale_timeout:=30.0", "qos_depth:=1000",
                 "state_queue:=1000")  # every state must produce a command here: no "latest wins" drops
    try:
        # Preload while inactive (a planner does this before activation); read it back.
        first = ctl.get_weights()
        assert first.success and (first.rows, first.cols) == (ROWS, COLS)
        w_min = np.frombuffer(first.weight_min, np.float32)
        w_max = np.frombuffer(first.weight_max, np.float32)
        assert w_min.shape == (ROWS,) and (w_min < 0).all() and (w_max > 0).all()
        assert not _weights(first).any(), "configure must start from zero weights"
        rng = np.random.default_rng(7)
        step = (w_max - w_min) / 255.0  # one int8 step per row

        def random_weights() -> np.ndarray:
            return (rng.uniform(-0.9, 0.9, (ROWS, COLS)) * w_max[:, None]).astype(np.float32)

        versions: dict[int, np.ndarray] = {}  # version -> weights actually in use (get_weights)
        w0 = random_weights()
        resp = ctl.set_weights(w0)
        assert resp.accepted, resp.message
        assert resp.version > first.version and resp.clipped_count == 0
        assert resp.max_quantization_error <= step.max() / 2 + 1e-7
        got = ctl.get_weights()
        assert got.version == resp.version
        np.testing.assert_allclose(_weights(got), w0, atol=float(step.max()) / 2 + 1e-7)
        versions[got.version] = _weights(got).copy()

        assert ctl.transition(T_ACTIVATE)
        sent_path = tmp_path / "sent.npz"
        ros_env.spawn([sys.executable, str(HERE / "_control_state_publisher.py"), "--topic", f"{NS}/state",
                       "--names", ",".join(JOINTS), "--rate", "500", "--duration", "4.5",
                       "--out", str(sent_path)], "state_publisher")
        ctl.wait_for(lambda: len(ctl.commands()) > 50, 30.0, "commands from the first weights")

        # Ten swaps while states flow.
        for _ in range(10):
            w = random_weights()
            resp = ctl.set_weights(w)
            assert resp.accepted, resp.message
            assert resp.total_ms >= resp.validate_ms + resp.quantize_ms + resp.blob_ms + resp.swap_ms - 1e-6
            got = ctl.get_weights()
            assert got.version == resp.version
            np.testing.assert_allclose(_weights(got), w, atol=float(step.max()) / 2 + 1e-7)
            versions[got.version] = _weights(got).copy()
            time.sleep(0.15)
        last_version = max(versions)

        # Bad requests: each refused with a reason, version unchanged.
        good = random_weights()
        nan = good.copy()
        nan[1, 2] = np.nan
        inf = good.copy()
        inf[3, 0] = np.inf
        too_big = good.copy()
        too_big[2, 5] = 10 * w_max[2]
        bad_cases = [
            (dict(weights=np.zeros((ROWS + 1, COLS), np.float32)), "rows"),
            (dict(rows=ROWS, cols=COLS, data=np.zeros(ROWS * COLS - 1)), "len(data)"),
            (dict(weights=nan), "non-finite"),
            (dict(weights=inf), "non-finite"),
            (dict(weights=good, engine="other_engine"), "unknown engine"),
            (dict(weights=too_big), "outside the representable range"),
            (dict(weights=good, bias=np.zeros(ROWS + 2)), "len(bias)"),
        ]
        refused_after_ns = time.time_ns()
        for kwargs, reason in bad_cases:
            resp = ctl.set_weights(**kwargs)
            assert not resp.accepted, f"{reason}: accepted"
            assert reason in resp.message, resp.message
            assert resp.version == last_version
        dry = ctl.set_weights(good, dry_run=True)
        assert dry.accepted and dry.version == last_version, dry.message
        assert ctl.get_weights().version == last_version
        np.testing.assert_array_equal(_weights(ctl.get_weights()), versions[last_version])

        ctl.wait_for(lambda: sent_path.exists(), 30.0, "the state publisher to finish")
        ctl.wait_for(lambda: len(ctl.commands()) >= len(np.load(sent_path)["stamps"]) - 5, 10.0,
                     "the last commands")
    finally:
        ctl.close()

    sent = np.load(sent_path)
    stamps, states = sent["stamps"], sent["states"]
    commands = ctl.commands()
    assert len(commands) >= 0.95 * len(stamps), f"{len(commands)} commands for {len(stamps)} states"
    order = np.argsort(stamps)
    seen_versions = []
    adjacent_distinguishable = 0
    for _recv, stamp, version, y in commands:
        k = order[np.searchsorted(stamps, stamp, sorter=order)]
        assert stamps[k] == stamp, "a command carries a stamp no state had"
        assert version in versions, f"command reports version {version}, never set"
        weights = versions[version]
        expected = weights @ states[k]
        tol = _tolerance(quant, weights)
        assert y.shape == (ROWS,)
        assert (np.abs(y - expected) <= tol).all(), (
            f"version {version}: y={y}, W_v·x={expected}, tol={tol}")
        other = versions.get(version - 1)
        if other is not None and (np.abs(y - other @ states[k]) > _tolerance(quant, other)).any():
            adjacent_distinguishable += 1
        seen_versions.append(version)
    assert all(a <= b for a, b in itertools.pairwise(seen_versions)), "a version went back"
    assert len(set(seen_versions)) >= 6, f"only versions {sorted(set(seen_versions))} seen under load"
    # The check has teeth: most outputs would fail against the previous version's weights.
    assert adjacent_distinguishable > 0.8 * sum(v - 1 in versions for v in seen_versions)
    after = [(v, stamp) for _r, stamp, v, _y in commands if stamp > refused_after_ns]
    assert after and all(v == last_version for v, _ in after), "refused requests changed the weights in use"
    # The plain Float32MultiArray topic carries the same outputs.
    plain = np.array([p for p in ctl.recorded.plain_commands])
    stamped = np.array([y for *_, y in commands])
    assert plain.shape == stamped.shape and np.array_equal(np.sort(plain, axis=0), np.sort(stamped, axis=0))


def test_float_state_sizes_padding_stale_and_diagnostics(ros_env, quant, tmp_path):
    from std_msgs.msg import Float32MultiArray

    rng = np.random.default_rng(3)
    initial = (rng.uniform(-0.05, 0.05, (3, 5))).astype(np.float32)
    np.save(tmp_path / "w.npy", initial)
    ctl = _start(ros_env, "state_size:=5", "command_size:=3", "pad_short_states:=true",
                 f"initial_weights:={tmp_path / 'w.npy'}", "diagnostics_period:=0.2", "stale_timeout:=0.5")
    try:
        got = ctl.get_weights()
        w_in_use = _weights(got)
        assert (got.rows, got.cols) == (3, 5)
        np.testing.assert_allclose(w_in_use, initial, atol=float(np.max(got.weight_max)) / 127 / 2 + 1e-7)
        assert ctl.transition(T_ACTIVATE)
        pub = ctl.node.create_publisher(Float32MultiArray, f"{NS}/state", 10)
        ctl.wait_for(lambda: pub.get_subscription_count() > 0, 20.0, "the node's state subscription")
        time.sleep(0.3)
        full = np.array([0.5, -0.25, 0.75, -0.9, 0.1], np.float32)
        short = full[:3]
        too_long = np.zeros(7, np.float32)
        for x in (too_long, full, short, too_long):
            pub.publish(Float32MultiArray(data=x.tolist()))
            time.sleep(0.05)
        ctl.wait_for(lambda: len(ctl.commands()) >= 2, 10.0, "two commands")
        time.sleep(0.3)
        commands = ctl.commands()
        assert len(commands) == 2, "states of the wrong length must not produce commands"
        padded = np.concatenate([short, np.zeros(2, np.float32)])
        for (_r, _s, _v, y), x in zip(commands, (full, padded), strict=True):
            expected = w_in_use @ x
            assert (np.abs(y - expected) <= _tolerance(quant, w_in_use)).all(), (y, expected)
        # Stamps of unstamped states are their arrival time: recent, not zero.
        assert all(abs(stamp - recv) < 5e9 for recv, stamp, _v, _y in commands)

        def status_with(key: str, value: str):
            return next((s for s in reversed(ctl.recorded.diagnostics)
                         if any(kv.key == key and kv.value == value for kv in s.values)), None)

        ctl.wait_for(lambda: status_with("size_mismatch", "2") is not None, 10.0,
                     "size_mismatch=2 in diagnostics")
        # No state for longer than stale_timeout: WARN.
        ctl.wait_for(lambda: any(s.level == b"\x01" and "stale" in s.message
                                 for s in ctl.recorded.diagnostics[-3:]), 10.0, "a stale WARN")
        ok = status_with("weights_version", str(got.version))
        assert ok is not None
        # The service path's warm-up ran once (at configure), counted as no swap and as no client's dry
        # run; the initial weights it ran beside are the ones in use (checked above).
        assert {kv.key: kv.value for kv in ok.values}.items() >= {
            "set_weights_warm_ups": "1", "swaps_accepted": "0", "dry_runs": "0"}.items()
        # Deactivated: states produce nothing.
        assert ctl.transition(T_DEACTIVATE)
        before = len(ctl.commands())
        pub.publish(Float32MultiArray(data=full.tolist()))
        time.sleep(0.5)
        assert len(ctl.commands()) == before
        assert ctl.transition(T_CLEANUP)
    finally:
        ctl.close()


def test_stale_joint_states_produce_no_command(ros_env, tmp_path):
    # state_queue 1000: every stale state must reach the loop to be counted (latest-wins could replace one
    # under load, which is a different feature).
    ctl = _start(ros_env, "state_type:=joint_state", f"state_size:={COLS}", f"command_size:={ROWS}",
                 "stale_timeout:=1.0", "diagnostics_period:=0.2", "state_queue:=1000")
    try:
        assert ctl.transition(T_ACTIVATE)
        out = tmp_path / "stale.npz"
        ros_env.spawn([sys.executable, str(HERE / "_control_state_publisher.py"), "--topic", f"{NS}/state",
                       "--names", ",".join(JOINTS), "--rate", "50", "--duration", "0.5",
                       "--stamp-offset", "-10", "--out", str(out)], "stale_publisher")
        ctl.wait_for(lambda: out.exists(), 30.0, "the stale publisher to finish")
        ctl.wait_for(lambda: any(s.level == b"\x01" and "stale state(s)" in s.message
                                 for s in ctl.recorded.diagnostics), 10.0, "a stale-state WARN")
        sent = len(np.load(out)["stamps"])

        def stale_dropped() -> int:
            return int({kv.key: kv.value for kv in ctl.recorded.diagnostics[-1].values}["stale_dropped"])

        # The WARN may come from a report sent before the last states were handled: wait (bounded) for the
        # count to catch up, then check it neither falls short of nor exceeds what was sent.
        with contextlib.suppress(TimeoutError):
            ctl.wait_for(lambda: stale_dropped() >= sent, 5.0, "every stale state to be counted")
        assert stale_dropped() == sent
        assert ctl.commands() == [], "stale states must not produce commands"
    finally:
        ctl.close()


def test_service_path_warm_up_is_a_dry_run_that_changes_nothing():
    """``Controller.warm_service_path`` sends a request of the controller's size through what a real call
    runs (rclpy's conversion, validation, quantization, blob) as a dry run: the weights, their version and
    the request id that applied them stay; the response says so."""
    from libredgetpu_ros.ros.control.controller import Controller
    from libredgetpu_ros.ros.control.params import PARAM_TABLE

    from libredgetpu_ros_interfaces.srv import SetWeights

    cfg = PARAM_TABLE.values_type(**{**PARAM_TABLE.defaults(), "backend": "cpu", "template": 256,
                                     "state_size": 5, "command_size": 3})
    ctl = Controller(cfg)
    try:
        rng = np.random.default_rng(5)
        weights = (rng.uniform(-0.9, 0.9, (3, 5)) * ctl.w_max[:, None]).astype(np.float32)
        request = SetWeights.Request(rows=3, cols=5, request_id="planner:1")
        request.data = harness.float32_field(weights)
        applied = SetWeights.Response()
        assert ctl.set_weights(request, applied, "refuse", time.perf_counter()) is None and applied.accepted
        before, bias_before, version = ctl.engine.get_weights()

        warm = ctl.warm_service_path("refuse")

        assert warm.accepted and warm.message.startswith("validated (dry run"), warm.message
        assert warm.version == version == applied.version and ctl.engine.version == version
        after, bias_after, _ = ctl.engine.get_weights()
        np.testing.assert_array_equal(after, before)
        assert bias_before is None and bias_after is None  # the warm-up's zero bias was not applied
        assert ctl.applied_by == (version, "planner:1")
    finally:
        ctl.close()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_validation_finds_every_non_finite_value(value):
    """The finiteness check runs on per-row extremes; each kind of non-finite value must still be caught."""
    from libredgetpu_ros.errors import WeightsError
    from libredgetpu_ros.ros.control.codec import validate_weights_request

    w_min, w_max = np.full(3, -1.0, np.float32), np.full(3, 1.0, np.float32)
    for r, c in [(0, 0), (2, 4), (1, 2)]:
        w = np.zeros((3, 5), np.float32)
        w[r, c] = value
        for policy in ("refuse", "clip"):
            with pytest.raises(WeightsError, match=f"1 non-finite value.*row {r}, col {c}"):
                validate_weights_request(w.ravel(), [], 3, 5, (3, 5), w_min, w_max, policy)
    ok, bias = validate_weights_request(np.full(15, 0.5), [0.0] * 3, 3, 5, (3, 5), w_min, w_max, "refuse")
    assert ok.shape == (3, 5) and bias is not None


_FAULTS_SCRIPT = """
import resource
import numpy as np
from libredgetpu_ros.ros.memory import retain_large_allocations
applied = retain_large_allocations()
def cycle():  # like one set_weights request: several multi-MB buffers written, then freed
    bufs = [np.empty(1 << 20, np.float32) for _ in range(3)]
    for b in bufs:
        b.fill(1.0)
for _ in range(2):
    cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    cycle()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc mallopt")
def test_retained_allocations_are_reused_without_page_faults():
    """With the node's malloc tuning, repeated 12 MB of buffers cost no new page faults; without, they do."""
    import os
    import platform
    import subprocess

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    results = {}
    for setting in ("1", "0"):
        env = {**os.environ, "LIBREDGETPU_ROS_MALLOC_TUNING": setting}
        out = subprocess.run([sys.executable, "-c", _FAULTS_SCRIPT], env=env, capture_output=True, text=True,
                             timeout=60, check=True).stdout.split()
        results[setting] = (out[0] == "True", int(out[1]))
    assert results["1"][0] and not results["0"][0], results
    assert results["1"][1] < 1024, results  # under one 4 MB buffer's pages for all 10 cycles
    assert results["0"][1] > 10 * 1024, results  # the default re-faults the buffers (the effect is real)
