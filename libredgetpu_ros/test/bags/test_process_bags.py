"""``process-bags`` on a real corpus (issue 35): seven bags made with ``make-bag`` from the fixture images
(mcap and sqlite3 folders, a single ``.mcap`` file, bags in sub-folders) and one broken bag, through
``--jobs 1`` and ``--jobs 2`` (and ``--engine ray`` in test_process_bags_ray.py): every output equal to
``process-bag``'s on the same bag, message for message; the broken bag reported with its error and the rest
processed (exit 1); kill -9 of the command mid-corpus leaves only whole outputs under final names."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from libredgetpu_ros.cli import main as cli

from .._helpers import load_helper

compare = load_helper(Path(__file__).resolve().parents[1] / "ros" / "_bag_compare.py")

pytestmark = pytest.mark.ros  # the nodes' processing and rclpy's serializers

CLASSIFY = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
IMAGES = ("images/cat.bmp", "images/grace_hopper.bmp", "images/test_couple.jpg")
# name -> (storage, image order, loops); "broken" is a bag whose data file is not MCAP
CORPUS = {"a": ("mcap", (0, 1), 1), "b": ("sqlite3", (1, 2), 1), "fleet/r1/c": ("mcap", (2, 0, 1), 1),
          "fleet/r2/c": ("sqlite3", (0,), 2), "fleet/r2/d": ("mcap", (1, 0), 1), "e.mcap": ("mcap", (2,), 2)}
EXPECTED_NAMES = {"a", "b", "r1/c", "r2/c", "r2/d", "e", "broken"}


def make_corpus(root: Path, fixture_path: Any, frames_scale: int = 1) -> list[Path]:
    """The corpus's inputs as given on the command line: bags, a folder of bags and a single-file bag."""
    for name, (storage, order, loops) in CORPUS.items():
        target = root / name.removesuffix(".mcap")
        target.parent.mkdir(parents=True, exist_ok=True)
        images = [str(fixture_path(IMAGES[i])) for i in order]
        assert cli.main(["make-bag", "--images", *images, "--out", str(target), "--rate", "10", "--storage",
                         storage, "--loop", str(loops * frames_scale), "--start", "100",
                         "--no-progress"]) == 0
        if name.endswith(".mcap"):  # a bare .mcap file as the bag
            shutil.move(target / f"{target.name}.mcap", root / name)
            shutil.rmtree(target)
    broken = root / "fleet" / "broken"
    broken.mkdir()
    (broken / "broken.mcap").write_bytes(b"\x89MCAP0\r\n" + b"\x00" * 64)  # a header and nothing whole
    (broken / "metadata.yaml").write_text((root / "a" / "metadata.yaml").read_text())
    return [root / "a", root / "b", root / "fleet", root / "e.mcap"]


def config(tmp: Path, fixture_path: Any, threshold: float = 0.0) -> Path:
    import yaml

    path = tmp / f"classify_{threshold}.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "model": str(fixture_path(CLASSIFY)), "backend": "cpu", "task": "classify", "top_k": 3,
        "max_results": 3, "score_threshold": threshold}}}))
    return path


def bag_messages(bag: Path) -> list[tuple[str, str, int, Any]]:
    """Every message of a bag, decoded into plain Python (CDR padding bytes are not compared)."""
    from libredgetpu_ros.bags.storage import open_reader
    from libredgetpu_ros.bags.typestore import typestore

    store = typestore()
    reader = open_reader(bag)
    try:
        return [(c.topic, c.msgtype, ts, compare.plain(store.deserialize_cdr(raw, c.msgtype)))
                for c, ts, raw in reader.messages()]
    finally:
        reader.close()


