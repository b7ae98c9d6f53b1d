"""A ``~/set_weights`` call sent right after ``wait_for_service`` against one sent once discovery has settled.

``wait_for_service`` returns when the client sees the server's side; the server may match the client's
request writer later, and a request sent before that waits in DDS. ``bench_first_call.py`` therefore waits
1 s after ``wait_for_service`` (``_first_call_node.SETTLE_S``); this bench measures what that wait avoids
(docs/control_node.md, "The first call").

Each launch: a fresh server process (``_first_call_node``'s "bare, warmed" server: a bare rclpy
``SetWeights`` service that converted one full-size request before spinning, so the first call's own
first-use cost is small) and a fresh client process, kinds interleaved:

- ``right after``: the first call sent as soon as ``wait_for_service`` returns;
- ``settled`` (the baseline, same run): the first call sent ``SETTLE_S`` later, as ``bench_first_call`` does.

Both then make 10 more calls; N = 1024 (4 MB requests, built before the timed calls). Per launch: the
client's wall time of the first round trip minus the median of the next 10, and the wall time of
``wait_for_service`` from the client node's creation. Client wall time: discovery is waiting, not CPU.

    tools/ros_sandbox.sh .venv/bin/python bench/bench_service_discovery.py   # results/service_discovery.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _first_call_node as server_part
from _timing import write_report

RESULTS = Path(__file__).resolve().parent / "results" / "service_discovery.md"
SERVER_KIND = "bare, warmed"
KINDS = {"right after `wait_for_service`": 0.0,
         f"settled ({server_part.SETTLE_S:g} s later)": server_part.SETTLE_S}
CALLS = 10
WAITED_MS = 50.0  # an excess this large is no first-use cost (those are 0.7-10 ms: first_call.md)


def client(fqn: str, settle: float, calls: int) -> int:
    """A client process: requests built, the service waited for, ``settle`` s more, then the calls timed."""
    import threading
    import time

    import numpy as np
    import rclpy
    from libredgetpu_ros.ros.control.client import create_weights_client
    from libredgetpu_ros.ros.control.codec import to_float32_array
    from libredgetpu_ros.ros.memory import retain_large_allocations
    from rclpy.executors import SingleThreadedExecutor

    from libredgetpu_ros_interfaces.srv import SetWeights

    retain_large_allocations()  # as bench_first_call's client and a planner with large messages
    rng = np.random.default_rng(1)
    n = server_part.N
    requests = []
    for _ in range(calls + 1):
        request = SetWeights.Request(rows=n, cols=n)
        request.data = to_float32_array(rng.uniform(-1e-3, 1e-3, (n, n)))
        requests.append(request)
    rclpy.init()
    t0 = time.perf_counter()
    node = rclpy.create_node("discovery_client")
    set_weights = create_weights_client(node, f"{fqn}/set_weights")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    if not set_weights.wait_for_service(timeout_sec=120.0):
        raise TimeoutError("set_weights not available")
    found = (time.perf_counter() - t0) * 1e3
    time.sleep(settle)
    rtts = []
    for request in requests:
        done = threading.Event()
        start = time.perf_counter()
        future = set_weights.call_async(request)
        future.add_done_callback(lambda _f, done=done: done.set())
        if not done.wait(60.0):
            raise TimeoutError("no answer from set_weights")
        rtts.append((time.perf_counter() - start) * 1e3)
        if not future.result().accepted:
            raise RuntimeError(future.result().message)
    print(json.dumps({"found_ms": found, "rtt": rtts}), flush=True)
    os._exit(0)  # the executor thread is still spinning: the parent has what it needs


def launch(kind: str, settle: float, ns: str, env: dict[str, str], work: Path) -> dict:
    tap, log = work / f"tap{ns.replace('/', '_')}.jsonl", work / f"server{ns.replace('/', '_')}.log"
    server = subprocess.Popen(
        [sys.executable, server_part.__file__, "serve", SERVER_KIND, str(tap), "--ros-args", "-r",
         f"__ns:={ns}"],
        env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        done = subprocess.run([sys.executable, __file__, "client", f"{ns}/control_node", str(settle),
                               str(CALLS)], env=env, capture_output=True, text=True, timeout=600)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} client failed (server log {log}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=10, help="fresh server + client processes per kind")
    parser.add_argument("--out", type=Path, default=RESULTS, help="report file (trial runs: elsewhere)")
    args = parser.parse_args()
    from libredgetpu_ros.ros.environment import localhost_only_environ

    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench_discovery_"))
    env = localhost_only_environ(domain_id=170 + os.getpid() % 30, log_dir=str(work / "ros_log"))
    runs: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for i in range(args.launches):
        for k, (kind, settle) in enumerate(KINDS.items()):
            runs[kind].append(launch(kind, settle, f"/discovery_{i}_{k}", env, work))
    lines = [
        "# First `~/set_weights` call: right after `wait_for_service` vs once discovery has settled",
        "",
        f"`tools/ros_sandbox.sh .venv/bin/python bench/bench_service_discovery.py` on {platform.machine()} "
        f"({os.cpu_count()} cores shared with ~8 other engineers' jobs: load average {load_start:.1f} at the "
        f"start, {os.getloadavg()[0]:.1f} at the end). {args.launches} launches per kind, interleaved; each "
        f"a fresh server (`_first_call_node`'s \"{SERVER_KIND}\" bare rclpy service) and a fresh client "
        "process, "
        f"localhost-only Fast DDS; N = {server_part.N} (4 MB requests); client wall time. Excess = first "
        f"round trip − median of the next {CALLS} in the same launch; a launch *waited* when its excess is "
        f"over {WAITED_MS:g} ms.",
        "",
        "| first call sent | excess: median | min–max | launches that waited | their excess | first round "
        "trip (median) | median of next (median) | `wait_for_service` returned after (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, launches in runs.items():
        excess = [r["rtt"][0] - statistics.median(r["rtt"][1:]) for r in launches]
        waited = [e for e in excess if e > WAITED_MS]
        waited_cell = f"{min(waited):.0f}–{max(waited):.0f} ms" if waited else "–"
        lines.append(
            f"| {kind} | {statistics.median(excess):.1f} ms | {min(excess):.1f}–{max(excess):.1f} ms | "
            f"{len(waited)}/{len(excess)} | {waited_cell} | "
            f"{statistics.median(r['rtt'][0] for r in launches):.1f} ms | "
            f"{statistics.median(statistics.median(r['rtt'][1:]) for r in launches):.1f} ms | "
            f"{statistics.median(r['found_ms'] for r in launches):.0f} ms |")
    (work / "runs.json").write_text(json.dumps(runs))  # every launch's calls, for a closer look
    write_report(args.out, lines)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        sys.exit(client(sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))
    sys.exit(main())
