"""``process-bags``: many bags through ``process-bag``'s one function, in local worker processes (this
module) or on a Ray cluster (``ros/fleet_ray.py``).

Every bag is one call of :func:`run_bag`, which runs :func:`bag_processing.process_bag` exactly as the
single-bag command does, so a bag's output is the same message for message whatever the engine, the worker
count or the order. A worker holds no state between bags (each call opens and closes its node).

Outputs never appear half-written: ``process_bag`` writes into a staging folder of this run,
``OUT/.process-bags.<random>.tmp/<n>/<name>`` (itself written through ``new_bag``: a hidden temporary renamed
into place once closed), and only a finished bag is then renamed onto its final name (``rename_noreplace``:
an existing output is never replaced, even by a race). An interrupted bag (Ctrl-C, SIGTERM: exit 130) is
removed from staging; after SIGKILL the staging folder stays, hidden, and holds the only partial bags (its
workers die with the command: ``PR_SET_PDEATHSIG``). A bag that fails (unreadable, no image topic, a
device error, a worker that crashed) is reported in its record and the others are processed.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from libredgetpu_ros.errors import LibrEdgeTpuError, OutputError

STAGING_PREFIX = ".process-bags."


@dataclass(frozen=True)
class BagJob:
    """One bag of a run: what ``process_bag`` needs, plus where its output is staged and published."""

    name: str  # the output's name under the output folder (bags.corpus)
    input: str
    output: str  # the final name
    staging: str  # this bag's own folder in the run's staging folder
    config: str
    node_type: str | None = None
    backend: str | None = None
    storage: str | None = None
    topics: tuple[str, ...] | None = None
    device: str | None = None  # replaces the config's `device` (a worker's own accelerator); None: kept


def edgetpus() -> int:
    """Edge TPUs attached to this machine (0 without libusb or permission)."""
    try:
        from libredgetpu_ros.edgetpu.device import list_devices

        return len(list_devices())
    except Exception:  # no libusb, no permission: no accelerator to share out
        return 0


def make_jobs(bags: Iterable[Any], out_dir: Path, staging: Path, config: str | Path, *,
              node_type: str | None = None, backend: str | None = None, storage: str | None = None,
              topics: list[str] | None = None) -> list[BagJob]:
    """A job per ``bags.corpus.CorpusBag``."""
    return [BagJob(name=bag.name, input=str(bag.input), output=str(bag.output(out_dir)),
                   staging=str(staging / str(i)), config=str(config), node_type=node_type, backend=backend,
                   storage=storage, topics=tuple(topics) if topics else None)
            for i, bag in enumerate(bags)]


def run_bag(job: BagJob, log: Callable[[str], None] | None = None,
            publishing: Callable[[], None] | None = None) -> dict[str, Any]:
    """Process one bag into its staging folder, then publish it; the bag's record (never raises but for
    KeyboardInterrupt: the interrupted bag is removed from staging first). ``publishing``: called once the
    bag is processed, just before it is renamed into place (a watchdog stands down there: the output on
    disk and the record then agree)."""
    from libredgetpu_ros.atomicio import make_folder, rename_noreplace
    from libredgetpu_ros.ros.bag_processing import process_bag

    begin = time.perf_counter()
    warnings: list[str] = []

    def note(text: str) -> None:
        warnings.append(text)
        if log is not None:
            log(f"{job.name}: {text}")

    record: dict[str, Any] = {"bag": job.name, "input": job.input, "output": job.output, "status": "error",
                              "frames": 0, "processed": 0, "written": 0, "failed": 0, "failures": {},
                              "fps": 0.0, "elapsed_s": 0.0, "setup_s": 0.0, "cpu_s": 0.0, "error": None,
                              "worker": os.getpid(), "device": job.device}
    final, staged = Path(job.output), Path(job.staging) / Path(job.output).name
    try:
        if final.exists():
            raise OutputError(f"output {final} already exists: not replaced (remove it or choose another "
                              f"--output-dir)")
        summary = process_bag(job.input, staged, job.config, backend=job.backend, storage=job.storage,
                              topics=list(job.topics) if job.topics else None, node_type=job.node_type,
                              progress=False, log=note, device=job.device)
        if publishing is not None:
            publishing()
        make_folder(final.parent)
        rename_noreplace(staged, final)
        done = summary.as_dict()
        record.update({key: done[key] for key in ("frames", "processed", "written", "failed", "failures",
                                                  "fps", "elapsed_s", "setup_s", "cpu_s", "topics")})
        record["status"] = "done" if summary.processed or not summary.frames else "failed"
        if record["status"] == "failed":
            record["error"] = "no frame could be processed"
    except KeyboardInterrupt:
        shutil.rmtree(job.staging, ignore_errors=True)  # a partial bag never reaches its final name
        raise
    except LibrEdgeTpuError as exc:
        record["error"] = str(exc)
    except Exception as exc:  # a bug or a library's failure on this bag: reported, the corpus goes on
        record["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(job.staging, ignore_errors=True)
    record["warnings"] = warnings
    record["wall_s"] = time.perf_counter() - begin
    return record


# A worker's question before it renames a finished bag into place, and the parent's answer: the parent
# answers only within the bag timeout (and then stops counting it), so a bag is either published and
# recorded done, or killed over time and never published, never both.
PUBLISH, GO = "publish?", "go"


def _send(conn: Connection, obj: Any) -> None:
    """``obj`` pickled to bytes, then sent. Not ``Connection.send``: it pickles into a BytesIO and sends a
    view of it; when the send fails (a dead worker: BrokenPipeError) the traceback keeps that view alive, and
    CPython 3.12.1's collector then freed the BytesIO under it ("deallocated BytesIO object has exported
    buffers", then a segmentation fault of the command, seen in the worker-replacement tests)."""
    conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _recv(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


def _worker(conn: Connection, quiet: bool, runner: Callable[..., dict[str, Any]] = run_bag) -> None:
    """A local worker process: bags in, records out (``runner``'s), until told to stop (``None``) or its
    parent dies. Before publishing a bag it asks the parent (``PUBLISH``) and waits for ``GO``."""
    from libredgetpu_ros.ros.environment import ensure_log_dir
    from libredgetpu_ros.ros.lifetime import stop_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interruption does
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    stop_with_parent(signal.SIGKILL)  # never outlives the command (kill -9 of it included)
    ensure_log_dir()
    while True:
        try:
            job = _recv(conn)
        except EOFError:
            return
        if job is None:
            return
        _send(conn, runner(BagJob(**job), None if quiet else _say, functools.partial(_ask_to_publish, conn)))


def _ask_to_publish(conn: Connection) -> None:
    """Wait for the parent's leave to publish (it kills this worker instead when the bag is over time)."""
    _send(conn, PUBLISH)
    if _recv(conn) != GO:
        raise OutputError("process-bags stopped this worker before its bag was published")


def _say(text: str) -> None:
    """A bag's warning, on stderr (stdout is the command's result)."""
    print(text, file=sys.stderr, flush=True)


@dataclass
class _Worker:
    process: Any
    conn: Connection
    job: BagJob | None = None
    deadline: float | None = None  # time.monotonic() past which its bag is over the timeout


def run_local(jobs: list[BagJob], workers: int, on_record: Callable[[dict[str, Any]], None], *,
              quiet: bool = False, devices: Sequence[str] | None = None, bag_timeout_s: float | None = None,
              runner: Callable[..., dict[str, Any]] = run_bag) -> None:
    """Run ``jobs`` on ``workers`` processes (1 without a timeout: in this process), calling ``on_record``
    per finished bag in completion order. ``devices``: worker i's accelerator (``devices[i]``, e.g. its
    index: every bag it runs opens that one; a replacement worker keeps it). A worker that dies mid-bag (a
    crash in a native library) fails that bag and is replaced; one found dead when handed a bag (killed
    while idle) is replaced and the bag runs on the fresh one (a bag no fresh worker takes after
    ``HAND_OVER_REPLACEMENTS`` of them fails, the others go on). ``bag_timeout_s``: a bag still running after
    that long has its worker killed (a read that never returns, a wedged device: nothing else would end
    it), fails, and the next bag runs on a fresh worker; a bag that asked to be published within it
    (``PUBLISH``) is let finish. ``runner``: what a worker runs per bag, ``runner(job, log, publishing)``
    (a module-level function: the spawned workers import it). KeyboardInterrupt: workers killed, then
    re-raised."""
    if devices is not None and len(devices) < workers:
        raise ValueError(f"{workers} workers but {len(devices)} devices")
    if bag_timeout_s is not None and not 0 < bag_timeout_s < float("inf"):
        raise ValueError(f"bag timeout {bag_timeout_s} s must be finite and above 0")
    if not jobs:
        return
    if workers <= 1 and bag_timeout_s is None:  # in this process: nothing could end a bag that never does
        for job in jobs:
            job = job if devices is None else replace(job, device=devices[0])
            on_record(runner(job, None if quiet else _say))
        return
    ctx = multiprocessing.get_context("spawn")  # no inherited threads or open libraries
    pending: deque[BagJob] = deque(jobs)
    pool: list[_Worker] = []

    def start() -> _Worker:
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_worker, args=(child, quiet, runner), daemon=True, name="process-bags")
        process.start()
        child.close()
        return _Worker(process, parent)

    try:
        _first_pool(pool, start, min(workers, len(jobs)), quiet)
        while pending or any(w.job for w in pool):
            for slot, w in enumerate(pool):
                while w.job is None and pending:  # a slot never stays idle while bags wait (wait([]) blocks)
                    job = pending.popleft()
                    if devices is not None:
                        job = replace(job, device=devices[slot])
                    w, refused = _hand_over(pool, slot, job, start)
                    if refused is not None:  # no worker would take it: failed, the corpus goes on
                        on_record(refused)
                        continue
                    w.job = job
                    w.deadline = None if bag_timeout_s is None else time.monotonic() + bag_timeout_s
            busy = [w for w in pool if w.job is not None]
            if not busy:  # the last bags were refused by every worker: nothing to wait for
                continue
            deadlines = [w.deadline for w in busy if w.deadline is not None]
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy],
                         timeout=max(0.0, min(deadlines) - time.monotonic()) if deadlines else None)
            for i, w in enumerate(pool):
                if w.job is None:
                    continue
                over = w.deadline is not None and time.monotonic() >= w.deadline
                message = _receive(w) if w.conn in ready or w.process.sentinel in ready else None
                if message == PUBLISH and not over:  # within its time: published, no longer timed
                    with contextlib.suppress(OSError):  # it died: its sentinel says so next
                        _send(w.conn, GO)
                    w.deadline = None
                    continue
                if isinstance(message, dict):
                    record = message
                elif message is None and (w.conn in ready or w.process.sentinel in ready):
                    record = _died(w)  # died: the bag failed, a fresh worker takes the next one
                    _restart(pool, i, start)
                elif over:  # asking to publish too late counts as still running
                    w.process.kill()  # its staging folder goes with the record (_died)
                    record = _died(w, f"still running after the bag timeout ({bag_timeout_s:g} s): its "
                                      f"worker was killed")
                    _restart(pool, i, start)
                else:
                    continue
                w.job = None
                on_record(record)
        for w in pool:
            with contextlib.suppress(OSError):
                _send(w.conn, None)
        for w in pool:
            w.process.join(timeout=30)
    finally:
        for w in pool:  # interrupted or failed: no worker goes on publishing after the command
            if w.process.is_alive():
                w.process.kill()
                w.process.join(timeout=10)
            w.conn.close()


