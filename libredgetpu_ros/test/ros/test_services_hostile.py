"""Every service of every node, sent hostile requests across processes: no exception type escapes a handler.

One process per node type (real rclpy, localhost-only DDS), configured, active and given a good state first
(a loaded readout, an enrolled entry, a colour). The node's services are read from the node itself (``ros2
node info``'s query: names and srv types, the lifecycle / parameter / type-description services aside), and
each gets the requests ``_hostile_requests.py`` builds from its srv type: NaN, inf, extremes, wrong lengths,
100,000-character strings, FIFOs, a device, symlinks, folders, a 1.5 GiB sparse file as paths. After every
request: it was answered, lifecycle ``get_state`` answers ``active``, and a refused request left the node's
state as it was (read back through the node's own services where it has one). Then every parameter gets
hostile values through ``set_parameters``, and every /diagnostics value the node published stays bounded.

Each node also replays its items of issue 30, each of which failed on the code before: ``~/set_color``
r = 1e308 (tracker died: OverflowError), a readout with ``train_nrmse: "x"`` (reservoir died: ValueError),
``~/fit`` on a bag folder holding a FIFO ``x.mcap`` (reservoir hung: fit, load_readout, get_state
unanswered), a database with an 80 MB metadata string (recognition: +300 MB), a 100,000-character
``~/forget`` label (echoed whole into /diagnostics).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

HERE = Path(__file__).resolve().parent
supervision = load_helper(HERE / "_lifecycle_supervisor.py")
hostile = load_helper(HERE / "_hostile_requests.py")

pytestmark = [pytest.mark.ros, pytest.mark.slow, pytest.mark.timeout(420)]

WAIT_S = 20.0
STANDARD = ("lifecycle_msgs/", "rcl_interfaces/", "type_description_interfaces/")
READ_ONLY = ("/save", "/save_readout", "/get_weights")  # services that change no state of the node
DIAG_CHARS = 2000  # the longest /diagnostics value or message accepted (refusals are cut to 400)


class Hostile(supervision.LifecycleSupervisor):
    """Supervisor of one node: its own services by srv type, /diagnostics recorded, camera frames."""

    def __init__(self, ros_env: Any, name: str) -> None:
        from diagnostic_msgs.msg import DiagnosticArray

        super().__init__(ros_env, f"hostile_{name}", f"/{name}", WAIT_S)
        self.name = name
        self.diagnostics: list[Any] = []
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics.append, 100)
        self._clients: dict[str, Any] = {}

    def own_services(self) -> list[tuple[str, Any]]:
        """(name, srv type) of the node's services besides rclpy's standard ones, as the node lists them."""
        from rosidl_runtime_py.utilities import get_service

        def listed() -> list[tuple[str, str]]:
            found = self.node.get_service_names_and_types_by_node(self.name, "/")
            return [(n, types[0]) for n, types in found if not types[0].startswith(STANDARD)]

        self.spin_for(1.0)  # discovery of services made at configure
        return [(n, get_service(t)) for n, t in sorted(listed())]

    def call_named(self, srv_type: Any, name: str, request: Any, timeout: float = WAIT_S) -> Any:
        client = self._clients.get(name)
        if client is None:
            client = self._clients[name] = self.node.create_client(srv_type, name)
            assert client.wait_for_service(timeout_sec=WAIT_S), f"{name} did not appear"
        future = client.call_async(request)
        self.executor.spin_until_future_complete(future, timeout_sec=timeout)
        assert future.done(), f"no answer from {name} within {timeout} s"
        return future.result()

    def feed(self, topic: str, rgb: np.ndarray, until: Callable[[], Any]) -> Any:
        """Publish ``rgb`` on ``topic`` (best effort, again each second) until ``until()`` is truthy."""
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image

        pub = self.node.create_publisher(Image, topic, qos_profile_sensor_data)
        msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", step=rgb.shape[1] * 3,
                    data=rgb.tobytes())
        return self.wait_for(f"the node to process a frame on {topic}", until, every=lambda: pub.publish(msg))

    def status_values(self) -> dict[str, str]:
        for array in reversed(self.diagnostics):
            for status in array.status:
                if status.name.startswith(f"/{self.name}:") or status.name.startswith(f"{self.name}:"):
                    return {kv.key: kv.value for kv in status.values}
        return {}


@dataclass
class Case:
    """One node type: how to start it, its good state, how to read that state back, its issue replays."""

    args: Callable[[Path, dict[str, Any]], list[str]]
    prepare: Callable[[Hostile, Path], None] = lambda sup, tmp: None
    snapshot: Callable[[Hostile, Path], Any] | None = None
    replay: Callable[[Hostile, Path, Any], None] = lambda sup, tmp, proc: None
    setup: Callable[[Any, Path], dict[str, Any]] = lambda ros_env, tmp: {}
    good: Callable[[], dict[str, dict[str, Any]]] = dict  # service name suffix -> fields of a good request


def _node(module: str, name: str, /, **params: Any) -> Callable[[Path, dict[str, Any]], list[str]]:
    """The command line of node ``module`` named ``name`` with ``params`` (and those the case's setup adds);
    a value given as a callable is called at spawn time (fixture paths)."""
    def args(tmp: Path, extra: dict[str, Any]) -> list[str]:
        import yaml

        path = tmp / f"{name}.yaml"
        values = {"diagnostics_period": 0.3, **{k: v() if callable(v) else v for k, v in params.items()},
                  **extra}
        path.write_text(yaml.safe_dump({"/**": {"ros__parameters": values}}))
        return [sys.executable, "-m", module, "--ros-args", "-r", f"__node:={name}", "--params-file",
                str(path)]

    return args


def _frame(seed: int = 0, size: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def _ok(response: Any) -> bool | None:
    for name in ("success", "accepted"):
        if hasattr(response, name):
            return bool(getattr(response, name))
    return None


# ----- per-node good state, read-back and replays ---------------------------------------------------------

def _spot_replay(sup: Hostile, tmp: Path, proc: Any) -> None:
    from libredgetpu_ros_interfaces.srv import SetColor

    answer = sup.call_named(SetColor, "/tracker/set_color", SetColor.Request(r=1e308, g=-0.5, b=-0.5))
    assert answer.success and answer.clipped == 1 and answer.weights[0] == 127, answer.message
    assert sup.state() == "active"


def _pattern_prepare(sup: Hostile, tmp: Path) -> None:
    sup.feed("image_raw", _frame(1), lambda: sup.status_values().get("frames_processed", "0") != "0")


def _control_snapshot(sup: Hostile, tmp: Path) -> Any:
    from libredgetpu_ros_interfaces.srv import GetWeights

    got = sup.call_named(GetWeights, "/control_node/get_weights", GetWeights.Request())
    return got.version, np.asarray(got.data).tobytes(), np.asarray(got.bias).tobytes()


def _control_prepare(sup: Hostile, tmp: Path) -> None:
    from libredgetpu_ros_interfaces.srv import SetWeights

    rows, cols = 256, 256
    data = (np.random.default_rng(3).uniform(-0.1, 0.1, rows * cols)).astype(np.float32).tolist()
    answer = sup.call_named(SetWeights, "/control_node/set_weights",
                            SetWeights.Request(rows=rows, cols=cols, data=data, request_id="good"))
    assert answer.accepted, answer.message


def _readout(tmp: Path) -> Path:
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig

    t = np.arange(400) * 0.25
    series = np.stack([np.sin(t), 0.6 * np.cos(0.73 * t + 0.3)], axis=1)
    path = tmp / "good_readout.npz"
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        rc = ReservoirComputer(engine, ReservoirConfig(input_dim=2, seed=5, washout=50))
        rc.fit(series[:-1], series[1:])
        rc.save_readout(path)
    return path


def _reservoir_prepare(sup: Hostile, tmp: Path) -> None:
    from libredgetpu_ros_interfaces.srv import FilePath

    answer = sup.call_named(FilePath, "/reservoir/load_readout", FilePath.Request(path=str(_readout(tmp))))
    assert answer.success, answer.message


def _npz_snapshot(service: str) -> Callable[[Hostile, Path], Any]:
    def snapshot(sup: Hostile, tmp: Path) -> Any:
        from libredgetpu_ros_interfaces.srv import FilePath

        path = tmp / "snapshot.npz"
        answer = sup.call_named(FilePath, service, FilePath.Request(path=str(path)))
        assert answer.success, answer.message
        with np.load(path) as data:
            return {k: data[k].tobytes() for k in sorted(data.files)}

    return snapshot


def _reservoir_replay(sup: Hostile, tmp: Path, proc: Any) -> None:
    from libredgetpu_ros_interfaces.srv import FilePath, FitReadout

    good = _npz_snapshot("/reservoir/save_readout")(sup, tmp)
    with np.load(tmp / "good_readout.npz") as data:
        weights, meta = data["weights"], json.loads(str(data["meta"]))
    crafted = tmp / "nrmse_x.npz"
    np.savez(crafted, weights=weights, meta=np.array(json.dumps({**meta, "train_nrmse": "x"})))
    answer = sup.call_named(FilePath, "/reservoir/load_readout", FilePath.Request(path=str(crafted)))
    assert not answer.success and "train_nrmse is 'x'" in answer.message, answer.message
    paths = hostile.hostile_paths(tmp / "replay")
    t0 = time.monotonic()
    answer = sup.call_named(FitReadout, "/reservoir/fit", FitReadout.Request(bag=paths["fifo_bag"]))
    assert not answer.success and "is a FIFO" in answer.message, answer.message
    assert time.monotonic() - t0 < WAIT_S
    answer = sup.call_named(FilePath, "/reservoir/load_readout", FilePath.Request(path=paths["fifo"]))
    assert not answer.success and sup.state() == "active"
    assert _npz_snapshot("/reservoir/save_readout")(sup, tmp) == good


def _recognition_prepare(sup: Hostile, tmp: Path) -> None:
    from libredgetpu_ros_interfaces.srv import Enroll

    sup.feed("image_raw", _frame(2, 96), lambda: sup.status_values().get("frames_processed", "0") != "0")
    answer = sup.call_named(Enroll, "/recognition/enroll", Enroll.Request(label="good"))
    assert answer.success, answer.message


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _recognition_replay(sup: Hostile, tmp: Path, proc: Any) -> None:
    from libredgetpu_ros.robotics.embedding import DATABASE_FORMAT

    from libredgetpu_ros_interfaces.srv import FilePath, Forget

    answer = sup.call_named(Forget, "/recognition/forget", Forget.Request(label=hostile.LONG))
    assert not answer.success and len(answer.message) < 1000, len(answer.message)
    sup.wait_for("diagnostics after the refusal", lambda: sup.status_values().get("refused", "0") != "0")
    refusal = sup.status_values()["last_refusal"]
    assert len(refusal) < 1000 and "100000 characters" in refusal, len(refusal)
    # A database whose metadata is an 80 MB string: refused from its header, the node's memory unchanged.
    fat = tmp / "fat.npz"
    meta = json.dumps({"format": DATABASE_FORMAT, "embedding_dim": 256, "labels": ["a"],
                       "pad": "x" * (20 << 20)})
    np.savez_compressed(fat, embeddings=np.ones((1, 256), np.float32), meta=np.array(meta))
    del meta
    before = _peak_rss_mb(proc.pid)
    answer = sup.call_named(FilePath, "/recognition/load", FilePath.Request(path=str(fat)))
    assert not answer.success and "accepted for it" in answer.message, answer.message
    grown = _peak_rss_mb(proc.pid) - before
    print(f"recognition node peak RSS growth loading an 80 MB metadata string: {grown:.1f} MB")
    assert grown < 40, f"peak RSS grew {grown:.0f} MB"


def _spu_args(tmp: Path, extra: dict[str, Any]) -> list[str]:
    import yaml

    def vec(name: str, kind: str) -> dict:
        return {"type": kind, "varname": name, "length": 6, "precision": 16, "padded_length": 8,
                "quantization": {"scale": 2.0 ** -8, "zero_pt": 0}, "comments": {"latch": False}}

    spec = {"inputs": {"B": vec("B", "input")}, "outputs": {"A": vec("A", "output")},
            "simple_sequences": {"main": {"type": "simple_sequence", "inputs": ["B"], "outputs": ["A"],
                                          "comments": {}}}, "complex_sequences": {}}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
    (tmp / "program.yaml").write_text(yaml.safe_dump({"outputs": {"A": {"terms": [{"input": "B",
                                                                                     "weight": 1.0}]}}}))
    return _node("libredgetpu_ros.ros.spu.node", "spu", iospec=str(tmp / "spec.yaml"),
                 program=str(tmp / "program.yaml"))(tmp, extra)


def _trainer_setup(ros_env: Any, tmp: Path) -> dict[str, Any]:
    loop = load_helper(HERE.parent / "teamtensor" / "_trainer_loop.py")
    ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.cli.main", "tt-worker", "--port", "0", "--json"],
                  "tt_worker")
    return {"worker_port": loop.worker_port(ros_env.work_dir / "tt_worker.log")}


def _fixture(rel: str) -> Callable[[], str]:
    def path() -> str:
        from libredgetpu_ros.fixtures import fixtures_dir

        return str(fixtures_dir() / rel)

    return path


CASES: dict[str, Case] = {
    "tracker_spot": Case(_node("libredgetpu_ros.ros.robotics.tracker_node", "tracker", backend="cpu",
                               module="spot", template="color_red_64x64"), replay=_spot_replay,
                         good=lambda: {"set_color": {"r": 1.0, "g": -0.5, "b": -0.5}}),
    "tracker_pattern": Case(_node("libredgetpu_ros.ros.robotics.tracker_node", "tracker", backend="cpu",
                                  module="pattern", template="pattern_64x64_8x8_1ch"),
                            prepare=_pattern_prepare,
                            good=lambda: {"set_template_region": {"x": 8, "y": 8, "width": 16,
                                                                  "height": 16}}),
    "looming": Case(_node("libredgetpu_ros.ros.robotics.looming_node", "looming", backend="cpu",
                          template="looming_64x64_3x3")),
    "flow": Case(_node("libredgetpu_ros.ros.flow_node", "flow", backend="cpu", model="gabor_64x64_p4")),
    "perception": Case(_node("libredgetpu_ros.ros.perception_node", "perception", backend="cpu",
                             model=_fixture("classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"),
                             task="classify")),
    "control": Case(_node("libredgetpu_ros.ros.control_node", "control_node", backend="cpu", template=256),
                    prepare=_control_prepare, snapshot=_control_snapshot,
                    good=lambda: {"set_weights": {"rows": 256, "cols": 256, "data": [0.01] * 65536,
                                                  "bias": [0.0] * 256, "dry_run": False}}),
    "reservoir": Case(_node("libredgetpu_ros.ros.reservoir.node", "reservoir", backend="cpu", template=256,
                            state_size=2, seed=5, washout=50),
                      prepare=_reservoir_prepare, snapshot=_npz_snapshot("/reservoir/save_readout"),
                      good=lambda: {"fit": {"samples": 10}},
                      replay=_reservoir_replay),
    "recognition": Case(_node("libredgetpu_ros.ros.recognition.node", "recognition", backend="cpu",
                              template=256),
                        prepare=_recognition_prepare, snapshot=_npz_snapshot("/recognition/save"),
                        good=lambda: {"enroll": {"label": "other", "use_region": True, "x": 8, "y": 8,
                                                 "width": 40, "height": 40}, "forget": {"label": "good"}},
                        replay=_recognition_replay),
    "spu": Case(_spu_args),
    "trainer": Case(_node("libredgetpu_ros.ros.trainer.node", "trainer_node", push_period=0.0),
                    setup=_trainer_setup),
}


def _parameter_values(paths: dict[str, str]) -> list[tuple[str, Any]]:
    return [("100k chars", hostile.LONG), ("NaN", math.nan), ("-inf", -math.inf), ("2^63-1", (1 << 63) - 1),
            ("FIFO path", paths["fifo"]), ("[]", []), ("true", True)]


@pytest.mark.parametrize("kind", sorted(CASES))
def test_every_service_survives_hostile_requests(ros_env, tmp_path: Path, kind: str) -> None:
    from rcl_interfaces.srv import ListParameters, SetParameters
    from rclpy.parameter import Parameter

    case = CASES[kind]
    extra = case.setup(ros_env, tmp_path)
    args = case.args(tmp_path, extra)
    name = args[args.index("-r") + 1].split(":=")[1]
    proc = ros_env.spawn(args, name)
    sup = Hostile(ros_env, name)
    assert sup.transition("configure") and sup.transition("activate") and sup.state() == "active"
    case.prepare(sup, tmp_path)
    case.replay(sup, tmp_path, proc)
    paths = hostile.hostile_paths(tmp_path / "hostile")
    services = sup.own_services()
    print(f"{kind}: services {[(n, t.__name__) for n, t in services]}")
    state = case.snapshot(sup, tmp_path) if case.snapshot else None
    counts = {"requests": 0, "refused": 0, "accepted": 0}
    version = None  # the last version a response reported (a refused request must leave it)
    t0 = time.monotonic()
    good = case.good()
    for service, srv_type in services:
        base = good.get(service.rsplit("/", 1)[1])
        for label, request in hostile.hostile_requests(srv_type, paths, base):
            try:
                response = sup.call_named(srv_type, service, request)
            except AssertionError as exc:
                raise AssertionError(f"{service} {label}: {exc}") from None
            counts["requests"] += 1
            ok = _ok(response)
            counts["accepted" if ok else "refused"] += 1
            message = getattr(response, "message", "")
            assert len(message) < 2000, f"{service} {label}: a {len(message)}-character message"
            assert "internal error" not in message, f"{service} {label}: {message}"
            assert sup.state() == "active", f"{service} {label}: node left 'active'"
            if hasattr(response, "version") and not service.endswith(READ_ONLY):  # weights / template version
                if version is not None and not ok and not getattr(response, "replayed", False):  # a replay:
                    # the recorded answer of an earlier call with that request_id, its version then
                    assert response.version == version, f"{service} {label}: refused, yet version changed"
                version = response.version if ok or version is None else version
            if case.snapshot is not None and not service.endswith(READ_ONLY):
                now = case.snapshot(sup, tmp_path)
                assert ok or now == state, f"{service} {label}: refused, yet the state changed"
                state = now
    # Every parameter, hostile values of every type (single-parameter sets: each answered on its own).
    listed = sup.call_named(ListParameters, f"/{name}/list_parameters", ListParameters.Request()).result.names
    for param in listed:
        for label, value in _parameter_values(paths):
            request = SetParameters.Request(parameters=[Parameter(param, value=value).to_parameter_msg()])
            result = sup.call_named(SetParameters, f"/{name}/set_parameters", request).results[0]
            counts["requests"] += 1
            counts["accepted" if result.successful else "refused"] += 1
            assert len(result.reason) < 2000, f"{param}={label}: a {len(result.reason)}-character reason"
        assert sup.state() == "active", f"parameter {param}: node left 'active'"
    elapsed = time.monotonic() - t0
    print(f"{kind}: {len(services)} services, {len(listed)} parameters, {counts} in {elapsed:.1f} s")
    sup.spin_for(0.5)
    for array in sup.diagnostics:
        for status in array.status:
            assert len(status.message) < DIAG_CHARS, status.message[:200]
            for kv in status.values:
                assert len(kv.value) < DIAG_CHARS, f"{kv.key}: {len(kv.value)} characters"
    assert sup.transition("deactivate") and sup.transition("activate") and sup.state() == "active"
    configure_with_special_paths(sup, name, paths, counts)
    assert proc.poll() is None


def configure_with_special_paths(sup: Hostile, name: str, paths: dict[str, str],
                                 counts: dict[str, int]) -> None:
    """Every string parameter set to a FIFO, then to a symlink to /dev/zero, and the node configured with it:
    configure answers (a read of the path would block or never end), a failure leaves it unconfigured, and
    with the original values it configures and activates again."""
    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.srv import GetParameters, ListParameters, SetParameters
    from rclpy.parameter import Parameter

    assert sup.transition("deactivate") and sup.transition("cleanup") and sup.state() == "unconfigured"
    listed = sup.call_named(ListParameters, f"/{name}/list_parameters", ListParameters.Request()).result.names
    request = GetParameters.Request(names=listed)
    values = sup.call_named(GetParameters, f"/{name}/get_parameters", request).values
    strings = {n: v.string_value for n, v in zip(listed, values, strict=True)
               if v.type == ParameterType.PARAMETER_STRING}

    def set_string(param: str, value: str) -> bool:
        request = SetParameters.Request(parameters=[Parameter(param, value=value).to_parameter_msg()])
        return bool(sup.call_named(SetParameters, f"/{name}/set_parameters", request).results[0].successful)

    for param, original in strings.items():
        changed = False
        for kind in ("fifo", "device"):
            if not set_string(param, paths[kind]):  # read-only (qos_overrides.*) or not a valid value
                continue
            changed = True
            counts["configures"] = counts.get("configures", 0) + 1
            if sup.transition("configure"):  # not a path, or one read later: fine, as long as it answered
                assert sup.transition("cleanup")
            assert sup.state() == "unconfigured", f"{param}={kind}"
        if changed:
            assert set_string(param, original)
    assert sup.transition("configure") and sup.transition("activate") and sup.state() == "active"
    print(f"{name}: {counts.get('configures', 0)} configures with special paths in string parameters")


def test_an_unforeseen_exception_in_a_handler_is_answered_and_the_node_runs_on(ros_env,
                                                                               tmp_path: Path) -> None:
    """The guard itself (``ros/services.py``): an exception type the handler does not catch (injected:
    RuntimeError under ``~/set_color``) is answered ``success: false``, ``internal error (RuntimeError)``,
    logged with its traceback, and the node keeps answering and working; without the guard the request
    went unanswered and the process ended (the tracker's OverflowError of issue 30)."""
    from libredgetpu_ros_interfaces.srv import SetColor

    faulty = load_helper(HERE / "_faulty_service_node.py")
    args = _node("libredgetpu_ros.ros.robotics.tracker_node", "tracker", backend="cpu", module="spot",
                 template="color_red_64x64")(tmp_path, {})
    proc = ros_env.spawn([sys.executable, str(HERE / "_faulty_service_node.py"), *args[3:]], "tracker")
    sup = Hostile(ros_env, "tracker")
    assert sup.transition("configure") and sup.transition("activate")
    poisoned = SetColor.Request(r=faulty.POISON_RED, g=0.0, b=0.0)
    answer = sup.call_named(SetColor, "/tracker/set_color", poisoned)
    assert not answer.success and answer.message.startswith("internal error (RuntimeError): injected"), answer
    assert sup.state() == "active" and proc.poll() is None
    good = sup.call_named(SetColor, "/tracker/set_color", SetColor.Request(r=1.0, g=-0.5, b=-0.5))
    assert good.success and good.version == 1, good.message
    sup.spin_for(0.3)
    log = (ros_env.work_dir / "tracker.log").read_text()
    assert "service ~/set_color: unexpected RuntimeError" in log and "Traceback" in log
