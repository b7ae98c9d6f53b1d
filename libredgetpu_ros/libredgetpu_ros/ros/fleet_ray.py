"""``process-bags --engine ray``: every bag a Ray task running ``fleet.run_bag`` (the same function as the
local engine, so the same outputs), on a running cluster (``--ray-address``) or on a local one this command
starts and stops.

Inputs are read where they are and outputs written where ``--output-dir`` says: on a cluster both must be
on a path every node sees under the same name (a shared file system). The local cluster is bounded and
private: CPUs as ``--jobs``, an object store of ``OBJECT_STORE_BYTES`` (records are all that travel), no
dashboard, usage statistics off, every service bound to 127.0.0.1 (``local_cluster`` says how), and never a
cluster found through ``RAY_ADDRESS`` or a ``ray start`` on the machine. Edge TPUs: a node started here
declares the custom resource ``edgetpu``, one per attached accelerator, and when the run uses the Edge TPU
backend each task asks for one (``{"edgetpu": 1}``; a cluster's nodes declare theirs with
``ray start --resources '{"edgetpu": N}'``) and opens the first accelerator of its machine no other process
holds (the config's ``device`` is replaced by auto: Ray's custom resources carry no instance ids, and a
machine's device names are its own); on the CPU backend tasks ask for one CPU each.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from libredgetpu_ros.errors import InputError, LibrEdgeTpuError
from libredgetpu_ros.ros.fleet import BagJob, edgetpus, run_bag

RAY_VERSION = "2.60.0"  # the version pinned in requirements.lock.txt (setup.py extra "ray")
OBJECT_STORE_BYTES = 96 * 1024 * 1024
EDGETPU_RESOURCE = "edgetpu"
LOOPBACK = "127.0.0.1"
# Set for the local cluster's life (its processes inherit them). Ray's switch for "this machine only" (named
# for the platforms where it is the default): with it on, a node asked for 127.0.0.1 takes instead the
# address of the interface that routes to 8.8.8.8 (a UDP connect, which sends nothing), every Ray process
# that looks its node up without one given (the runtime-env agent) does the same, and Ray binds its gRPC
# servers to 0.0.0.0 / :: whenever the node's address is not loopback. Usage statistics: only a
# dashboard head reports them, and a ray.init cluster's never does; off all the same. The dashboard head
# (started even without a dashboard, for usage statistics) asks the cloud metadata services which cloud
# it runs in (HTTP to 169.254.169.254 and metadata.google.internal) whether statistics are on or not: an
# HTTP proxy at a closed loopback port makes every HTTP request of the cluster's processes, which have
# none to make (the tasks read and write files), fail on this machine, names unresolved; Ray's own gRPC
# ignores these variables (grpc_enable_http_proxy is off) and loopback is never proxied.
CLOSED_PROXY = "http://127.0.0.1:9"
LOCAL_ONLY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                  **dict.fromkeys(("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"), CLOSED_PROXY),
                  **dict.fromkeys(("no_proxy", "NO_PROXY"), "127.0.0.1,localhost,::1")}


def check_ray() -> None:
    """InputError (exit 2, before anything runs) when Ray cannot be imported."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise InputError(f"--engine ray needs the ray package ({exc}): pip install 'ray=={RAY_VERSION}' "
                         f"(make setup installs it) or use --engine local") from None


TIMED_OUT_SUFFIX = ".timed-out"  # beside a bag's staging folder: its task ran past the bag timeout


def _ray_bag(job: dict[str, Any], bag_timeout_s: float | None = None) -> dict[str, Any]:
    """The task: one bag (in a Ray worker process), ended with its worker past ``bag_timeout_s`` unless
    it is already being published."""
    from libredgetpu_ros.ros.environment import ensure_log_dir

    ensure_log_dir()
    bag = BagJob(**job)
    if bag_timeout_s is None:
        return run_bag(bag)
    watchdog = _Watchdog(bag, bag_timeout_s)
    try:
        return run_bag(bag, publishing=watchdog.stand_down)
    finally:
        watchdog.stand_down()


