"""``process-bags``' local worker pool (``ros/fleet.run_local``): a worker that dies while idle, between two
bags (killed, out of memory), is replaced and the bag handed to it runs on the fresh one; the run goes on
(the send to the dead worker's pipe was a BrokenPipeError that ended the whole corpus; then the send to a
replacement that died too). A bag no fresh worker takes fails after a bounded number of them."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any


def _wait_dead(pid: int, timeout_s: float = 10.0) -> None:
    """Until ``pid`` (a child of this process) has exited: a zombie or gone, its pipe ends closed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.02)
    raise AssertionError(f"worker {pid} still alive {timeout_s} s after SIGKILL")


def test_a_worker_killed_between_bags_is_replaced_and_the_run_goes_on(tmp_path: Path,
                                                                     monkeypatch: Any) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the spawned workers import it by this name
    import _slow_bags
    from libredgetpu_ros.ros.fleet import BagJob, run_local

    # Bags that fail fast and the same way on any worker, without ROS (the Python-version runs have none):
    # what is tested is the pool, not the processing (test/bags/test_process_bags.py runs real corpora).
    jobs = [BagJob(name=f"b{i}", input=str(tmp_path / f"in{i}"), output=str(tmp_path / "out" / f"b{i}"),
                   staging=str(tmp_path / "staging" / str(i)), config=str(tmp_path / "absent.yaml"))
            for i in range(3)]
    records: list[dict[str, Any]] = []
    killed: set[int] = set()

    def on_record(record: dict[str, Any]) -> None:
        records.append(record)
        pid = record["worker"]
        if pid not in killed and pid != os.getpid():  # every worker dies idle after its first bag
            killed.add(pid)
            os.kill(pid, signal.SIGKILL)
            _wait_dead(pid)

    run_local(jobs, 2, on_record, quiet=True, runner=_slow_bags.fails_fast)
    assert sorted(r["bag"] for r in records) == ["b0", "b1", "b2"]
    assert all(r["status"] == "error" and "absent.yaml" in r["error"] for r in records), records
    assert len({r["worker"] for r in records}) == 3  # the third bag ran on a fresh worker


def _run_killing(tmp_path: Path, monkeypatch: Any,
                 doomed: set[int]) -> tuple[list[dict[str, Any]], list[int]]:
    """Four fast bags on one worker process (a bag timeout: never in this process); the worker is killed
    idle after its first bag, and the worker processes started ``doomed`` (0: the first) are killed as soon
    as they start, before a bag is handed to them (a machine killing new processes: memory, limits)."""
    import multiprocessing.context

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the spawned workers import it by this name
    import _slow_bags
    from libredgetpu_ros.ros.fleet import BagJob, run_local

    started: list[int] = []
    spawn_start = multiprocessing.context.SpawnProcess.start

    def start(process: Any) -> None:
        spawn_start(process)
        started.append(process.pid)
        if len(started) - 1 in doomed:
            os.kill(process.pid, signal.SIGKILL)
            _wait_dead(process.pid)

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start)
    jobs = [BagJob(name=f"b{i}", input=str(tmp_path / f"in{i}"), output=str(tmp_path / "out" / f"b{i}"),
                   staging=str(tmp_path / "staging" / str(i)), config=str(tmp_path / "absent.yaml"))
            for i in range(4)]
    records: list[dict[str, Any]] = []

    def on_record(record: dict[str, Any]) -> None:
        records.append(record)
        if len(records) == 1:
            os.kill(record["worker"], signal.SIGKILL)
            _wait_dead(record["worker"])

    run_local(jobs, 1, on_record, quiet=True, bag_timeout_s=120, runner=_slow_bags.fails_fast)
    return records, started


def test_a_replacement_worker_found_dead_too_is_replaced_again(tmp_path: Path, monkeypatch: Any) -> None:
    # the first worker dies idle, its replacement dies before taking b1 (the second BrokenPipeError ended
    # the corpus): the next one takes it
    records, started = _run_killing(tmp_path, monkeypatch, {1})
    assert [r["bag"] for r in records] == ["b0", "b1", "b2", "b3"]
    assert all("absent.yaml" in r["error"] for r in records), records  # each ran (and failed its own way)
    assert [r["worker"] for r in records] == [started[0]] + [started[2]] * 3


