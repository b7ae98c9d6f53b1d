"""reparam: versioned parameter sets published atomically; MatMul and the robotics modules on the same store;
the CPU backend runs each version's twin values, the Edge TPU backend streams each version's EO blob."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from libredgetpu_ros.errors import WeightsError
from libredgetpu_ros.reparam import BlobPatch, ParameterStore, device_to_int8, int8_to_device, make_patch


def _store() -> ParameterStore:
    return ParameterStore({"pc": np.arange(64, dtype=np.uint8)}, {3: np.zeros((1, 4), np.int8)})


def test_sign_flip_round_trip() -> None:
    values = np.arange(-128, 128, dtype=np.int8)
    assert int8_to_device(values)[0] == 0 and int8_to_device(values)[-1] == 255
    np.testing.assert_array_equal(device_to_int8(int8_to_device(values)), values)


def test_publish_versions_and_shares_unchanged_pieces() -> None:
    store = _store()
    first = store.current
    patch = make_patch(first.blobs["pc"], np.array([1, 5]), np.array([-1, 7], np.int8))
    second = store.publish(blobs={"pc": patch}, twin={3: np.ones((1, 4), np.int8)})
    assert (first.version, second.version) == (0, 1) and store.current is second
    assert second.key != first.key and second.key[0] == first.key[0]
    blob = second.blob("pc")
    assert blob[1] == 0x7F and blob[5] == 0x87 and not blob.flags.writeable
    np.testing.assert_array_equal(np.delete(blob, [1, 5]), np.delete(np.arange(64, dtype=np.uint8), [1, 5]))
    third = store.publish(twin={3: np.full((1, 4), 2, np.int8)})
    assert third.blobs["pc"] is second.blobs["pc"]  # nothing copied for an unchanged blob
    # a patch of a patch at the same offsets replaces it instead of chaining
    again = make_patch(second.blobs["pc"], np.array([1, 5]), np.array([3, 3], np.int8))
    assert isinstance(again, BlobPatch) and again.base is first.blobs["pc"]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"blobs": {"eo": np.zeros(64, np.uint8)}}, "no 'eo'"),
    ({"blobs": {"pc": np.zeros(63, np.uint8)}}, r"\(63,\)"),
    ({"blobs": {"pc": np.zeros(64, np.int16)}}, "int16"),
    ({"twin": {3: np.zeros((1, 5), np.int8)}}, "twin tensor 3"),
])
def test_bad_publish_keeps_the_current_set(kwargs, match) -> None:
    store = _store()
    before = store.current
    with pytest.raises(WeightsError, match=match):
        store.publish(**kwargs)
    assert store.current is before


def test_patch_offsets_are_checked() -> None:
    base = np.zeros(16, np.uint8)
    with pytest.raises(WeightsError, match="outside"):
        make_patch(base, np.array([3, 16]), np.array([1, 2], np.int8))
    with pytest.raises(WeightsError, match="offset"):
        make_patch(base, np.array([3]), np.array([1, 2], np.int8))
    with pytest.raises(WeightsError, match="int8"):
        make_patch(base, np.array([3]), np.array([1.0]))


def test_a_refusing_target_publishes_nothing() -> None:
    store = _store()
    seen = []

    class Target:
        def stage(self, parameters) -> None:
            seen.append(parameters.version)
            if int(parameters.twin[3][0, 0]) == 9:
                raise WeightsError("upload failed")

    store.add_target(Target())
    store.publish(twin={3: np.ones((1, 4), np.int8)})
    good = store.current
    with pytest.raises(WeightsError):
        store.publish(twin={3: np.full((1, 4), 9, np.int8)})
    assert store.current is good and seen == [1, 2]  # refused set: staged, never current
    assert store.publish(twin={3: np.full((1, 4), 5, np.int8)}).version == 2  # refused number reused


def test_a_target_outside_the_interface_is_refused() -> None:
    """Something without stage(parameters) would never see a published set: refused when added."""
    store = _store()

    class Uploading:
        def upload(self, blob, version) -> None:
            raise AssertionError("never called")

    with pytest.raises(TypeError, match="Uploading is not a ParameterTarget"):
        store.add_target(Uploading())
    assert store.publish(twin={3: np.ones((1, 4), np.int8)}).version == 1


def test_readers_never_see_a_mixed_version() -> None:
    """A writer publishes blob + twin pairs that carry the same value; readers check every snapshot."""
    store = ParameterStore({"pc": np.full(4096, 0x80, np.uint8)}, {0: np.zeros(4096, np.int8)})
    stop = threading.Event()
    bad: list[int] = []

    def reader() -> None:
        while not stop.is_set():
            params = store.current
            value = int(params.twin[0][0])
            blob = params.blob("pc")
            if not (np.all(params.twin[0] == value) and np.all(device_to_int8(blob) == value)):
                bad.append(params.version)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    offsets = np.arange(4096)
    for i in range(300):
        value = np.int8(i % 200 - 100)
        current = store.current
        store.publish(blobs={"pc": make_patch(current.blobs["pc"], offsets, np.full(4096, value, np.int8))},
                      twin={0: np.full(4096, value, np.int8)})
    stop.set()
    for t in threads:
        t.join()
    assert not bad and store.version == 300


def test_matmul_engine_publishes_through_the_store() -> None:
    from libredgetpu_ros.matmul.engine import MatMulEngine

    engine = MatMulEngine.from_template(256, backend="cpu")
    try:
        assert isinstance(engine._store, ParameterStore)
        rng = np.random.default_rng(0)
        w = rng.uniform(-0.01, 0.01, (256, 256)).astype(np.float32)
        report = engine.set_weights(w)
        params = engine._store.current
        assert report.version == params.version == 1
        blob, version = engine.current_blob()
        assert blob is params.blob("pc") and version == 1
        y, v = engine.matmul_versioned(np.ones(256, np.float32))
        assert v == 1 and y.shape == (256,)
    finally:
        engine.close()


def test_cpu_backend_runs_each_versions_twin_values() -> None:
    """Two trackers of one template on one process: each version's interpreter carries its own filter."""
    from libredgetpu_ros.robotics.spot import COLOR_PRESETS, SpotTracker

    image = np.zeros((64, 64, 3), np.uint8)
    image[4:12, 4:12] = (255, 0, 0)
    image[50:58, 50:58] = (0, 0, 255)
    red = SpotTracker.from_template(64, "red", backend="cpu")
    other = SpotTracker.from_template(64, "red", backend="cpu")
    try:
        other.set_color(COLOR_PRESETS["blue"])
        assert red.track(image).x_offset < -0.5 and other.track(image).x_offset > 0.5
        old = red.runner.parameters
        red.set_color(COLOR_PRESETS["blue"])
        outputs = red.runner.backend.run([red.model_input(image)], parameters=old)  # an older set still runs
        assert red.decoder.decode(next(iter(outputs.values()))).x_offset < -0.5
    finally:
        red.close()
        other.close()


