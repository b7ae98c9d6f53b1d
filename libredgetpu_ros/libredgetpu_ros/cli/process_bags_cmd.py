"""``libredgetpu-ros process-bags --config C --output-dir OUT [--jobs N] [--engine local|ray] INPUT...``:
``process-bag`` on a corpus of bags (``bags/corpus.py``: bags or folders of bags), one output bag per input
under OUT named after it, in worker processes (``ros/fleet.py``) or on a Ray cluster
(``ros/fleet_ray.py``); the summary in ``OUT/summary.json`` (and on stdout with ``--json``).

Exit codes: 0 when every bag was processed, 1 when at least one bag failed (each listed in the summary with
its error; the others are processed), 2 for bad input before anything runs (no bags, two bags with one
output name, a bad config, Ray missing), 130 when interrupted (finished outputs stay, whole; the bags in
progress are removed; the summary lists what finished, ``"interrupted": true``).
"""

from __future__ import annotations

import argparse
from typing import Any

from libredgetpu_ros.cli.output import add_json, add_no_progress, print_json, progress, say
from libredgetpu_ros.cli.process_bag_cmd import add_node_options

HELP = "run process-bag on many bags (bags or folders of bags) in parallel worker processes or on a Ray " \
       "cluster; one output bag per input and a JSON summary"
EXAMPLES = (
    "libredgetpu-ros process-bags --config perception_pose.yaml --output-dir run1 fleet_bags/",
    "libredgetpu-ros process-bags --config classify.yaml --output-dir run2 --jobs 2 a_bag b_bag c.mcap",
    "libredgetpu-ros process-bags --config classify.yaml --output-dir run3 --engine ray fleet_bags/",
    "libredgetpu-ros process-bags --config classify.yaml --output-dir run4 --engine ray "
    "--ray-address 10.0.0.5:6379 /shared/fleet_bags/",
    "libredgetpu-ros process-bags --config classify.yaml --output-dir run5 --json --no-progress bags/",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="bags (folder, .mcap or .db3) and/or folders of bags (searched below them)")
    parser.add_argument("--output-dir", "-o", required=True,
                        help="folder of the output bags and summary.json (created; existing outputs are "
                             "never replaced)")
    parser.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                        help="local worker processes, each with its own backend (default: the cores "
                             "available; 1: in this process). With --engine ray: the local cluster's CPUs")
    parser.add_argument("--engine", choices=("local", "ray"), default="local",
                        help="local worker processes (default) or tasks on a Ray cluster")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="a running Ray cluster (host:port or 'auto'); default: a local cluster started "
                             "and stopped by the command, on 127.0.0.1 only")
    parser.add_argument("--bag-timeout", type=float, default=None, metavar="SECONDS",
                        help="fail a bag still running after this long and end its worker (a read that never "
                             "returns, a wedged device), then go on; default: no limit. Set it in CI")
    add_node_options(parser, storage_default="each input's")
    add_json(parser, "print the summary (per bag and totals) as JSON")
    add_no_progress(parser)


def _workers(args: argparse.Namespace) -> int:
    import os

    from libredgetpu_ros.errors import InputError

    if args.jobs is not None:
        if args.jobs < 1:
            raise InputError(f"--jobs must be at least 1, not {args.jobs}")
        return args.jobs
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _edgetpu_workers(workers: int, pinned: str, attached: int | None = None) -> tuple[int, list[str] | None]:
    """Local workers on the Edge TPU: one per accelerator (an accelerator is one process's), worker i on
    device i; a config pinning its ``device`` keeps it, on one worker. ``attached``: the accelerators
    counted by the caller (counted here when not given)."""
    if attached is None:
        from libredgetpu_ros.ros.fleet import edgetpus

        attached = edgetpus()
    if pinned or attached <= 1:
        why = f"the config pins device {pinned!r}" if pinned else "at most one accelerator is attached"
        say(f"note: one local worker: {why}, which one process at a time can own (a second worker would "
            f"fall back to the CPU twin or fail)")
        return 1, None
    if workers > attached:
        say(f"note: {attached} local workers, one per attached accelerator (worker i on device i)")
    count = min(workers, attached)
    return count, [str(i) for i in range(count)]


