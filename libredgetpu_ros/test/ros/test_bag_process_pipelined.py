"""process-bag pipelined (frames read ahead on a reader thread, results serialized and written behind on a
writer thread) against everything in one thread: the same output bag message for message (raw and JPEG
frames, damaged frames counted the same, annotated images, mcap and sqlite3 input); an exception on either
thread is the command's error (never a thread dying silently, never a published output); Ctrl-C publishes
every processed frame's results, as in one thread."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ._camera_bags import (
    COMPRESSED,
    COMPRESSED_IMAGE,
    RAW,
    classify_config,
    decoded,
    image_cdr,
    open_camera_bag,
)

pytestmark = pytest.mark.ros  # process-bag runs the nodes' processing and rclpy's serializers

FRAMES = 38  # more than two batches of the reader (16 frames) and of the writer (16 frames), not a multiple


def _bag(path: Path, rgb: np.ndarray, jpeg: bytes, storage: str) -> None:
    """FRAMES camera frames on /image_raw: shifted raw rgb8 / bgr8 frames, a JPEG frame, and damaged ones
    (truncated CDR, an unsupported encoding) among them."""
    with open_camera_bag(path, storage) as bag:
        bag.connection(RAW), bag.connection(COMPRESSED, COMPRESSED_IMAGE)
        for i in range(FRAMES):
            ns = (i + 1) * 10**8
            pixels = np.roll(rgb, 23 * i, axis=1)
            if i == 3:
                bag.write(RAW, ns, image_cdr(bag.store, np.ascontiguousarray(pixels), ns)[:500])  # truncated
            elif i == 8:
                bag.image(ns, pixels, encoding="32FC1")
            elif i == 10:
                bag.compressed(ns, jpeg)
            elif i % 3 == 1:
                bag.image(ns, pixels[:, :, ::-1], encoding="bgr8")
            else:
                bag.image(ns, pixels)


def _run(bag: Path, out: Path, config: Path, pipelined: bool) -> Any:
    from libredgetpu_ros.ros.bag_processing import BagProcessor, load_node_config

    return BagProcessor(load_node_config(config), log=lambda _: None).run(
        bag, out, topics=["/image_raw", "/image_raw/compressed"], progress=False, pipelined=pipelined)


def _raise_at_frame(monkeypatch: pytest.MonkeyPatch, frame: int, exc: BaseException) -> None:
    """The perception processor raises ``exc`` on its ``frame``-th processed frame (``monkeypatch.undo()``
    restores it)."""
    from libredgetpu_ros.ros.bag_nodes import processor_class

    node = processor_class("perception")
    messages, calls = node.messages, []

    def at_frame(self: Any, header: Any, rgb: np.ndarray, prepared: Any = None) -> Any:
        calls.append(1)
        if len(calls) == frame:
            raise exc
        return messages(self, header, rgb, prepared)

    monkeypatch.setattr(node, "messages", at_frame)


def _no_worker_threads() -> bool:
    return not [t for t in threading.enumerate() if t.name in ("bag-prefetch", "bag-writer")]


@pytest.fixture
def camera_bag(tmp_path: Path, fixture_path) -> Any:
    import cv2
    from libredgetpu_ros.perception.images import load_image

    rgb = load_image(fixture_path("images/cat.bmp"))
    jpeg = cv2.imencode(".jpg", rgb[:, :, ::-1])[1].tobytes()

    def make(storage: str = "mcap") -> Path:
        path = tmp_path / f"in_{storage}"
        _bag(path, rgb, jpeg, storage)
        return path

    return make


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_pipelined_and_one_thread_give_the_same_output(ros_env, tmp_path: Path, fixture_path, camera_bag,
                                                       storage: str) -> None:
    bag = camera_bag(storage)
    config = classify_config(tmp_path, fixture_path, publish_annotated=True)
    one = _run(bag, tmp_path / "one", config, pipelined=False)
    piped = _run(bag, tmp_path / "piped", config, pipelined=True)
    assert _no_worker_threads()
    counts = (one.frames, one.processed, one.written, dict(one.failures))
    assert counts == (FRAMES, FRAMES - 2, 2 * (FRAMES - 2), {"corrupt": 1, "encoding": 1})
    assert (piped.frames, piped.processed, piped.written, dict(piped.failures)) == counts
    expected = decoded(tmp_path / "one")
    assert {m[0] for m in expected} == {"/classification", "/annotated"}
    assert decoded(tmp_path / "piped") == expected


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_one_thread_reads_and_decodes_in_the_calling_thread(ros_env, tmp_path: Path, fixture_path,
                                                            camera_bag, monkeypatch, storage: str) -> None:
    """``pipelined=False`` is the one-thread reference the pipelined loop is compared with: no reader thread
    either, whatever the bag (a sqlite3 bag, or compressed frames among raw ones, were read on one)."""
    from libredgetpu_ros.ros import bag_reader

    bag = camera_bag(storage)
    decode, threads = bag_reader.decode, set()

    def recorded(*args: Any, **kwargs: Any) -> Any:
        threads.add(threading.current_thread().name)
        return decode(*args, **kwargs)

    monkeypatch.setattr(bag_reader, "decode", recorded)
    summary = _run(bag, tmp_path / "out", classify_config(tmp_path, fixture_path), pipelined=False)
    assert summary.frames == FRAMES
    assert threads == {threading.current_thread().name}


def test_an_error_on_the_reader_thread_is_the_commands_error(ros_env, tmp_path: Path, fixture_path,
                                                             camera_bag, monkeypatch) -> None:
    from libredgetpu_ros.ros import bag_reader

    bag = camera_bag()
    config = classify_config(tmp_path, fixture_path)
    decode = bag_reader.decode
    calls = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(threading.current_thread().name)
        if len(calls) == 6:
            raise RuntimeError("reader thread failed at frame 6")
        return decode(*args, **kwargs)

    monkeypatch.setattr(bag_reader, "decode", failing)
    with pytest.raises(RuntimeError, match="reader thread failed at frame 6"):
        _run(bag, tmp_path / "out", config, pipelined=True)
    assert set(calls) == {"bag-prefetch"}  # decoded on the reader thread, raised in the caller's
    assert not (tmp_path / "out").exists()  # an error removes the unfinished output
    assert _no_worker_threads()


def test_an_error_on_the_writer_thread_is_the_commands_error(ros_env, tmp_path: Path, fixture_path,
                                                             camera_bag, monkeypatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from libredgetpu_ros.cli.main import main
    from libredgetpu_ros.errors import OutputError
    from libredgetpu_ros.ros import bag_processing, bag_writer

    bag = camera_bag()
    config = classify_config(tmp_path, fixture_path)
    serializer = bag_writer.serializer
    where = []

    def failing(cls: type) -> Any:
        serialize = serializer(cls)

        def call(msg: Any) -> bytes:
            where.append(threading.current_thread().name)
            if len(where) == 5:
                raise OutputError("disk full while writing the 5th result")
            return serialize(msg)

        return call

    monkeypatch.setattr(bag_writer, "serializer", failing)
    monkeypatch.setattr(bag_processing, "PIPELINED", True)  # the command's default, stated
    code = main(["process-bag", str(bag), str(tmp_path / "out"), "--config", str(config), "--no-progress",
                 "--topics", "/image_raw", "/image_raw/compressed"])
    assert code == 2
    assert "disk full while writing the 5th result" in capsys.readouterr().err
    assert set(where) == {"bag-writer"}
    assert not (tmp_path / "out").exists()
    assert _no_worker_threads()


@pytest.mark.parametrize("pipelined", [False, True])
def test_ctrl_c_publishes_every_processed_frames_results(ros_env, tmp_path: Path, fixture_path, camera_bag,
                                                         monkeypatch, pipelined: bool) -> None:
    """Ctrl-C at the 7th processed frame: the output holds the 6 frames processed before it (results still
    queued for the writer thread are written first), the same messages as in one thread."""
    bag = camera_bag()
    config = classify_config(tmp_path, fixture_path)
    _raise_at_frame(monkeypatch, 7, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        _run(bag, tmp_path / "out", config, pipelined=pipelined)
    assert _no_worker_threads()
    got = decoded(tmp_path / "out")
    assert len([m for m in got if m[0] == "/classification"]) == 6
    monkeypatch.undo()
    _run(bag, tmp_path / "full", config, pipelined=False)
    assert got == [m for m in decoded(tmp_path / "full") if m[2] <= got[-1][2]]


@pytest.mark.parametrize("pipelined", [False, True])
def test_an_error_in_the_node_discards_the_output_and_stops_the_threads(ros_env, tmp_path: Path, fixture_path,
                                                                        camera_bag, monkeypatch,
                                                                        pipelined: bool) -> None:
    """A device failing at the 7th processed frame (results of earlier frames still queued for the writer):
    the error is the command's, no output appears, no worker thread is left running."""
    from libredgetpu_ros.errors import DeviceError

    bag = camera_bag()
    config = classify_config(tmp_path, fixture_path)
    _raise_at_frame(monkeypatch, 7, DeviceError("the accelerator went away"))
    with pytest.raises(DeviceError, match="went away"):
        _run(bag, tmp_path / "out", config, pipelined=pipelined)
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.*"))  # nor its hidden temporary
    assert _no_worker_threads()