def outputs(out: Path) -> dict[str, Path]:
    from libredgetpu_ros.bags.corpus import outputs_in

    return outputs_in(out)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, fixture_path) -> tuple[Path, list[Path], Path]:
    root = tmp_path_factory.mktemp("corpus")
    return root, make_corpus(root / "in", fixture_path), config(root, fixture_path)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = cli.main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_jobs_1_and_2_give_process_bags_outputs_message_for_message(corpus, tmp_path: Path, capsys) -> None:
    _root, inputs, cfg = corpus
    runs = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        code, summary = _run(["process-bags", "--config", str(cfg), "-o", str(out), "--jobs", str(jobs),
                              "--json", "--no-progress", *map(str, inputs)], capsys)
        assert code == 1, "the broken bag makes the run fail"
        assert [r["bag"] for r in summary["bags"]] == ["a", "b", "broken", "r1/c", "r2/c", "r2/d", "e"]
        by_name = {r["bag"]: r for r in summary["bags"]}
        assert by_name["broken"]["status"] == "error" and "cannot read bag" in by_name["broken"]["error"]
        frames = {"a": 2, "b": 2, "r1/c": 3, "r2/c": 2, "r2/d": 2, "e": 2}
        for name, n in frames.items():
            assert by_name[name]["status"] == "done", by_name[name]
            assert (by_name[name]["frames"], by_name[name]["processed"], by_name[name]["failed"]) == (n, n, 0)
            assert by_name[name]["cpu_s"] > 0  # the frame loop's CPU time, beside its steady fps
        assert summary["totals"] | {"wall_s": 0, "fps": 0, "bag_seconds": 0} == {
            "bags": 7, "done": 6, "failed_bags": 1, "frames": 13, "processed": 13, "written": 13,
            "failed_frames": 0, "wall_s": 0, "fps": 0, "bag_seconds": 0, "not_started": 0}
        assert json.loads((out / "summary.json").read_text()) == summary
        assert set(outputs(out)) == set(frames)  # no output for the broken bag, nothing hidden left
        assert sorted(p.name for p in out.iterdir()) == ["a", "b", "e", "r1", "r2", "summary.json"]
        pids = {r["worker"] for r in summary["bags"]}
        assert pids == {os.getpid()} if jobs == 1 else os.getpid() not in pids and len(pids) <= 2
        runs[jobs] = out
    # the reference: process-bag on each bag, one by one
    for name, made in outputs(runs[1]).items():
        source = next(r["input"] for r in summary["bags"] if r["bag"] == name)
        single = tmp_path / "single" / name
        assert cli.main(["process-bag", source, str(single), "--config", str(cfg), "--no-progress"]) == 0
        reference = bag_messages(single)
        assert len(reference) == frames[name]  # one Classification per frame (no label file: no label map)
        assert bag_messages(made) == reference, name
        assert bag_messages(outputs(runs[2])[name]) == reference, name


def test_existing_outputs_are_never_replaced(corpus, tmp_path: Path, capsys) -> None:
    _root, inputs, cfg = corpus
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    (out / "a" / "mine.txt").write_text("keep")
    code, summary = _run(["process-bags", "--config", str(cfg), "-o", str(out), "--jobs", "1", "--json",
                          "--no-progress", str(inputs[0]), str(inputs[1])], capsys)
    assert code == 1
    assert [(r["bag"], r["status"]) for r in summary["bags"]] == [("a", "error"), ("b", "done")]
    assert "already exists" in summary["bags"][0]["error"]
    assert (out / "a" / "mine.txt").read_text() == "keep"
    assert list((out / "a").iterdir()) == [out / "a" / "mine.txt"]


def test_bad_input_is_refused_before_anything_runs(corpus, tmp_path: Path, capsys) -> None:
    root, inputs, cfg = corpus
    out = tmp_path / "out"
    # two bags named "c" given directly: their outputs would clash
    assert cli.main(["process-bags", "--config", str(cfg), "-o", str(out), str(root / "in/fleet/r1/c"),
                     str(root / "in/fleet/r2/c")]) == 2
    assert "same output 'c'" in capsys.readouterr().err
    assert cli.main(["process-bags", "--config", str(cfg), "-o", str(out), str(tmp_path / "nothing")]) == 2
    assert cli.main(["process-bags", "--config", str(tmp_path / "none.yaml"), "-o", str(out),
                     str(inputs[0])]) == 2
    assert not out.exists()