class _Watchdog:
    """Ends this worker process when its bag is still running ``bag_timeout_s`` after the start
    (``_over_time``), unless :meth:`stand_down` came first: the bag is then being published or done, and
    ending the process would leave an output on disk whose record says it timed out. The two exclude each
    other: a watchdog that fired holds the lock until the process is gone, so a ``stand_down`` after it
    never returns (the bag is not published)."""

    def __init__(self, job: BagJob, bag_timeout_s: float) -> None:
        self._job, self._timeout_s = job, bag_timeout_s
        self._lock = threading.Lock()
        self._stood_down = False
        self._timer = threading.Timer(bag_timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def stand_down(self) -> None:
        with self._lock:
            self._stood_down = True
        self._timer.cancel()

    def _fire(self) -> None:
        with self._lock:
            if not self._stood_down:
                _over_time(self._job, self._timeout_s)  # never returns


def _marker(job: BagJob) -> Path:
    """Where a task past the bag timeout says so: beside its staging folder, in the run's staging folder
    under OUT, which the driver and every node see (the contract: OUT on a shared path)."""
    return Path(job.staging + TIMED_OUT_SUFFIX)


def _over_time(job: BagJob, bag_timeout_s: float) -> None:
    """The bag is still running past the timeout: a read that never returns or a wedged device, which
    nothing in this process can stop. Marked for the driver, its partial output removed, and the worker
    process ended: Ray reports the task failed and starts another worker. The marker is whole before its
    name appears (written under a temporary name, flushed, renamed): a driver on another machine reads
    all of it or none."""
    import shutil
    import sys

    try:
        with suppress(Exception):  # no marker: the driver says Ray's own words; the worker ends all the same
            from libredgetpu_ros.atomicio import atomic_write_text

            atomic_write_text(_marker(job), f"{bag_timeout_s}\n")
        shutil.rmtree(job.staging, ignore_errors=True)
        print(f"{job.name}: still running after the bag timeout ({bag_timeout_s:g} s): this Ray worker exits",
              file=sys.stderr, flush=True)
    finally:
        os._exit(3)


def _lost(job: BagJob, exc: BaseException) -> dict[str, Any]:
    """A task that raised on Ray's side (its worker died, the cluster lost a node, or ended itself past the
    bag timeout): the bag's record. The timeout's marker is removed once read."""
    text = " ".join(str(exc).split())[:500]
    error = f"Ray task failed: {type(exc).__name__}: {text}"
    marker = _marker(job)
    with suppress(OSError, ValueError):
        seconds = float(marker.read_text())
        error = f"still running after the bag timeout ({seconds:g} s): its Ray worker was ended"
    with suppress(OSError):
        marker.unlink()
    return {"bag": job.name, "input": job.input, "output": job.output, "status": "error", "frames": 0,
            "processed": 0, "written": 0, "failed": 0, "failures": {}, "fps": 0.0, "elapsed_s": 0.0,
            "setup_s": 0.0, "cpu_s": 0.0, "wall_s": 0.0, "warnings": [], "worker": None, "error": error}


@contextmanager
def local_cluster(num_cpus: int, attached: int) -> Iterator[None]:
    """A private single-node cluster (``ray.init``), shut down on exit: loopback only, small, no dashboard or
    telemetry; the node declares one ``edgetpu`` per attached accelerator (a task holding one opens the
    first accelerator no other process holds: ``device`` auto). ``address="local"``: always a new cluster,
    never the one ``RAY_ADDRESS`` or a ``ray start`` on this machine points to."""
    import ray
    from ray._private import ray_constants

    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):  # the switch below is read from there
        raise LibrEdgeTpuError(f"ray {ray.__version__} cannot be kept to 127.0.0.1 the way ray {RAY_VERSION} "
                               f"is: install ray=={RAY_VERSION}, or use --engine local or --ray-address")
    saved_env = {name: os.environ.get(name) for name in LOCAL_ONLY_ENV}
    saved_switch = ray_constants.ENABLE_RAY_CLUSTER
    os.environ.update(LOCAL_ONLY_ENV)  # the processes Ray starts read it when they import ray
    ray_constants.ENABLE_RAY_CLUSTER = False  # this one imported ray already (check_ray)
    try:
        ray.init(address="local", num_cpus=num_cpus,
                 resources={EDGETPU_RESOURCE: attached} if attached else None,
                 object_store_memory=OBJECT_STORE_BYTES, include_dashboard=False, _node_ip_address=LOOPBACK,
                 log_to_driver=True, configure_logging=False, namespace="libredgetpu-ros")
        try:
            node_ip = ray.util.get_node_ip_address()
            if node_ip != LOOPBACK:  # Ray bound its services to every interface: stop here
                raise LibrEdgeTpuError(f"the local Ray cluster took the address {node_ip}, not {LOOPBACK}: "
                                       "stopped; use --engine local or a cluster of your own (--ray-address)")
            yield
        finally:
            ray.shutdown()
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_switch
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def _connected(address: str) -> Iterator[None]:
    """This process as a driver of a running cluster: the cluster's own settings (addresses, usage
    statistics) are left as its ``ray start`` made them; on exit only this driver disconnects."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address=address, configure_logging=False, namespace="libredgetpu-ros")
    try:
        yield
    finally:
        ray.shutdown()


def run_ray(jobs: list[BagJob], on_record: Callable[[dict[str, Any]], None], *, address: str | None,
            num_cpus: int, backend: str | None = None, bag_timeout_s: float | None = None) -> None:
    """Run ``jobs`` as Ray tasks, calling ``on_record`` per finished bag, on the cluster at ``address`` or
    on a local one (no ``address``, or ``"local"``) shut down at the end. ``bag_timeout_s``: a task still
    running its bag after that long ends its worker (``_over_time``; counted from the task's start, not its
    wait in Ray's queue) and the bag fails. KeyboardInterrupt: the tasks in flight are cancelled (their
    workers killed), then re-raised."""
    import ray

    attached = edgetpus() if backend in (None, "auto", "edgetpu") else 0
    # "local" is Ray's word for a new cluster on this machine: ours, bounded and on 127.0.0.1
    with local_cluster(num_cpus, attached) if address in (None, "local") else _connected(address):
        options: dict[str, Any] = {"num_cpus": 1, "max_retries": 0}
        # an Edge TPU run (or auto) on a cluster that declares accelerators: each task holds one
        if backend in (None, "auto", "edgetpu") and ray.cluster_resources().get(EDGETPU_RESOURCE, 0) > 0:
            options["resources"] = {EDGETPU_RESOURCE: 1}
            # Ray gives custom resources no instance ids: a task's unit maps to "the first accelerator of
            # its machine no other process holds" (device auto, which takes the next one when two tasks
            # open at once), so the tasks running on a machine (at most its edgetpu count) use distinct ones
            jobs = [replace(job, device="") for job in jobs]
        task = ray.remote(_ray_bag).options(**options)
        refs = {task.remote(asdict(job), bag_timeout_s): job for job in jobs}
        try:
            while refs:
                done, _ = ray.wait(list(refs), num_returns=1)
                for ref in done:
                    job = refs.pop(ref)
                    try:
                        record = ray.get(ref)
                    except Exception as exc:  # RayTaskError, WorkerCrashedError, ...: that bag failed
                        record = _lost(job, exc)
                    on_record(record)
        except KeyboardInterrupt:
            for ref in refs:
                ray.cancel(ref, force=True)
            raise