def test_ctrl_c_while_waiting_for_the_writer_keeps_the_batch_being_handed_over(ros_env, tmp_path: Path,
                                                                               monkeypatch) -> None:
    """Ctrl-C while the frame loop waits for room in the writer's queue (the writer thread behind: the usual
    moment of a Ctrl-C when writing is the bottleneck): the batch being handed over is written too, so the
    published bag holds every frame given to the writer (its last batch was lost before)."""
    import _thread
    import time

    from libredgetpu_ros.bags.storage import new_bag
    from libredgetpu_ros.ros import bag_processing, bag_writer
    from rosbags.highlevel import AnyReader
    from std_msgs.msg import String

    serializer = bag_writer.serializer
    box: dict[str, Any] = {}

    def slow(cls: type) -> Any:
        serialize = serializer(cls)

        def call(msg: Any) -> bytes:
            results = box.get("results")
            if results is not None and not box.get("interrupted"):
                deadline = time.monotonic() + 30
                while not results._queue.full() and time.monotonic() < deadline:  # the loop is ahead
                    time.sleep(0.01)
                time.sleep(0.3)  # the frame loop now waits in its hand-over (the queue is full)
                box["interrupted"] = True
                _thread.interrupt_main()  # Ctrl-C, delivered to the frame loop's thread
            return serialize(msg)

        return call

    monkeypatch.setattr(bag_writer, "serializer", slow)
    given = 0
    with pytest.raises(KeyboardInterrupt), new_bag(tmp_path / "out", "mcap") as writer, \
            bag_processing._result_writer(writer, lambda topic: f"/{topic}", {"text": String},
                                          thread=True) as results:
        box["results"] = results
        for i in range(128):
            given += 1
            results.write((i + 1) * 10**6, [("text", String(data=str(i)))])
    assert box.get("interrupted") and given < 128
    assert _no_worker_threads()
    with AnyReader([tmp_path / "out"]) as reader:
        got = [reader.deserialize(raw, c.msgtype).data for c, _, raw in reader.messages()]
    assert got == [str(i) for i in range(given)]