def test_kill_9_mid_corpus_leaves_only_whole_outputs(tmp_path: Path, fixture_path, ros_env) -> None:
    """SIGKILL of the command while its two workers are inside bags: every output under its final name is a
    whole bag with every frame's result; the partial ones are only in the hidden staging folder; the
    workers die with the command."""
    import psutil

    inputs = make_corpus(tmp_path / "in", fixture_path, frames_scale=20)
    cfg = config(tmp_path, fixture_path)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "libredgetpu_ros.cli.main", "process-bags", "--config",
                             str(cfg), "-o", str(out), "--jobs", "2", "--no-progress", *map(str, inputs)],
                            env=ros_env.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (out.is_dir() and any(
                not p.name.startswith(".") for p in out.iterdir())):
            time.sleep(0.05)  # until the first output is published: the other worker is mid-bag
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        workers = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        _gone, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, "workers outlived the command"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert not (out / "summary.json").exists()
    published = outputs(out)
    assert published, "nothing finished before the kill"
    assert len(published) < 6, "the kill came after the corpus was done: make the bags longer"
    counts = {"a": 2, "b": 2, "r1/c": 3, "r2/c": 4, "r2/d": 2, "e": 4}
    for name, bag in published.items():
        results = [m for m in bag_messages(bag) if m[1] == "vision_msgs/msg/Classification"]
        assert len(results) == counts[name] * 20, name
    hidden = [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert all(name.startswith(".process-bags.") for name in hidden), hidden


def test_edgetpu_backend_runs_one_local_worker(corpus, tmp_path: Path, capsys) -> None:
    """The Edge TPU backend opens the first accelerator, which one process can own: one worker, said on
    stderr (here, with no accelerator, the bag then fails with the device error and the run says so)."""
    _root, inputs, cfg = corpus
    code = cli.main(["process-bags", "--config", str(cfg), "-o", str(tmp_path / "out"), "--jobs", "2",
                     "--backend", "edgetpu", "--json", "--no-progress", str(inputs[0]), str(inputs[1])])
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert "one local worker" in captured.err and summary["workers"] == 1
    if code == 1:  # no accelerator here: each bag reports the device error, none is published
        assert all(r["status"] == "error" and r["error"] for r in summary["bags"])
        assert outputs(tmp_path / "out") == {}


def test_several_accelerators_give_each_local_worker_its_own(corpus, tmp_path: Path, capsys,
                                                             monkeypatch) -> None:
    """Three accelerators counted by the command (the count is the seam: the workers are spawned processes):
    two workers, worker i on device i, each bag's record naming its worker's device; here no accelerator is
    attached, so each pinned bag fails naming its device instead of falling back to the CPU."""
    from libredgetpu_ros.cli import process_bags_cmd
    from libredgetpu_ros.ros import fleet

    monkeypatch.setattr(fleet, "edgetpus", lambda: 3)
    assert process_bags_cmd._edgetpu_workers(8, "") == (3, ["0", "1", "2"])
    assert process_bags_cmd._edgetpu_workers(8, "usb:1-2") == (1, None)  # a pinned config keeps its device
    _root, inputs, cfg = corpus
    code = cli.main(["process-bags", "--config", str(cfg), "-o", str(tmp_path / "out"), "--jobs", "2",
                     "--backend", "auto", "--json", "--no-progress", *map(str, inputs[:2])])
    summary = json.loads(capsys.readouterr().out)
    assert summary["workers"] == 2
    pairs = {(r["worker"], r["device"]) for r in summary["bags"]}
    assert {device for _, device in pairs} <= {"0", "1"}
    # one device per worker, a different one for each worker
    assert len({w for w, _ in pairs}) == len({d for _, d in pairs}) == len(pairs)
    if code == 1:  # no accelerator here: the pinned device is missing, said, and no CPU output appears
        assert all(f"device '{r['device']}'" in r["error"] for r in summary["bags"]), summary["bags"]
        assert outputs(tmp_path / "out") == {}


def test_sigterm_mid_corpus_exits_130_with_whole_outputs_and_a_summary(tmp_path: Path, fixture_path,
                                                                        ros_env) -> None:
    """SIGTERM (as Ctrl-C) while the workers are inside bags: exit 130, the finished outputs whole and
    listed in summary.json (``interrupted``), the bags in progress removed, no staging folder left."""
    inputs = make_corpus(tmp_path / "in", fixture_path, frames_scale=20)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "libredgetpu_ros.cli.main", "process-bags", "--config",
                             str(config(tmp_path, fixture_path)), "-o", str(out), "--jobs", "2",
                             "--no-progress", *map(str, inputs)],
                            env=ros_env.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (out.is_dir() and any(
                not p.name.startswith(".") for p in out.iterdir())):
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130, proc.stderr.read().decode()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["totals"]["not_started"] > 0
    published = outputs(out)
    # a worker killed between publishing and reporting leaves a whole output without its record
    assert {r["bag"] for r in summary["bags"] if r["status"] == "done"} <= set(published)
    counts = {"a": 2, "b": 2, "r1/c": 3, "r2/c": 4, "r2/d": 2, "e": 4}
    for name, bag in published.items():
        assert len(bag_messages(bag)) == counts[name] * 20, name
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
