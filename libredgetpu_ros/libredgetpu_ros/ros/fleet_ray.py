"""``process-bags --engine ray``: every bag a Ray task running ``fleet.run_bag`` (the same function as the
local engine, so the same outputs), on a running cluster (``--ray-address``) or on a local one this command
starts and stops.

Inputs are read where they are and outputs written where ``--output-dir`` says: on a cluster both must be
on a path every node sees under the same name (a shared file system). The local cluster is bounded and
private: CPUs as ``--jobs``, an object store of ``OBJECT_STORE_BYTES`` (records are all that travel), no
dashboard, no usage statistics sent, every service bound to 127.0.0.1. Edge TPUs: a node started here
declares the custom resource ``edgetpu``, one per attached accelerator, and when the run uses the Edge TPU
backend each task asks for one (``{"edgetpu": 1}``; a cluster's nodes declare theirs with
``ray start --resources '{"edgetpu": N}'``) and opens the first accelerator of its machine no other process
holds (the config's ``device`` is replaced by auto: Ray's custom resources carry no instance ids, and a
machine's device names are its own); on the CPU backend tasks ask for one CPU each.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from libredgetpu_ros.errors import InputError
from libredgetpu_ros.ros.fleet import BagJob, edgetpus, run_bag

RAY_VERSION = "2.60.0"  # the version pinned in requirements.lock.txt (setup.py extra "ray")
OBJECT_STORE_BYTES = 96 * 1024 * 1024
EDGETPU_RESOURCE = "edgetpu"


def check_ray() -> None:
    """InputError (exit 2, before anything runs) when Ray cannot be imported."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise InputError(f"--engine ray needs the ray package ({exc}): pip install 'ray=={RAY_VERSION}' "
                         f"(make setup installs it) or use --engine local") from None


def _ray_bag(job: dict[str, Any]) -> dict[str, Any]:
    """The task: one bag (in a Ray worker process)."""
    from libredgetpu_ros.ros.environment import ensure_log_dir

    ensure_log_dir()
    return run_bag(BagJob(**job))


def _lost(job: BagJob, exc: BaseException) -> dict[str, Any]:
    """A task that raised on Ray's side (its worker died, the cluster lost a node): the bag's record."""
    text = " ".join(str(exc).split())[:500]
    return {"bag": job.name, "input": job.input, "output": job.output, "status": "error", "frames": 0,
            "processed": 0, "written": 0, "failed": 0, "failures": {}, "fps": 0.0, "elapsed_s": 0.0,
            "setup_s": 0.0, "wall_s": 0.0, "warnings": [], "worker": None,
            "error": f"Ray task failed: {type(exc).__name__}: {text}"}


def start_local_cluster(num_cpus: int, attached: int) -> None:
    """``ray.init`` of a private single-node cluster: loopback only, small, no dashboard or telemetry; the
    node declares one ``edgetpu`` per attached accelerator (a task holding one opens the first accelerator
    no other process holds: ``device`` auto)."""
    import ray

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # Ray would otherwise report usage over the network
    ray.init(num_cpus=num_cpus, resources={EDGETPU_RESOURCE: attached} if attached else None,
             object_store_memory=OBJECT_STORE_BYTES, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=True, configure_logging=False, namespace="libredgetpu-ros")


def run_ray(jobs: list[BagJob], on_record: Callable[[dict[str, Any]], None], *, address: str | None,
            num_cpus: int, backend: str | None = None) -> None:
    """Run ``jobs`` as Ray tasks, calling ``on_record`` per finished bag; the local cluster (no ``address``)
    is shut down at the end. KeyboardInterrupt: the tasks in flight are cancelled (their workers killed),
    then re-raised."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = address is None
    attached = edgetpus() if backend in (None, "auto", "edgetpu") else 0
    if started:
        start_local_cluster(num_cpus, attached)
    else:
        ray.init(address=address, configure_logging=False, namespace="libredgetpu-ros")
    try:
        options: dict[str, Any] = {"num_cpus": 1, "max_retries": 0}
        # an Edge TPU run (or auto) on a cluster that declares accelerators: each task holds one
        if backend in (None, "auto", "edgetpu") and ray.cluster_resources().get(EDGETPU_RESOURCE, 0) > 0:
            options["resources"] = {EDGETPU_RESOURCE: 1}
            # Ray gives custom resources no instance ids: a task's unit maps to "the first accelerator of
            # its machine no other process holds" (device auto, which takes the next one when two tasks
            # open at once), so the tasks running on a machine (at most its edgetpu count) use distinct ones
            jobs = [replace(job, device="") for job in jobs]
        task = ray.remote(_ray_bag).options(**options)
        refs = {task.remote(asdict(job)): job for job in jobs}
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
    finally:
        ray.shutdown()  # stops the local cluster; from a running one, only this driver disconnects
