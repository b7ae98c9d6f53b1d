"""The control node before / after a change of its node structure (issue 37: the state loop moved from a
companion node to the node's own data-path callback group), interleaved run by run; report:
bench/results/node_style.md.

Per round, for the package as of ``--before REV`` and as it is now (the order alternates between rounds): the
``~/set_weights`` round trip of bench_control_node.py (full N×N matrix, N = 256 and 1024, node allocator
tuned) and its state -> command latency (JointState at 1 kHz, ``state_queue`` 1), each against a fresh node
process. Besides those latencies, the node process's CPU time (every thread's ``schedstat``, ns): per
``set_weights`` call (between the warm-up call's answer and the last one's), and while the states flow
(from the weights load's answer to the node's termination). The spread over rounds is shown: the machine is
shared. Run (network-isolated, one benchmark at a time):
``flock /tmp/libredgetpu_heavy.lock tools/ros_sandbox.sh .venv/bin/python bench/bench_node_style.py``
(``--before REV`` compares with another revision)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "node_style.md"
NODE_STYLE_PARENT = "c079fec~1"  # main just before the control node's state loop moved into its own group


def _cpu_s(pid: int) -> float:
    """CPU seconds of every thread of ``pid`` so far."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, IndexError, ValueError):  # a thread that ended meanwhile
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total * 1e-9


class _Probe:
    """The CPU time of the node process bench_control_node spawns: read at each harness call and at its
    termination."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.at_calls: list[float] = []
        self.at_end = float("nan")

    def reset(self) -> None:
        self.proc, self.at_calls, self.at_end = None, [], float("nan")

    def sample(self) -> None:
        if self.proc is not None:
            self.at_calls.append(_cpu_s(self.proc.pid))


def _instrument(bcn: Any, harness: Any, probe: _Probe, pythonpath: str) -> None:
    """Point bench_control_node's node processes at ``pythonpath`` and record their CPU time."""

    class Node(subprocess.Popen):
        def terminate(self) -> None:
            probe.at_end = _cpu_s(self.pid)
            super().terminate()

    def spawn(env: dict[str, str], ns: str, log: Path, *params: str, malloc_tuning: bool = True) -> Node:
        args = [sys.executable, "-m", "libredgetpu_ros.ros.control_node", "--ros-args", "-r", f"__ns:={ns}"]
        for p in ("backend:=cpu", *params):
            args += ["-p", p]
        proc = Node(args, env={**env, "PYTHONPATH": pythonpath}, stdout=log.open("wb"),
                    stderr=subprocess.STDOUT, start_new_session=True)
        probe.proc = proc
        return proc

    original_call = harness.ControlHarness.call

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = original_call(self, *args, **kwargs)
        probe.sample()
        return answer

    bcn._spawn_node = spawn
    harness.ControlHarness.call = call


