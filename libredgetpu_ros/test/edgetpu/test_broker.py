"""The shared device: one broker per accelerator per process; fairness, newest frame per stream, model
switches and parameter caching, a fault reported to every user with one reopen, ``auto`` sharing instead of
falling back, and a second process refused naming the holder. The device is the real driver over the recording
transport with a scripted accelerator behind it (``edgetpu/simulated.py``). No timing asserts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from contextlib import closing, suppress

import numpy as np
import pytest
from libredgetpu_ros.edgetpu import broker as brokers
from libredgetpu_ros.edgetpu.device import EdgeTpuDevice
from libredgetpu_ros.edgetpu.locks import DeviceLock, holders
from libredgetpu_ros.edgetpu.simulated import simulated_transport
from libredgetpu_ros.errors import DeviceError, DeviceLostError
from libredgetpu_ros.formats import load_model

MNV1 = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
SEG0 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_0_of_2_edgetpu.tflite"
SEG1 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite"
DENSE = "matmul/dense_256_edgetpu.tflite"


class Gate:
    """A job that holds the worker until released, so that the next requests queue up deterministically."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, device):
        self.entered.set()
        assert self.release.wait(10)
        return "gate"


def _broker(key: str, opened: list | None = None) -> brokers.DeviceBroker:
    def opener():
        device = EdgeTpuDevice.open(transport_factory=lambda: simulated_transport(key))
        if opened is not None:
            opened.append(device)
        return device

    return brokers.shared(key, opener)


def _saturate(broker, streams, rounds: int) -> list[str]:
    """Every stream has a request waiting whenever the worker picks: the order it served them in."""
    order: list[str] = []
    gate = Gate()
    blocker = broker.stream("blocker")
    blocker.submit(gate)
    assert gate.entered.wait(10)
    requests = []
    for _ in range(rounds):
        pending = []
        for s in streams:
            pending.append(s.submit(lambda dev, name=s.name: order.append(name)))
        requests.extend(pending)
        if _ == 0:
            gate.release.set()
        for r in pending:
            with suppress(brokers.Superseded):
                r.wait(10)
    blocker.close()
    return order


def test_round_robin_and_rate_weights_share_the_device() -> None:
    broker = _broker("broker-fair")
    try:
        a, b, c = (broker.stream(n) for n in "abc")
        order = _saturate(broker, [a, b, c], 30)
        counts = {n: order.count(n) for n in "abc"}
        assert max(counts.values()) / min(counts.values()) <= 1.2, counts
        assert order[:3] == ["a", "b", "c"]  # one each before anyone gets a second turn
        for s in (a, b, c):
            s.close()
        # weighted by rate: a 30 Hz stream gets two turns for a 15 Hz one's one when both always wait
        fast, slow = broker.stream("fast", rate_hz=30.0), broker.stream("slow", rate_hz=15.0)
        gate = Gate()
        blocker = broker.stream("blocker")
        blocker.submit(gate)
        assert gate.entered.wait(10)
        order = []
        done = threading.Event()

        def keep(stream, n):  # each served request resubmits itself: the stream always has one waiting
            def job(dev):
                order.append(stream.name)
                if len(order) >= n:
                    done.set()
                elif not done.is_set():
                    stream.submit(job)
            return job

        fast.submit(keep(fast, 60))
        slow.submit(keep(slow, 60))
        gate.release.set()
        assert done.wait(10)
        assert order.count("fast") / order.count("slow") == pytest.approx(2.0, abs=0.15)
    finally:
        broker.release()


def test_newest_request_per_stream_supersedes_the_waiting_one() -> None:
    broker = _broker("broker-newest")
    try:
        s = broker.stream("camera")
        gate = Gate()
        first = s.submit(gate)
        assert gate.entered.wait(10)
        older = s.submit(lambda dev: "old")
        newer = s.submit(lambda dev: "new")
        with pytest.raises(brokers.Superseded):
            older.wait(10)
        gate.release.set()
        assert first.wait(10) == "gate" and newer.wait(10) == "new"
        assert s.stats()["superseded"] == 1 and s.stats()["served"] == 2
    finally:
        broker.release()


def test_a_stopped_stream_does_not_stall_the_others() -> None:
    broker = _broker("broker-stop")
    try:
        quiet, busy = broker.stream("quiet"), broker.stream("busy")
        quiet.run(lambda dev: None)
        for _ in range(20):  # the quiet stream never submits again
            busy.run(lambda dev: None, timeout=10)
        assert busy.served == 20 and quiet.served == 1
    finally:
        broker.release()