def test_large_results_are_handed_over_before_a_full_batch(ros_env, tmp_path: Path) -> None:
    """Frames with large results (annotated images) go to the writer thread once their pixels reach the
    batch's byte budget (4 MiB), not only after a batch of 16 frames: the queued results' memory stays
    bounded (16 annotated 1080p frames a batch would be ~100 MB); every frame is written, in order."""
    from libredgetpu_ros.bags.storage import new_bag
    from libredgetpu_ros.ros import bag_processing
    from rosbags.highlevel import AnyReader
    from sensor_msgs.msg import Image

    def image(i: int) -> Image:
        msg = Image(height=480, width=640, encoding="rgb8", step=640 * 3)
        msg.data = bytes([i]) * (640 * 480 * 3)
        return msg

    with new_bag(tmp_path / "out", "mcap") as writer, \
            bag_processing._result_writer(writer, lambda topic: f"/{topic}", {"annotated": Image},
                                          thread=True) as results:
        pending = []
        for i in range(6):
            results.write((i + 1) * 10**6, [("annotated", image(i))])
            pending.append(len(results._batch))
    assert pending == [1, 2, 3, 4, 0, 1]  # 5 frames of 0.92 MB reach 4 MiB: that batch went
    with AnyReader([tmp_path / "out"]) as reader:
        got = [reader.deserialize(raw, c.msgtype).data[0] for c, _, raw in reader.messages()]
    assert got == list(range(6))


POSENET = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"


@pytest.mark.parametrize("task", ["classify", "pose"])
def test_the_model_input_is_prepared_on_the_reader_thread(ros_env, tmp_path: Path, fixture_path, camera_bag,
                                                          monkeypatch, task: str) -> None:
    """Pipelined, the perception processor's first stage (``prepare``: resize, quantize) runs on the reader
    thread for every decoded frame and only inference + post-processing + messages on the loop's thread;
    the output is the one-thread loop's, message for message."""
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline

    bag = camera_bag()
    extra = {} if task == "classify" else {"model": str(fixture_path(POSENET)), "task": "pose"}
    config = classify_config(tmp_path, fixture_path, publish_annotated=True, **extra)
    one = _run(bag, tmp_path / "one", config, pipelined=False)
    stages: dict[str, list[str]] = {"prepare": [], "run": []}
    for stage in stages:
        method = getattr(PerceptionPipeline, stage)

        def recorded(self: Any, arg: Any, _method: Any = method, _stage: str = stage) -> Any:
            stages[_stage].append(threading.current_thread().name)
            return _method(self, arg)

        monkeypatch.setattr(PerceptionPipeline, stage, recorded)
    piped = _run(bag, tmp_path / "piped", config, pipelined=True)
    here = threading.current_thread().name
    assert piped.processed == one.processed == FRAMES - 2
    # the warm-up (first frame, in the loop's thread) + every decoded frame on the reader thread
    assert sorted(stages["prepare"]) == sorted([here] + ["bag-prefetch"] * (FRAMES - 2))
    assert stages["run"] == [here] * (FRAMES - 1)
    assert decoded(tmp_path / "piped") == decoded(tmp_path / "one")


