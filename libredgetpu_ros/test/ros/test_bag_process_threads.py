"""Which threads process-bag runs: ``pipelined=False`` does everything in the calling thread, whatever the
storage (mcap with chunk CRCs, sqlite3); pipelined, exactly one reader and one writer thread (the chunk CRCs
are verified by the reader, no CRC worker), both nicer than the loop's thread (``bag_threads.HELPER_NICE``).
Either way the output holds the same messages."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from .._helpers import load_helper

compare = load_helper(Path(__file__).resolve().parent / "_bag_compare.py")
pytestmark = pytest.mark.ros  # process-bag runs the node's processing and rclpy's serializers

CLASSIFY = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
IMAGES = ("images/cat.bmp", "images/grace_hopper.bmp")
LOOPS = 10  # 20 frames: more than one batch (16) of the reader and of the writer


def _inputs(tmp: Path, fixture_path: Any, storage: str) -> tuple[Path, Path]:
    """(a bag of the fixture images made by make-bag, which writes chunk CRCs to mcap; a classify config)."""
    import yaml
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag

    bag = tmp / f"in_{storage}"
    make_bag([fixture_path(name) for name in IMAGES], bag,
             MakeBagOptions(topic="/image_raw", rate=10.0, loop=LOOPS, start_ns=0, storage=storage),
             progress=False)
    config = tmp / "classify.yaml"
    config.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "model": str(fixture_path(CLASSIFY)), "backend": "cpu", "task": "classify", "top_k": 3,
        "max_results": 3, "score_threshold": 0.0, "cpu_threads": 1}}}))
    return bag, config


def _run(bag: Path, out: Path, config: Path, pipelined: bool, monkeypatch) -> tuple[Any, list[str], dict]:
    """The summary, the names of the Python threads started while the bag was processed and the nice value
    of each live thread, by name, seen from the loop's thread at its tenth frame."""
    from libredgetpu_ros.ros.bag_processing import BagProcessor, load_node_config

    started: list[str] = []
    nice: dict[str, int] = {}
    start = threading.Thread.start

    def recorded(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    processor = BagProcessor(load_node_config(config), log=lambda _: None)
    frame = processor._frame

    def observed(summary: Any, *args: Any) -> None:
        if summary.frames == 10:
            nice.update({t.name: os.getpriority(os.PRIO_PROCESS, t.native_id) for t in threading.enumerate()
                         if t.native_id is not None and t.is_alive()})
        frame(summary, *args)

    processor._frame = observed  # type: ignore[method-assign]
    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", recorded)
        summary = processor.run(bag, out, progress=False, pipelined=pipelined)
    return summary, started, nice


def _messages(bag: Path) -> list[tuple[str, int, Any]]:
    from rosbags.highlevel import AnyReader

    with AnyReader([bag]) as reader:  # decoded: rclpy leaves CDR alignment padding unzeroed
        return [(c.topic, ts, compare.plain(reader.deserialize(raw, c.msgtype)))
                for c, ts, raw in reader.messages()]


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_one_thread_loop_starts_no_thread_and_pipelined_exactly_two(ros_env, tmp_path: Path, fixture_path,
                                                                    monkeypatch, storage: str) -> None:
    bag, config = _inputs(tmp_path, fixture_path, storage)
    from libredgetpu_ros.ros.bag_threads import HELPER_NICE

    alone, started_alone, _ = _run(bag, tmp_path / "one", config, False, monkeypatch)
    piped, started_piped, nice = _run(bag, tmp_path / "piped", config, True, monkeypatch)
    frames = len(IMAGES) * LOOPS
    assert (alone.frames, alone.processed) == (frames, frames) == (piped.frames, piped.processed)
    assert started_alone == [], started_alone  # before: a reader thread for sqlite3, a CRC worker for mcap
    assert sorted(started_piped) == ["bag-prefetch", "bag-writer"], started_piped
    main = nice[threading.current_thread().name]  # the loop runs in the caller's thread
    assert HELPER_NICE > 0
    assert nice["bag-prefetch"] == nice["bag-writer"] == min(19, main + HELPER_NICE), nice
    one, two = _messages(tmp_path / "one"), _messages(tmp_path / "piped")
    assert len(one) == frames  # a classification per frame (no label file: no label map)
    assert [m[:2] for m in one] == [m[:2] for m in two]
    assert one == two