def _spread(values: list[float], digits: int = 2) -> str:
    return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"
            if values else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REV", default=NODE_STYLE_PARENT,
                        help="git revision of the 'before' package (default: main before the change)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=30, help="set_weights calls per size and run")
    parser.add_argument("--duration", type=float, default=2.0, help="s of 1 kHz states per run")
    args = parser.parse_args()

    sys.path.insert(0, str(HERE))
    import bench_control_node as bcn
    from _revisions import package_at
    from libredgetpu_ros.ros.environment import localhost_only_environ
    from libredgetpu_ros.ros.memory import retain_large_allocations

    retain_large_allocations()  # the client as in bench_control_node
    work = Path(tempfile.mkdtemp(prefix="bench_node_style_"))
    variants = {"before": str(package_at(args.before, work / "before_pkg")),
                "after": str(HERE.parent / "libredgetpu_ros")}
    env = localhost_only_environ(domain_id=200 + os.getpid() % 30, log_dir=str(work / "ros_log"))
    os.environ.update(env)
    import rclpy
    import rclpy.context

    harness = bcn._load_harness()
    probe = _Probe()
    context = rclpy.context.Context()
    rclpy.init(context=context, domain_id=int(env["ROS_DOMAIN_ID"]))
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for r in range(args.rounds):
            order = list(variants.items()) if r % 2 == 0 else list(variants.items())[::-1]
            for label, pythonpath in order:
                _instrument(bcn, harness, probe, pythonpath)
                run_dir = work / f"{label}{r}"  # the bench names its files by size / rate only
                run_dir.mkdir()
                for n in (256, 1024):
                    probe.reset()
                    out = bcn.bench_round_trip(harness, context, env, run_dir, n, args.calls, True)
                    # from the warm-up call's answer to the last call's: the timed calls alone
                    spent = probe.at_calls[-1] - probe.at_calls[-1 - args.calls]
                    out["cpu_ms_per_call"] = spent * 1e3 / args.calls
                    rows.setdefault((label, f"set_weights N={n}"), []).append(out)
                probe.reset()
                out = bcn.bench_latency(harness, context, env, run_dir, 1000.0, args.duration, 1)
                out["cpu_s_states"] = probe.at_end - probe.at_calls[-1]
                rows.setdefault((label, "states 1 kHz"), []).append(out)
                print(label, r, "done", flush=True)
    finally:
        context.try_shutdown()

    load = os.getloadavg()
    lines = [
        "# Node style: the control node before / after (issue 37)",
        "",
        f"`bench/bench_node_style.py --before {args.before} --rounds {args.rounds}` on {platform.machine()} "
        f"({os.cpu_count()} cores shared with other jobs; load average at the end {load[0]:.1f}), CPU twin "
        "backend, node and client in separate processes over localhost-only DDS. **before** = the package "
        f"as of `{args.before}`, **after** = the working tree; runs interleaved, the order alternating per "
        "round. Each cell: median over rounds (min–max) of the per-run figure.",
        "",
        f"## `~/set_weights` round trip ({args.calls} calls per run, node allocator tuned)",
        "",
        "| N | package | round trip p50 ms | p99 ms | node total p50 ms | node CPU per call ms |",
        "|---|---|---|---|---|---|",
    ]
    for n in (256, 1024):
        for label in variants:
            runs = rows[(label, f"set_weights N={n}")]
            lines.append(f"| {n} | {label} | {_spread([x['rtt_p50'] for x in runs])} | "
                         f"{_spread([x['rtt_p99'] for x in runs])} | "
                         f"{_spread([x['node_total_p50'] for x in runs], 3)} | "
                         f"{_spread([x['cpu_ms_per_call'] for x in runs])} |")
    lines += [
        "",
        f"## State -> command at 1 kHz (JointState for {args.duration:g} s per run, state_queue 1)",
        "",
        "| package | p50 ms | p99 ms | commands received of sent | node CPU s while states flow |",
        "|---|---|---|---|---|",
    ]
    for label in variants:
        runs = rows[(label, "states 1 kHz")]
        lines.append(f"| {label} | {_spread([x['p50'] for x in runs], 3)} | "
                     f"{_spread([x['p99'] for x in runs])} | "
                     f"{_spread([float(x['received']) for x in runs], 0)} of {int(runs[0]['sent'])} | "
                     f"{_spread([x['cpu_s_states'] for x in runs])} |")
    ratios = {key: float(np.median([a[key] / b[key] for a, b in zip(rows[('after', kind)],
                                                                       rows[('before', kind)], strict=True)]))
              for kind, key in (("set_weights N=1024", "cpu_ms_per_call"), ("set_weights N=256", "rtt_p50"))}
    lines += ["", f"Paired after / before (same round, adjacent in time), median: node CPU per call at "
              f"N = 1024 {ratios['cpu_ms_per_call']:.2f}, round trip p50 at N = 256 "
              f"{ratios['rtt_p50']:.2f}.", ""]
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