def test_a_bag_no_fresh_worker_takes_fails_and_the_corpus_goes_on(tmp_path: Path, monkeypatch: Any) -> None:
    from libredgetpu_ros.ros.fleet import HAND_OVER_REPLACEMENTS

    # every replacement dies before taking b1: b1 fails, named why, after a bounded number; b2 and b3 run
    records, started = _run_killing(tmp_path, monkeypatch, set(range(1, 1 + HAND_OVER_REPLACEMENTS)))
    assert [r["bag"] for r in records] == ["b0", "b1", "b2", "b3"]
    assert records[1]["status"] == "error"
    assert records[1]["error"].startswith(f"no worker process would take this bag: "
                                          f"{HAND_OVER_REPLACEMENTS + 1} tried in a row, each dead when "
                                          f"handed it (last: BrokenPipeError"), records[1]
    assert all("absent.yaml" in r["error"] for r in records[2:]), records
    assert len(started) == HAND_OVER_REPLACEMENTS + 2  # bounded: one more, which took b2 and b3
    assert [r["worker"] for r in records[2:]] == [started[-1]] * 2


def _refusing_starts(monkeypatch: Any, allowed: int, refusal: BaseException | None = None) -> list[Any]:
    """SpawnProcess.start raises ``refusal`` (default: OSError EAGAIN, as fork does at a process limit) after
    ``allowed`` starts; the processes that started (kept here: their exit codes say who ended them)."""
    import errno
    import multiprocessing.context

    started: list[Any] = []
    spawn_start = multiprocessing.context.SpawnProcess.start

    def start(process: Any) -> None:
        if len(started) >= allowed:
            raise refusal or OSError(errno.EAGAIN, "Resource temporarily unavailable")
        spawn_start(process)
        started.append(process)

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start)
    return started


def test_workers_that_cannot_start_leave_the_corpus_to_those_that_did(tmp_path: Path, monkeypatch: Any,
                                                                      capsys: Any) -> None:
    # 3 workers asked, the machine lets 1 start (it ended the whole command): every bag runs on that one,
    # and a line says how many could not start
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import _slow_bags
    from libredgetpu_ros.ros.fleet import BagJob, run_local

    started = _refusing_starts(monkeypatch, 1)
    jobs = [BagJob(name=f"b{i}", input=str(tmp_path / f"in{i}"), output=str(tmp_path / "out" / f"b{i}"),
                   staging=str(tmp_path / "staging" / str(i)), config=str(tmp_path / "absent.yaml"))
            for i in range(4)]
    records: list[dict[str, Any]] = []
    run_local(jobs, 3, records.append, runner=_slow_bags.fails_fast)
    assert sorted(r["bag"] for r in records) == ["b0", "b1", "b2", "b3"]
    assert all("absent.yaml" in r["error"] for r in records), records
    assert {r["worker"] for r in records} == {p.pid for p in started} and len(started) == 1
    assert "2 of 3 worker processes could not start (BlockingIOError: [Errno 11]" in capsys.readouterr().err


def test_no_worker_starting_is_one_clear_error(tmp_path: Path, monkeypatch: Any) -> None:
    import pytest
    from libredgetpu_ros.errors import OutputError
    from libredgetpu_ros.ros.fleet import BagJob, run_local

    _refusing_starts(monkeypatch, 0)
    jobs = [BagJob(name="b0", input=str(tmp_path / "in0"), output=str(tmp_path / "out" / "b0"),
                   staging=str(tmp_path / "staging" / "0"), config=str(tmp_path / "absent.yaml"))]
    with pytest.raises(OutputError, match=r"could not start a worker process \(BlockingIOError: \[Errno 11"):
        run_local(jobs, 2, lambda record: None, bag_timeout_s=60)