def test_fault_reaches_every_stream_and_the_device_is_reopened_once() -> None:
    opened: list = []
    broker = _broker("broker-fault", opened)
    heard: dict[str, list] = {"a": [], "b": [], "c": []}
    try:
        streams = {n: broker.stream(n, on_fault=lambda what, ok, n=n: heard[n].append(ok)) for n in heard}
        calls = []

        def flaky(dev):
            calls.append(dev)
            if len(calls) == 1:
                raise DeviceLostError("unplugged mid-transfer")
            return "ok"

        assert streams["a"].run(flaky, timeout=10) == "ok"  # retried once on the reopened device
        assert heard == {"a": [True], "b": [True], "c": [True]}
        assert len(opened) == 2 and calls[1] is opened[1] and broker.reopens == 1
        assert streams["b"].run(lambda dev: dev is opened[1], timeout=10)

        # reopening fails: every user hears it and every request fails, none hangs
        broker._opener = lambda: (_ for _ in ()).throw(DeviceError("gone"))
        with pytest.raises(DeviceLostError, match="reopening failed: gone"):
            streams["a"].run(lambda dev: (_ for _ in ()).throw(DeviceLostError("again")), timeout=10)
        assert heard["b"] == [True, False] and heard["c"] == [True, False]
        with pytest.raises(DeviceLostError):
            streams["c"].run(lambda dev: None, timeout=10)
        assert broker.reopens == 1 and broker.faults == 2
    finally:
        broker.release()


def test_model_switches_count_uploads_by_caching_token(fixture_path) -> None:
    """SSD's two segments are compiled together (one caching token): switching between them uploads nothing;
    switching to a model of another token uploads its parameters, each time."""
    from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend

    backends = {}
    try:
        for name, rel in (("seg0", SEG0), ("seg1", SEG1), ("dense", DENSE)):
            backend = EdgeTpuBackend(transport_factory=lambda: simulated_transport("broker-switch"),
                                     stream=name)
            backend.load(fixture_path(rel))
            backends[name] = backend
        broker = backends["seg0"].device
        assert all(b.device is broker for b in backends.values()) and broker._refs == 3

        def run(name):
            model = load_model(fixture_path({"seg0": SEG0, "seg1": SEG1, "dense": DENSE}[name]))
            op = model.edgetpu_ops()[0]
            tensors = [model.tensors[i] for i in op.inputs]
            backends[name].run([np.zeros(t.shape, t.dtype) for t in tensors])

        for name in ("seg0", "seg1", "seg0", "seg1", "dense", "seg0", "dense"):
            run(name)
        name = {str(fixture_path(rel)): key for key, rel in (("seg0", SEG0), ("seg1", SEG1),
                                                             ("dense", DENSE))}
        pairs = {(name[s["from"]], name[s["to"]]): (s["count"], s["uploads"])
                 for s in broker.stats()["switches"]}
        # first runs are loads, not switches; same token: no upload; another token: an upload every time
        assert pairs == {("seg1", "seg0"): (1, 0), ("seg0", "seg1"): (1, 0), ("dense", "seg0"): (1, 1),
                         ("seg0", "dense"): (1, 1)}
    finally:
        for backend in backends.values():
            backend.close()
    assert "broker-switch" not in brokers.brokers()  # the last user closed it


def test_auto_shares_the_busy_device_instead_of_falling_back(fixture_path, monkeypatch) -> None:
    """Four camera backends with ``backend: auto`` in one process: all on the one accelerator."""
    from libredgetpu_ros.backends import open_backend
    from libredgetpu_ros.edgetpu import device as device_module

    attached = device_module.DeviceInfo("broker-auto", 0, "running", 0x18D1, 0x9302, "super")
    monkeypatch.setattr(device_module, "list_devices", lambda: [attached])
    monkeypatch.setattr(EdgeTpuDevice, "open", classmethod(
        lambda cls, selector=None, firmware=None, transport_factory=None, performance="high":
        cls._start(simulated_transport("broker-auto"), DeviceLock("broker-auto").acquire(), performance)))
    opened = [open_backend("auto", fixture_path(MNV1)) for _ in range(4)]
    try:
        assert [b.name for b in opened] == ["edgetpu"] * 4
        assert not any(b.fallback for b in opened)
        assert len({id(b.device) for b in opened}) == 1 and opened[0].device._refs == 4
        image = np.zeros((128, 128, 3), np.uint8)
        for b in opened:
            assert b.run([image])
        assert [b.shared_status()["served"] for b in opened] == [1, 1, 1, 1]
        name = fixture_path(MNV1).name  # one stream per backend, each reported on its own
        assert sorted(opened[0].device.stats()["streams"]) == sorted([name, f"{name}#2", f"{name}#3",
                                                                      f"{name}#4"])
    finally:
        for b in opened:
            b.close()