def _bar(tqdm: Any, total: int, stream: Any, progress: bool | None) -> Any:
    """Progress across the corpus on stderr: bags done, frames so far, failed bags."""
    return tqdm(total=total, unit="bag", desc="process-bags", file=stream,
                disable=None if progress is None else not progress)


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    import time
    from pathlib import Path

    from tqdm import tqdm

    from libredgetpu_ros.atomicio import atomic_write_text
    from libredgetpu_ros.bags.corpus import SUMMARY_NAME, find_bags
    from libredgetpu_ros.cli.signals import sigterm_as_interrupt
    from libredgetpu_ros.ros.bag_processing import load_node_config
    from libredgetpu_ros.ros.environment import ensure_log_dir
    from libredgetpu_ros.ros.fleet import make_jobs, run_local, staging_folder, totals

    begin = time.perf_counter()
    workers = _workers(args)
    if args.bag_timeout is not None and not 0 < args.bag_timeout < float("inf"):  # NaN included
        from libredgetpu_ros.errors import InputError

        raise InputError(f"--bag-timeout must be a finite number of seconds above 0, not {args.bag_timeout}")
    bags = find_bags(args.inputs)  # bad input (missing, no bags, clashing names) before anything runs
    node = load_node_config(args.config, {"backend": args.backend} if args.backend else None, args.node_type)
    devices = None
    backend = getattr(node.params, "backend", "cpu")
    if args.engine == "local" and workers > 1 and backend in ("auto", "edgetpu"):
        # the node opens an Edge TPU when asked to, or under auto with one attached: one USB enumeration
        from libredgetpu_ros.ros.fleet import edgetpus

        attached = edgetpus()
        if backend == "edgetpu" or attached > 0:
            workers, devices = _edgetpu_workers(workers, getattr(node.params, "device", ""), attached)
    if args.engine == "ray":
        from libredgetpu_ros.ros.fleet_ray import check_ray

        check_ray()
    ensure_log_dir()
    out_dir = Path(args.output_dir)
    records: dict[str, dict] = {}
    interrupted = False
    with sigterm_as_interrupt(), staging_folder(out_dir) as staging:
        jobs = make_jobs(bags, out_dir, staging, args.config, node_type=args.node_type, backend=args.backend,
                         storage=args.storage, topics=args.topics)
        bar = _bar(tqdm, len(jobs), sys.stderr, progress=progress(args))

        def on_record(record: dict) -> None:
            records[record["bag"]] = record
            frames = sum(r["frames"] for r in records.values())
            bar.set_postfix(frames=frames, failed=sum(r["status"] != "done" for r in records.values()))
            bar.update(1)
            if record["status"] != "done":
                say(f"error: {record['bag']}: {record['error']}")

        try:
            if args.engine == "ray":
                from libredgetpu_ros.ros.fleet_ray import run_ray

                run_ray(jobs, on_record, address=args.ray_address, num_cpus=workers,
                        backend=getattr(node.params, "backend", None), bag_timeout_s=args.bag_timeout)
            else:
                run_local(jobs, workers, on_record, devices=devices, bag_timeout_s=args.bag_timeout)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            bar.close()
    ordered = [records[job.name] for job in jobs if job.name in records]
    summary = {"engine": args.engine, "workers": workers, "config": str(args.config),
               "output_dir": str(out_dir), "interrupted": interrupted, "bags": ordered,
               "totals": totals(ordered, time.perf_counter() - begin)}
    summary["totals"]["not_started"] = len(jobs) - len(ordered)
    atomic_write_text(out_dir / SUMMARY_NAME, json.dumps(summary, indent=2, default=str) + "\n")
    if args.json:
        print_json(summary)
    else:
        for r in ordered:
            state = "ok" if r["status"] == "done" else f"FAILED: {r['error']}"
            print(f"{r['bag']}: {r['frames']} frames, {r['processed']} processed, {r['failed']} skipped, "
                  f"{r['fps']:.1f} frames/s, {r['wall_s']:.1f} s  {state}")
        t = summary["totals"]
        print(f"{t['bags']} bags ({t['done']} done, {t['failed_bags']} failed), {t['frames']} frames in "
              f"{t['wall_s']:.1f} s ({t['fps']:.1f} frames/s, {workers} {args.engine} workers); "
              f"summary: {out_dir / SUMMARY_NAME}")
    if interrupted:
        raise KeyboardInterrupt
    return 0 if all(r["status"] == "done" for r in ordered) else 1