# Fresh workers a bag is offered to after the one it was handed to turned out dead (killed while idle, out
# of memory): a machine that kills every new worker at once (a memory limit, a process limit) fails the bag
# after that many, not the whole corpus, and not after spawning forever.
HAND_OVER_REPLACEMENTS = 2


def _first_pool(pool: list[_Worker], start: Callable[[], _Worker], count: int, quiet: bool) -> None:
    """Start ``count`` workers into ``pool`` (one by one: an interrupt meanwhile leaves each started one
    where run_local's cleanup kills it), or as many as the machine lets start (fork or pipe refused: a
    process or memory limit): the corpus runs on those, with a line saying so; OutputError if none starts."""
    error: OSError | None = None
    for _ in range(count):
        try:
            pool.append(start())
        except OSError as exc:
            error = exc
    if not pool:
        raise OutputError(f"process-bags could not start a worker process ({type(error).__name__}: {error}); "
                          f"check the process and memory limits (ulimit -u, cgroups) or run --jobs 1")
    if error is not None and not quiet:
        _say(f"process-bags: {count - len(pool)} of {count} worker processes could not start "
             f"({type(error).__name__}: {error}); the bags run on {len(pool)}")


def _restart(pool: list[_Worker], slot: int, start: Callable[[], _Worker]) -> None:
    """A fresh worker in ``slot`` for the next bag; where none can be started (fork refused), the dead one
    stays, its pipe closed: the next hand-over finds it dead and tries again (``_hand_over``)."""
    pool[slot].conn.close()
    pool[slot].job = None
    with contextlib.suppress(OSError):
        pool[slot] = start()