def test_a_second_process_is_refused_naming_the_holder(tmp_path) -> None:
    holder = textwrap.dedent("""
        import sys
        from libredgetpu_ros.edgetpu.locks import DeviceLock, set_holder_name
        set_holder_name("front_camera (bringup)")
        lock = DeviceLock("broker-xproc").acquire()
        print("held", flush=True)
        sys.stdin.read()
        lock.release()
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(DeviceError) as caught:
            EdgeTpuDevice.open(transport_factory=lambda: simulated_transport("broker-xproc"))
        message = str(caught.value)
        assert f"pid {proc.pid} (front_camera (bringup))" in message and "another process" in message
        assert holders()["broker-xproc"] == f"pid {proc.pid} (front_camera (bringup))"
    finally:
        proc.stdin.close()
        proc.wait(10)
    assert "broker-xproc" not in holders()
    with closing(EdgeTpuDevice.open(transport_factory=lambda: simulated_transport("broker-xproc"))):
        pass


def test_a_matmul_engine_and_a_camera_model_take_turns_on_one_device(fixture_path) -> None:
    """The engine's runner is one more stream on the shared device: its weights (another caching token) are
    re-uploaded after a camera model ran, and a swap's new version is uploaded once."""
    from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend
    from libredgetpu_ros.matmul import MatMulEngine

    camera = EdgeTpuBackend(transport_factory=lambda: simulated_transport("broker-matmul"), stream="camera")
    camera.load(fixture_path(MNV1))
    broker = camera.device
    try:
        engine = MatMulEngine.from_template(fixture_path(DENSE), backend="edgetpu", device=broker)
        with closing(engine) as eng:
            streams = set(broker.stats()["streams"])
            assert broker._refs == 2 and streams == {"camera", f"matmul {eng.template.name}"}
            x = np.zeros(eng.cols, np.float32)
            image = np.zeros((128, 128, 3), np.uint8)
            before = broker.device.uploads
            eng.matmul(x)
            camera.run([image])
            eng.matmul(x)
            assert broker.device.uploads - before == 2  # the camera model's token evicted the engine's blob
            eng.set_weights(np.ones((eng.rows, eng.cols), np.float32) * 0.01)
            before = broker.device.uploads
            eng.matmul(x)
            eng.matmul(x)
            assert broker.device.uploads == before  # the swap uploaded the new version before publishing
        assert broker._refs == 1
    finally:
        camera.close()


def test_an_open_in_progress_blocks_neither_other_devices_nor_its_own_second_user() -> None:
    """A device's open (firmware upload: seconds) runs outside the registry lock: another device opens and is
    released meanwhile, and a second user of the same device waits for that one open and shares it."""
    entered, proceed = threading.Event(), threading.Event()
    opens: list[str] = []

    def slow_opener():
        opens.append("slow")
        entered.set()
        assert proceed.wait(10)
        return EdgeTpuDevice.open(transport_factory=lambda: simulated_transport("broker-slow"))

    got: dict[str, brokers.DeviceBroker] = {}

    def user(name: str) -> threading.Thread:
        return threading.Thread(target=lambda: got.setdefault(name, brokers.shared("broker-slow",
                                                                                   slow_opener)))

    first, second = user("first"), user("second")
    first.start()
    try:
        assert entered.wait(10)
        second.start()
        other = _broker("broker-other")  # would wait for the slow open if it ran under the registry lock
        assert other.stream("x").run(lambda dev: "ran", timeout=10) == "ran"
        other.release()
        assert "second" not in got  # still waiting for the first open of its device
    finally:
        proceed.set()
        first.join(10)
        second.join(10)
    assert got["first"] is got["second"] and opens == ["slow"]
    got["first"].release()
    got["second"].release()
    assert "broker-slow" not in brokers.brokers()


def test_a_stream_back_from_idle_claims_no_burst() -> None:
    """A stream that waited while another used the device alone restarts at the virtual time in service: it
    then shares turns, instead of being owed every turn the other one had meanwhile."""
    broker = _broker("broker-burst")
    try:
        busy, returning = broker.stream("busy"), broker.stream("returning")
        for _ in range(30):  # 'returning' is idle meanwhile: it must not bank these 30 turns
            busy.run(lambda dev: None, timeout=10)
        gate = Gate()
        blocker = broker.stream("blocker")
        blocker.submit(gate)
        assert gate.entered.wait(10)
        order: list[str] = []
        done = threading.Event()

        def keep(stream):  # each served request resubmits itself: the stream always has one waiting
            def job(dev):
                order.append(stream.name)
                if len(order) >= 40:
                    done.set()
                elif not done.is_set():
                    stream.submit(job)
            return job

        busy.submit(keep(busy))
        returning.submit(keep(returning))
        gate.release.set()
        assert done.wait(10)
        runs = "".join("r" if name == "returning" else "b" for name in order)
        assert max(len(run) for run in runs.split("b")) <= 2, runs  # no burst of 'returning' turns
        assert abs(order.count("busy") - order.count("returning")) <= 2, runs
    finally:
        broker.release()


def test_a_stream_without_a_rate_is_not_starved_by_one_with_a_rate() -> None:
    """``device_share_hz`` 0 (unset) beside a node set to 30 Hz: weighted like the highest rate on the device,
    so both get equal turns under saturation (weighted 1 against 30 it got one turn in 31)."""
    broker = _broker("broker-unset-rate")
    try:
        configured, unset = broker.stream("configured", rate_hz=30.0), broker.stream("unset")
        assert (configured.weight, unset.weight) == (30.0, 30.0)
        order = _saturate(broker, [configured, unset], 40)
        assert abs(order.count("configured") - order.count("unset")) <= 2, order
        configured.close()
        assert unset.weight == 1.0  # alone, or with other unset streams: equal turns
    finally:
        broker.release()