def _refuse_one_frame(monkeypatch: pytest.MonkeyPatch, target: np.ndarray, exc: Exception) -> None:
    """The pipeline's first stage raises ``exc`` on the frame equal to ``target`` (whichever thread)."""
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline

    prepare = PerceptionPipeline.prepare

    def refusing(self: Any, rgb: np.ndarray) -> Any:
        if rgb.shape == target.shape and np.array_equal(rgb, target):
            raise exc
        return prepare(self, rgb)

    monkeypatch.setattr(PerceptionPipeline, "prepare", refusing)


def test_a_frame_refused_by_the_first_stage_fails_as_in_one_thread(ros_env, tmp_path: Path, fixture_path,
                                                                   camera_bag, monkeypatch) -> None:
    """A frame ``prepare`` refuses on the reader thread is that frame's failure, counted and logged as in the
    one-thread loop (not a reader-thread crash); the other frames' results are the same."""
    from libredgetpu_ros.errors import ImageError
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.ros.bag_processing import BagProcessor, load_node_config

    bag = camera_bag()
    config = classify_config(tmp_path, fixture_path)
    target = np.roll(load_image(fixture_path("images/cat.bmp")), 23 * 5, axis=1)  # frame 5, raw rgb8
    _refuse_one_frame(monkeypatch, target, ImageError("refused in prepare"))
    runs = {}
    for pipelined in (False, True):
        logged: list[str] = []
        summary = BagProcessor(load_node_config(config), log=logged.append).run(
            bag, tmp_path / f"out{pipelined}", topics=["/image_raw", "/image_raw/compressed"], progress=False,
            pipelined=pipelined)
        runs[pipelined] = (summary.frames, summary.processed, dict(summary.failures), logged)
    assert runs[True] == runs[False]
    assert runs[True][:3] == (FRAMES, FRAMES - 3, {"corrupt": 1, "encoding": 1, "image": 1})
    first = "warning: skipping frames (image), first: /image_raw at 600000000: refused in prepare"
    assert first in runs[True][3]
    assert decoded(tmp_path / "outTrue") == decoded(tmp_path / "outFalse")
    assert _no_worker_threads()


@pytest.mark.parametrize("pipelined", [False, True])
def test_an_unexpected_error_in_the_first_stage_is_the_commands_error(ros_env, tmp_path: Path, fixture_path,
                                                                      camera_bag, monkeypatch,
                                                                      pipelined: bool) -> None:
    """An error ``prepare`` raises that is not a frame's refusal stops the command in the loop, as any such
    error of the node does (no output, no thread left), pipelined or not."""
    from libredgetpu_ros.perception.images import load_image

    bag = camera_bag()
    target = np.roll(load_image(fixture_path("images/cat.bmp")), 23 * 5, axis=1)
    _refuse_one_frame(monkeypatch, target, RuntimeError("resize failed"))
    with pytest.raises(RuntimeError, match="resize failed"):
        _run(bag, tmp_path / "out", classify_config(tmp_path, fixture_path), pipelined=pipelined)
    assert not (tmp_path / "out").exists()
    assert _no_worker_threads()


def test_no_frame_is_read_or_prepared_ahead_before_the_clock_starts(ros_env, tmp_path: Path, fixture_path,
                                                                   camera_bag, monkeypatch) -> None:
    """The reader thread hands over the first frame (the warm-up's) and waits for the clock: the steady rate
    (``fps``, ``cpu_s``) counts the reading, decoding and preparing of every frame after the first."""
    from libredgetpu_ros.ros import bag_reader

    decode, resume = bag_reader.decode, bag_reader.FrameReader.resume
    decoded_frames: list[str] = []
    at_resume: list[int] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        decoded_frames.append(threading.current_thread().name)
        return decode(*args, **kwargs)

    def resumed(self: Any) -> None:
        at_resume.append(len(decoded_frames))
        resume(self)

    monkeypatch.setattr(bag_reader, "decode", recorded)
    monkeypatch.setattr(bag_reader.FrameReader, "resume", resumed)
    summary = _run(camera_bag(), tmp_path / "out", classify_config(tmp_path, fixture_path), pipelined=True)
    assert at_resume == [1]
    assert summary.frames == len(decoded_frames) == FRAMES
    assert set(decoded_frames) == {"bag-prefetch"}