def test_edgetpu_backend_streams_the_versions_eo_blob() -> None:
    """128x128 colour template keeps 512 KiB in its EXECUTION_ONLY blob: a new EO blob goes with the run."""
    from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend
    from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator
    from libredgetpu_ros.edgetpu.transport import RecordingTransport
    from libredgetpu_ros.robotics.template import TemplateRunner, load_template

    template = load_template("color_red_128x128")

    class Sim(SimulatedAccelerator):
        def __init__(self) -> None:
            super().__init__()
            self.payloads: list[bytes] = []

        def __call__(self, call):
            if call.kind == "bulk_write" and call.data is not None and len(call.data) > 8:
                self.payloads.append(call.data)
            if call.kind == "bulk_read" and call.endpoint == 0x81:
                return bytes(call.length)
            return super().__call__(call)

    sim = Sim()
    transport = RecordingTransport(sim, bus_path="test-reparam-eo", keep_payloads=True)
    backend = EdgeTpuBackend(transport=transport)
    backend.load(template.compiled_path, template.twin_path)
    runner = TemplateRunner(template, backend_object=backend)
    try:
        image = np.zeros((1, 128, 128, 3), np.uint8)
        runner.run([image])
        eo = runner.parameters.blobs["eo"]
        marker = np.frombuffer(b"REPARAM-EO-MARKER", np.uint8)
        offsets = np.arange(1000, 1000 + marker.size)
        runner.publish(blobs={"eo": make_patch(eo, offsets, device_to_int8(marker))})
        sim.payloads.clear()
        transport.calls.clear()  # keep_payloads: the test reads the streamed bytes
        runner.run([image])
        assert any(b"REPARAM-EO-MARKER" in p for p in sim.payloads)
        sim.payloads.clear()
        backend.run([image])  # without a parameter set: the compiled blob again
        assert not any(b"REPARAM-EO-MARKER" in p for p in sim.payloads)
    finally:
        runner.close()


def test_a_published_template_does_not_follow_the_callers_array() -> None:
    from libredgetpu_ros.robotics.pattern import PatternTracker
    from libredgetpu_ros.robotics.template import load_template

    tracker = PatternTracker(load_template("pattern_64x64_8x8_1ch"), backend="none")
    values = np.ones((8, 8, 1), np.int8)
    tracker.set_template_raw(values)
    values[:] = 5  # the caller reuses its buffer
    assert (tracker.weights() == 1).all()


@pytest.mark.parametrize("source", ["view", "reshaped", "read_only_view", "bytearray", "read_only_bytearray"])
def test_a_published_set_does_not_follow_writable_memory_behind_a_view(source) -> None:
    """A view of a caller's writable buffer (a slice, a reshape, a view the caller marked read-only, a
    bytearray) is copied at publish: changing the buffer later leaves the published set as it was."""
    store = ParameterStore({"pc": np.zeros(16, np.uint8)}, {3: np.zeros((4, 4), np.int8)})
    in_bytes = source.endswith("bytearray")
    buffer = bytearray(32) if in_bytes else np.zeros(32, np.int8)
    if in_bytes:
        whole = np.frombuffer(buffer, np.int8)
        if source == "read_only_bytearray":  # a read-only array over memory that is not
            whole.setflags(write=False)
        values = whole[:16].reshape(4, 4)
        blob = whole[16:].view(np.uint8)
    else:
        values = buffer[:16].reshape(4, 4) if source == "reshaped" else buffer[:16].view().reshape(4, 4)
        blob = buffer[16:].view(np.uint8)
        if source == "read_only_view":
            values.setflags(write=False)
            blob.setflags(write=False)
    new = store.publish({"pc": blob}, {3: values})
    if in_bytes:
        buffer[:] = b"\x07" * 32
    else:
        buffer[:] = 7
    assert (new.twin[3] == 0).all() and (new.blob("pc") == 0).all()
    assert not new.twin[3].flags.writeable and not new.blob("pc").flags.writeable


def test_arrays_owning_their_memory_are_published_without_a_copy() -> None:
    """What the swaps build (fresh arrays) is kept as is, only marked read-only: no copy on the hot path."""
    store = ParameterStore({"pc": np.zeros(16, np.uint8)}, {3: np.zeros((4, 4), np.int8)})
    blob, values = np.ones(16, np.uint8), np.ones((4, 4), np.int8)
    new = store.publish({"pc": blob}, {3: values})
    assert new.blob("pc") is blob and new.twin[3] is values and not values.flags.writeable