def test_an_interrupt_while_the_pool_starts_kills_the_workers_already_started(tmp_path: Path,
                                                                             monkeypatch: Any) -> None:
    import pytest
    from libredgetpu_ros.ros.fleet import BagJob, run_local

    started = _refusing_starts(monkeypatch, 1, KeyboardInterrupt())  # Ctrl-C while the second one starts
    jobs = [BagJob(name=f"b{i}", input=str(tmp_path / f"in{i}"), output=str(tmp_path / "out" / f"b{i}"),
                   staging=str(tmp_path / "staging" / str(i)), config=str(tmp_path / "absent.yaml"))
            for i in range(2)]
    with pytest.raises(KeyboardInterrupt):
        run_local(jobs, 2, lambda record: None, bag_timeout_s=60)
    # killed by run_local's cleanup (SIGKILL, -9); left out of it, the worker would have lived on until
    # its pipe's end was collected, then returned by itself (0)
    assert len(started) == 1 and started[0].exitcode == -9, started


def test_no_bags_start_no_worker(monkeypatch: Any) -> None:
    from libredgetpu_ros.ros.fleet import run_local

    started = _refusing_starts(monkeypatch, 0)
    run_local([], 4, lambda record: None, bag_timeout_s=60)  # an OutputError "could not start" before
    assert started == []


def test_a_bag_over_the_timeout_has_its_worker_killed_and_the_run_goes_on(tmp_path: Path,
                                                                          monkeypatch: Any) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the spawned workers import it by this name
    import _slow_bags
    from libredgetpu_ros.ros.fleet import BagJob, run_local

    jobs = [BagJob(name=f"b{i}", input=str(tmp_path / f"in{i}"), output=str(tmp_path / "out" / f"b{i}"),
                   staging=str(tmp_path / "staging" / str(i)), config="unused.yaml") for i in range(4)]
    for workers in (2, 1):  # one worker: the bags run in a worker process too, or nothing could end b1
        records: list[dict[str, Any]] = []
        begin = time.monotonic()
        run_local(jobs, workers, records.append, quiet=True, bag_timeout_s=1.5, runner=_slow_bags.stuck_on_b1)
        assert time.monotonic() - begin < 60
        by_bag = {r["bag"]: r for r in records}
        assert sorted(by_bag) == ["b0", "b1", "b2", "b3"]
        assert by_bag["b1"]["status"] == "error"
        assert by_bag["b1"]["error"] == ("still running after the bag timeout (1.5 s): its worker was killed")
        assert not (tmp_path / "staging" / "1").exists()  # its partial output is gone
        assert all(by_bag[b]["status"] == "done" and by_bag[b]["worker"] != os.getpid()
                   for b in ("b0", "b2", "b3"))
        assert by_bag["b1"]["worker"] not in {by_bag[b]["worker"] for b in ("b0", "b2", "b3")} or workers == 1