def _hand_over(pool: list[_Worker], slot: int, job: BagJob,
               start: Callable[[], _Worker]) -> tuple[_Worker, dict[str, Any] | None]:
    """Send ``job`` to ``pool[slot]``; a worker found dead (its pipe broken) is replaced by a fresh one, at
    most ``HAND_OVER_REPLACEMENTS`` times. (the worker, None) once one took the bag, else (the last worker,
    the bag's failed record)."""
    error: OSError | None = None
    for attempt in range(HAND_OVER_REPLACEMENTS + 1):
        w = pool[slot]
        if attempt:
            w.conn.close()
            w.process.join(timeout=10)
            try:
                pool[slot] = w = start()
            except OSError as exc:  # fork or pipe refused: no fresh worker this time
                error = exc
                continue
        try:
            _send(w.conn, asdict(job))
            return w, None
        except OSError as exc:  # it died while idle: a fresh one takes the bag
            error = exc
    why = (f"no worker process would take this bag: {HAND_OVER_REPLACEMENTS + 1} tried in a row, each dead "
           f"when handed it (last: {type(error).__name__}: {error})")
    record = _died(pool[slot], why, job)
    return pool[slot], record


def _receive(w: _Worker) -> dict[str, Any] | None:
    with contextlib.suppress(EOFError, OSError):
        if w.conn.poll():
            return _recv(w.conn)
    return None


