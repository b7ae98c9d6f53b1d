"""Benchmark of the adaptive control node across processes (CPU twin); report: bench/results/control_node.md.

1. ``~/set_weights`` round trip for a full N×N controller, N = 256 and 1024: the client-measured round trip
   split into the node's validation, quantization, blob generation, swap, and the rest (serialization + DDS +
   executor). Baseline: ``MatMulEngine.set_weights`` called in-process, same run. Each size runs twice: node
   with its default allocator tuning (``retain_large_allocations``) and with it off
   (``LIBREDGETPU_ROS_MALLOC_TUNING=0``), the before/after of that change in one run. This process (client
   and in-process baseline) applies the tuning too, as the node does.
2. State -> command latency at a 1 kHz JointState rate (8 states -> 4 commands on Dense(256)): header stamp
   (taken by the publisher process just before publishing) to arrival of the CommandStamped here.
   Baseline: ``matmul_versioned`` in-process, same run.

Run inside the localhost-only sandbox: ``tools/ros_sandbox.sh .venv/bin/python bench/bench_control_node.py``
(``make bench`` does that). Targets: round trip p50 <= 3 ms (N = 256), <= 10 ms (N = 1024); state -> command
p50 <= 1 ms.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _timing import write_report

REPO = Path(__file__).resolve().parents[1]
TEST_ROS = REPO / "libredgetpu_ros" / "test" / "ros"
RESULTS = REPO / "bench" / "results" / "control_node.md"
T_CONFIGURE, T_ACTIVATE = 1, 3


def _load_harness():
    spec = importlib.util.spec_from_file_location("_control_harness", TEST_ROS / "_control_harness.py")
    module = sys.modules.setdefault("_control_harness", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


def _pct(values: list[float] | np.ndarray, q: float) -> float:
    return float(np.percentile(np.asarray(values, np.float64), q))


def _spawn_node(env: dict[str, str], ns: str, log: Path, *params: str,
                malloc_tuning: bool = True) -> subprocess.Popen:
    args = [sys.executable, "-m", "libredgetpu_ros.ros.control_node", "--ros-args", "-r", f"__ns:={ns}"]
    for p in ("backend:=cpu", *params):
        args += ["-p", p]
    if not malloc_tuning:
        env = {**env, "LIBREDGETPU_ROS_MALLOC_TUNING": "0"}
    return subprocess.Popen(args, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def bench_round_trip(harness, context, env, work: Path, n: int, calls: int,
                     malloc_tuning: bool) -> dict[str, float]:
    from libredgetpu_ros.matmul import MatMulEngine

    ns = f"/bench_rt{n}_{'tuned' if malloc_tuning else 'default'}"
    proc = _spawn_node(env, ns, work / f"node_rt{n}_{malloc_tuning}.log", f"template:={n}",
                       "clip_policy:=clip", malloc_tuning=malloc_tuning)
    ctl = harness.ControlHarness(context, f"{ns}/control_node")
    try:
        assert ctl.transition(T_CONFIGURE), f"configure failed, see {work}/node_rt{n}_{malloc_tuning}.log"
        rng = np.random.default_rng(n)
        scale = np.frombuffer(ctl.get_weights().weight_max, np.float32)[:, None]
        mats = [(rng.uniform(-0.9, 0.9, (n, n)) * scale).astype(np.float32) for _ in range(4)]
        # Requests built outside the timed region: the measurement is the service, not the client's packing.
        requests = [ctl.set_weights_request(m) for m in mats]
        ctl.call(ctl.set_weights_client, requests[0])  # warm-up (first call matches the service, allocates)
        rows: list[tuple[float, ...]] = []
        for k in range(calls):
            t0 = time.perf_counter()
            resp = ctl.call(ctl.set_weights_client, requests[k % len(requests)])
            rtt = (time.perf_counter() - t0) * 1e3
            assert resp.accepted, resp.message
            rows.append((rtt, resp.validate_ms, resp.quantize_ms, resp.blob_ms, resp.swap_ms, resp.total_ms))
    finally:
        ctl.close()
        proc.terminate()
        proc.wait(timeout=10)
    arr = np.array(rows)
    engine = MatMulEngine.from_template(n, backend="cpu")
    direct = []
    for k in range(calls):
        t0 = time.perf_counter()
        engine.set_weights(mats[k % len(mats)])
        direct.append((time.perf_counter() - t0) * 1e3)
    engine.close()
    names = ("rtt", "validate", "quantize", "blob", "swap", "node_total")
    out = {f"{name}_p50": _pct(arr[:, i], 50) for i, name in enumerate(names)}
    out["rtt_p99"] = _pct(arr[:, 0], 99)
    out["rest_p50"] = _pct(arr[:, 0] - arr[:, 5], 50)
    out["direct_p50"] = _pct(direct, 50)
    return out


def bench_latency(harness, context, env, work: Path, rate: float, duration: float,
                  state_queue: int) -> dict[str, float]:
    from libredgetpu_ros.matmul import MatMulEngine

    tag = f"{int(rate)}_q{state_queue}"
    ns = f"/bench_lat{tag}"
    names = [f"j{i}" for i in range(8)]
    proc = _spawn_node(env, ns, work / f"node_lat{tag}.log", "template:=256", "state_type:=joint_state",
                       "state_size:=8", "command_size:=4", "qos_depth:=1000", f"state_queue:={state_queue}")
    ctl = harness.ControlHarness(context, f"{ns}/control_node", record_plain=False)
    pub = None
    try:
        assert ctl.transition(T_CONFIGURE) and ctl.transition(T_ACTIVATE)
        rng = np.random.default_rng(1)
        w_max = np.frombuffer(ctl.get_weights().weight_max, np.float32)[:, None]
        ctl.set_weights((rng.uniform(-0.9, 0.9, (4, 8)) * w_max).astype(np.float32))
        sent = work / f"sent{tag}.npz"
        pub = subprocess.Popen([sys.executable, str(TEST_ROS / "_control_state_publisher.py"), "--topic",
                                f"{ns}/state", "--names", ",".join(names), "--rate", str(rate), "--duration",
                                str(duration), "--out", str(sent)], env=env, start_new_session=True,
                               stdout=(work / f"publisher{tag}.log").open("wb"),
                               stderr=subprocess.STDOUT)
        ctl.wait_for(lambda: sent.exists(), duration + 60, "the state publisher")
        count = len(np.load(sent)["stamps"])
        # Let a backlog drain (bounded): until all arrived or none for 0.5 s (latest-wins mode drops some).
        deadline, seen, last_change = time.monotonic() + 10.0, -1, time.monotonic()
        while len(ctl.commands()) < count and time.monotonic() < deadline:
            if len(ctl.commands()) != seen:
                seen, last_change = len(ctl.commands()), time.monotonic()
            elif time.monotonic() - last_change > 0.5:
                break
            time.sleep(0.05)
        commands = ctl.commands()
    finally:
        ctl.close()
        proc.terminate()
        proc.wait(timeout=10)
        if pub is not None and pub.poll() is None:
            pub.terminate()
    lat = np.array([(recv - stamp) * 1e-6 for recv, stamp, _v, _y in commands])
    lat = lat[len(lat) // 10:]  # drop the first 10 %: discovery / allocation warm-up
    engine = MatMulEngine.from_template(256, backend="cpu")
    x = np.zeros(256, np.float32)
    direct = []
    for _ in range(500):
        t0 = time.perf_counter()
        engine.matmul_versioned(x)
        direct.append((time.perf_counter() - t0) * 1e3)
    engine.close()
    return {"sent": count, "received": len(commands), "p50": _pct(lat, 50), "p99": _pct(lat, 99),
            "best": float(lat.min()),
            "max": float(lat.max()), "direct_p50": _pct(direct, 50)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="set_weights calls per size")
    parser.add_argument("--rates", type=float, nargs="+", default=[1000.0, 250.0])
    parser.add_argument("--duration", type=float, default=3.0)
    args = parser.parse_args()
    load_start = os.getloadavg()[0]

    from libredgetpu_ros.ros.environment import localhost_only_environ
    from libredgetpu_ros.ros.memory import retain_large_allocations

    client_tuned = retain_large_allocations()

    work = Path(tempfile.mkdtemp(prefix="bench_control_"))
    env = localhost_only_environ(domain_id=200 + os.getpid() % 30, log_dir=str(work / "ros_log"))
    os.environ.update(env)  # this process too, before rclpy reads it
    import rclpy
    import rclpy.context

    harness = _load_harness()
    context = rclpy.context.Context()
    rclpy.init(context=context, domain_id=int(env["ROS_DOMAIN_ID"]))
    try:
        rt = {(n, tuned): bench_round_trip(harness, context, env, work, n, args.calls, tuned)
              for n in (256, 1024) for tuned in (False, True)}
        lats = {(rate, q): bench_latency(harness, context, env, work, rate, args.duration, q)
                for rate in args.rates for q in (1, 1000)}
    finally:
        context.try_shutdown()

    lines = [
        "# Control node benchmark",
        "",
        f"`.venv/bin/python bench/bench_control_node.py` on {platform.machine()} ({os.cpu_count()} cores, "
        f"shared with other jobs), {time.strftime('%Y-%m-%d', time.gmtime())}: load average {load_start:.1f} "
        f"at the start, {os.getloadavg()[0]:.1f} at the end. CPU twin backend, node and client in separate "
        "processes over localhost-only Fast DDS (shared memory). Medians unless stated. One-off measurements "
        "from earlier work (the round trip's breakdown by a probe, before/after): control_node_history.md.",
        "",
        f"## `~/set_weights` round trip (full N×N matrix, {args.calls} calls each)",
        "",
        "Node allocator: `tuned` = the node's default (`retain_large_allocations`: glibc mmap threshold "
        "32 MB, trim threshold 64 MB), `glibc default` = `LIBREDGETPU_ROS_MALLOC_TUNING=0`. "
        f"Client process tuned: {client_tuned}.",
        "",
        "| N | node allocator | round trip p50 | p99 | validate | quantize | blob | swap | node total "
        "| rest (ser/DDS) | in-process set_weights | round trip / in-process | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (n, tuned), r in rt.items():
        target = 3.0 if n == 256 else 10.0
        verdict = "met" if r["rtt_p50"] <= target else "missed"
        lines.append(
            f"| {n} | {'tuned' if tuned else 'glibc default'} | {r['rtt_p50']:.2f} ms | "
            f"{r['rtt_p99']:.2f} ms | {r['validate_p50']:.3f} | "
            f"{r['quantize_p50']:.3f} | {r['blob_p50']:.3f} | {r['swap_p50']:.3f} | "
            f"{r['node_total_p50']:.3f} | {r['rest_p50']:.2f} | {r['direct_p50']:.3f} ms | "
            f"{r['rtt_p50'] / r['direct_p50']:.1f}× | "
            f"≤ {target:g} ms: {verdict} |")
    lines += [
        "",
        f"## State -> command latency (JointState for {args.duration:g} s per rate, 8 -> 4 on Dense(256))",
        "",
        "| state rate | state_queue | states sent | commands received (dropped) | p50 | p99 | best | max "
        "| in-process matmul_versioned | p50 / in-process | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (rate, queue), lat in lats.items():
        verdict = "met" if lat["p50"] <= 1.0 else "missed"
        lines.append(
            f"| {rate:g} Hz | {queue} | {lat['sent']} | {lat['received']} "
            f"({lat['sent'] - lat['received']}) | "
            f"{lat['p50']:.3f} ms | {lat['p99']:.3f} ms | {lat['best']:.3f} ms | "
            f"{lat['max']:.2f} ms | {lat['direct_p50']:.3f} ms | {lat['p50'] / lat['direct_p50']:.1f}× | "
            f"p50 ≤ 1 ms: {verdict} |")
    lines += [
        "",
        "Latency = arrival of `CommandStamped` in the client minus the state's header stamp (taken by the "
        "publisher process right before `publish`), so it covers two DDS hops, the node's executor, the "
        "engine call and message building. The first 10 % of samples (warm-up) are dropped.",
        "",
    ]
    write_report(RESULTS, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