def test_a_local_bag_publishing_when_its_timeout_passes_is_not_killed(tmp_path: Path,
                                                                       monkeypatch: Any) -> None:
    """A worker asks before renaming a finished bag into place and the command stops timing it: the output
    on disk and the record agree (it was killed mid-rename: an output on disk, its record "timed out")."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the spawned workers import it by this name
    import _slow_bags
    from libredgetpu_ros.ros.fleet import BagJob, run_local

    jobs = [BagJob(name=f"b{i}", input="in", output=str(tmp_path / "out" / f"b{i}"),
                   staging=str(tmp_path / "st" / str(i)), config="unused.yaml") for i in range(2)]
    records: list[dict[str, Any]] = []
    # 3 s: the timeout counts from the hand-over, so it covers a worker process starting on a loaded machine
    run_local(jobs, 2, records.append, quiet=True, bag_timeout_s=3.0, runner=_slow_bags.publishes_slowly)
    assert sorted(r["bag"] for r in records) == ["b0", "b1"]
    assert all(r["status"] == "done" and r["error"] is None for r in records), records
    assert all((tmp_path / "out" / f"b{i}" / "bag.mcap").read_bytes() == b"x" for i in range(2))


def test_a_bag_timeout_must_be_finite_and_positive(tmp_path: Path) -> None:
    import pytest
    from libredgetpu_ros.ros.fleet import run_local

    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="bag timeout"):
            run_local([], 2, print, bag_timeout_s=bad)


def test_a_ray_task_over_the_timeout_ends_its_worker_and_its_record_says_why(tmp_path: Path) -> None:
    """The Ray side without a cluster: the watchdog's action in a process of its own (it ends that process),
    then the record the driver makes of the failed task."""
    import multiprocessing

    from libredgetpu_ros.ros.fleet import BagJob
    from libredgetpu_ros.ros.fleet_ray import _lost, _over_time

    job = BagJob(name="b1", input="in", output=str(tmp_path / "out" / "b1"),
                 staging=str(tmp_path / "st" / "1"), config="unused.yaml")
    (tmp_path / "st" / "1").mkdir(parents=True)
    (tmp_path / "st" / "1" / "partial").write_bytes(b"x")
    assert "worker died" in _lost(job, RuntimeError("worker died"))["error"]  # no timeout: Ray's own words
    process = multiprocessing.get_context("spawn").Process(target=_over_time, args=(job, 2.5))
    process.start()
    process.join(30)
    assert process.exitcode == 3
    assert not (tmp_path / "st" / "1").exists()
    record = _lost(job, RuntimeError("The worker died unexpectedly"))
    assert record["status"] == "error"
    assert record["error"] == "still running after the bag timeout (2.5 s): its Ray worker was ended"


def _slow_task(tmp_path: Path, monkeypatch: Any, slow: str) -> tuple[int | None, Path, Any]:
    import json
    import multiprocessing
    from dataclasses import asdict

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the spawned process imports it by this name
    import _slow_bags
    from libredgetpu_ros.ros.fleet import BagJob

    (tmp_path / "st").mkdir()
    job = BagJob(name="b1", input="in", output=str(tmp_path / "out" / "b1"),
                 staging=str(tmp_path / "st" / "1"), config="unused.yaml")
    result = tmp_path / "record.json"
    process = multiprocessing.get_context("spawn").Process(
        target=_slow_bags.ray_task_slow, args=(asdict(job), 1.0, slow, str(result)))
    process.start()
    process.join(60)
    return process.exitcode, result, job if not result.exists() else json.loads(result.read_text())


def test_a_ray_task_publishing_when_its_timeout_passes_is_not_ended(tmp_path: Path, monkeypatch: Any) -> None:
    """Once the bag is being renamed into place the watchdog stands down: the output on disk and the record
    agree (the worker was ended after the rename: an output on disk, its record "timed out")."""
    code, result, record = _slow_task(tmp_path, monkeypatch, "publish")
    assert code == 0 and result.exists(), code
    assert record["status"] == "done" and record["error"] is None, record
    assert (tmp_path / "out" / "b1" / "bag.mcap").read_bytes() == b"x"
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == []  # no timed-out marker


def test_a_ray_task_still_processing_at_its_timeout_is_ended_and_publishes_nothing(tmp_path: Path,
                                                                                  monkeypatch: Any) -> None:
    from libredgetpu_ros.ros.fleet_ray import _lost

    code, result, job = _slow_task(tmp_path, monkeypatch, "process")
    assert code == 3 and not result.exists()
    assert not (tmp_path / "out").exists()  # the watchdog won: the bag never reaches its final name
    assert [p.name for p in (tmp_path / "st").iterdir()] == ["1.timed-out"]
    record = _lost(job, RuntimeError("The worker died unexpectedly"))
    assert record["error"] == "still running after the bag timeout (1 s): its Ray worker was ended"
    assert list((tmp_path / "st").iterdir()) == []  # the marker is removed once read


def test_process_bags_refuses_a_bad_bag_timeout(tmp_path: Path, capsys: Any) -> None:
    from libredgetpu_ros.cli.main import main

    for bad in ("0", "-3", "nan", "inf"):
        code = main(["process-bags", "--config", "c.yaml", "--output-dir", str(tmp_path / "o"),
                     "--bag-timeout", bad, str(tmp_path)])
        assert code == 2
        assert "--bag-timeout must be a finite number of seconds above 0" in capsys.readouterr().err