def _died(w: _Worker, error: str | None = None, job: BagJob | None = None) -> dict[str, Any]:
    """The failed record of ``job`` (default: the bag ``w`` was running), ``w`` having died."""
    job = job or w.job
    assert job is not None
    w.process.join(timeout=10)
    code = w.process.exitcode
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    shutil.rmtree(job.staging, ignore_errors=True)
    return {"bag": job.name, "input": job.input, "output": job.output, "status": "error",
            "frames": 0, "processed": 0, "written": 0, "failed": 0, "failures": {}, "fps": 0.0,
            "elapsed_s": 0.0, "setup_s": 0.0, "cpu_s": 0.0, "wall_s": 0.0, "warnings": [],
            "worker": w.process.pid,
            "device": job.device,
            "error": error or f"worker process died ({how}) while processing this bag"}


@contextlib.contextmanager
def staging_folder(out_dir: Path) -> Iterator[Path]:
    """This run's hidden staging folder in ``out_dir``, removed at the end (left only by SIGKILL)."""
    from libredgetpu_ros.atomicio import make_folder

    make_folder(out_dir)
    try:
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, suffix=".tmp", dir=out_dir))
    except OSError as exc:
        raise OutputError(f"cannot write into {out_dir}: {exc.strerror or exc}") from exc
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def totals(records: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """The corpus's totals: bags by status, frames, results, skipped frames, throughput over the run."""
    frames = sum(r["frames"] for r in records)
    return {"bags": len(records), "done": sum(r["status"] == "done" for r in records),
            "failed_bags": sum(r["status"] != "done" for r in records), "frames": frames,
            "processed": sum(r["processed"] for r in records), "written": sum(r["written"] for r in records),
            "failed_frames": sum(r["failed"] for r in records), "wall_s": wall_s,
            "fps": frames / wall_s if wall_s > 0 else 0.0,
            "bag_seconds": sum(r["wall_s"] for r in records)}
