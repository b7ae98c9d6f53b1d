"""The first ``~/set_weights`` round trip after ``active`` against the next 20, and where its extra time goes;
part 3 of ``bench_first_call.py`` (report: bench/results/first_call.md).

Every launch is a fresh server process and a fresh client process (so each sample pays every first use of
both sides, as a planner starting against a node does), interleaved by kind:

- ``control``: the control node (``template:=1024``, CPU twin) from the read-only package copy on an empty
  cache folder; the client configures and activates it, waits for the service, then makes 21 calls;
- ``control, warm-up off``: the same with ``Controller.warm_service_path`` replaced by a no-op in the node's
  process (the node as it was before the warm-up: the before/after in one run);
- ``bare``: a bare rclpy service of the same type (``SetWeights``) answering at once, same executor
  (``SingleThreadedExecutor``) and allocator setting as the node, same payload (1024×1024 float32):
  what rclpy and DDS cost by themselves;
- ``bare, warmed``: the bare service doing the node's warm-up conversion (``controller.converted_request``)
  before spinning: what is left when the server converted a full-size request once, i.e. what the server
  cannot remove (the client's first DDS write of 4 MB, its delivery, the first wake-ups).

The server processes run this file as a program (``serve``); their executor's take and response send are
timed (``_tap``: ``Executor._take_service`` and ``Service.send_response`` wrapped, timestamps in
``CLOCK_REALTIME`` like the client's), so each round trip splits into: client send (``call_async``:
conversion, serialization, DDS write), delivery to the server's take, the take (deserialization), the
handler, the response send, and the way back to the client's future.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

N = 1024
KINDS = ("control, warm-up off", "control", "bare", "bare, warmed")
SEGMENTS = ("client send", "to server take", "server take", "handler", "response send", "back to client")
T_CONFIGURE, T_ACTIVATE = 1, 3
SETTLE_S = 1.0  # after wait_for_service, before the first call (client())


def _tap(path: str) -> None:
    """Record each ``set_weights`` call's take and response-send times (ns) to ``path`` (JSON lines)."""
    import time

    import rclpy.executors
    import rclpy.service

    take, send = rclpy.executors.Executor._take_service, rclpy.service.Service.send_response
    marks: dict[str, int] = {}

    def timed_take(self, srv):  # rclpy's private signature, kept as is
        t0 = time.time_ns()
        execute = take(self, srv)
        marks.update(take0=t0, take1=time.time_ns())
        return execute

    def timed_send(self, response, header):
        t0 = time.time_ns()
        send(self, response, header)
        if self.srv_name.endswith("/set_weights"):
            with open(path, "a") as out:
                out.write(json.dumps({**marks, "send0": t0, "send1": time.time_ns()}) + "\n")

    rclpy.executors.Executor._take_service = timed_take
    rclpy.service.Service.send_response = timed_send


def serve(kind: str, tap: str, ros_args: list[str]) -> int:
    """A server process: the control node's own ``main()`` or the bare service, with ``_tap`` on."""
    _tap(tap)
    if kind.startswith("control"):
        from libredgetpu_ros.ros.control.controller import Controller
        from libredgetpu_ros.ros.control.node import main

        from libredgetpu_ros_interfaces.srv import SetWeights

        if "warm-up off" in kind:
            Controller.warm_service_path = lambda _self, _clip: SetWeights.Response(accepted=True)
        return main(ros_args)
    from libredgetpu_ros.ros.memory import retain_large_allocations

    retain_large_allocations()  # as the control node's main() does, before rclpy allocates
    import rclpy
    from libredgetpu_ros.ros.control.controller import converted_request
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    from libredgetpu_ros_interfaces.srv import SetWeights

    if "warmed" in kind:
        converted_request(N, N)
    rclpy.init(args=ros_args)
    node = rclpy.create_node("control_node", enable_rosout=False, start_parameter_services=False)

    def on_call(request: SetWeights.Request, response: SetWeights.Response) -> SetWeights.Response:
        response.accepted, response.version, response.message = True, 1, "swapped"
        return response

    node.create_service(SetWeights, "~/set_weights", on_call)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    with contextlib.suppress(KeyboardInterrupt, ExternalShutdownException):
        executor.spin()
    return 0


def client(kind: str, fqn: str, calls: int) -> int:
    """A client process: configure + activate (control node), 21 requests built, the service waited for,
    then the calls timed one by one; prints one JSON line."""
    import threading
    import time

    import numpy as np
    import rclpy
    from libredgetpu_ros.ros.control.client import create_weights_client
    from libredgetpu_ros.ros.control.codec import to_float32_array
    from libredgetpu_ros.ros.memory import retain_large_allocations
    from lifecycle_msgs.srv import ChangeState
    from rclpy.executors import SingleThreadedExecutor

    from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

    retain_large_allocations()  # a planner with large messages would (docs/control_node.md)
    rclpy.init()
    node = rclpy.create_node("first_call_client")
    set_weights = create_weights_client(node, f"{fqn}/set_weights")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()

    def call(cli: object, request: object, timeout: float = 120.0) -> object:
        if not cli.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"{cli.srv_name} not available")
        done = threading.Event()
        future = cli.call_async(request)
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout):
            raise TimeoutError(f"no answer from {cli.srv_name}")
        return future.result()

    scale = np.full((N, 1), 1e-3, np.float32)
    if kind.startswith("control"):
        change = node.create_client(ChangeState, f"{fqn}/change_state")
        for transition in (T_CONFIGURE, T_ACTIVATE):
            request = ChangeState.Request()
            request.transition.id = transition
            if not call(change, request).success:
                raise RuntimeError(f"transition {transition} failed")
        weights = call(node.create_client(GetWeights, f"{fqn}/get_weights"), GetWeights.Request())
        scale = np.frombuffer(weights.weight_max, np.float32)[:, None]
    rng = np.random.default_rng(1)
    requests = []
    for _ in range(calls + 1):  # built before the timed calls: the service is measured, not the packing
        request = SetWeights.Request(rows=N, cols=N)
        request.data = to_float32_array(rng.uniform(-0.9, 0.9, (N, N)) * scale)
        requests.append(request)
    if not set_weights.wait_for_service(timeout_sec=120.0):
        raise TimeoutError("set_weights not available")
    # wait_for_service sees the client's side matched; the server's side may match the client's request
    # writer later, and a request sent before that waited ~100 ms in DDS (5 of 10 launches of one kind in
    # one run): every kind settles the same time, so the first call measures first use, not discovery.
    time.sleep(SETTLE_S)
    rows = []
    for request in requests:
        done = threading.Event()
        c0, t0 = time.time_ns(), time.perf_counter()
        future = set_weights.call_async(request)
        c1 = c0 + round((time.perf_counter() - t0) * 1e9)
        future.add_done_callback(lambda _f, done=done: done.set())
        if not done.wait(60.0):
            raise TimeoutError("no answer from set_weights")
        rtt = (time.perf_counter() - t0) * 1e3
        response = future.result()
        if not response.accepted:
            raise RuntimeError(response.message)
        rows.append({"rtt": rtt, "c0": c0, "c1": c1, "c2": c0 + round(rtt * 1e6),
                     "total_ms": response.total_ms})
    print(json.dumps(rows), flush=True)
    os._exit(0)  # the executor thread is still spinning: no teardown race, the parent has what it needs


def _segments(call: dict, server: dict) -> list[float]:
    ms = 1e-6
    return [(call["c1"] - call["c0"]) * ms, (server["take0"] - call["c1"]) * ms,
            (server["take1"] - server["take0"]) * ms, (server["send0"] - server["take1"]) * ms,
            (server["send1"] - server["send0"]) * ms, (call["c2"] - server["send1"]) * ms]


def run(prefix: list[str], env: dict[str, str], work: Path, launches: int,
        calls: int) -> dict[str, list[dict]]:
    """``launches`` launches of each kind, interleaved; per launch the client's calls and the server's tap."""
    out: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for i in range(launches):
        for k, kind in enumerate(KINDS):
            ns = f"/first_call_{i}_{k}"
            tap = work / f"tap_{i}_{k}.jsonl"
            node_env = {**env, "XDG_CACHE_HOME": str(work / f"node_cache_{i}_{k}")}  # empty: a new folder
            log = work / f"server_{i}_{k}.log"
            server = subprocess.Popen(
                [*prefix, sys.executable, __file__, "serve", kind, str(tap), "--ros-args", "-r",
                 f"__ns:={ns}", "-p", "backend:=cpu", "-p", f"template:={N}", "-p", "clip_policy:=clip"],
                env=node_env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
            try:
                done = subprocess.run([sys.executable, __file__, "client", kind, f"{ns}/control_node",
                                       str(calls)], env=env, capture_output=True, text=True, timeout=600)
            finally:
                server.terminate()
                try:
                    server.wait(timeout=20)
                except subprocess.TimeoutExpired:  # rclpy's own SIGTERM handling hung the bare server once
                    server.kill()
                    server.wait(timeout=20)
            if done.returncode != 0:
                raise RuntimeError(f"{kind} client failed (server log {log}):\n{done.stderr[-3000:]}")
            rows = json.loads(done.stdout.strip().splitlines()[-1])
            taps = [json.loads(line) for line in tap.read_text().splitlines()]
            if len(taps) != len(rows):
                raise RuntimeError(f"{kind}: {len(rows)} calls but {len(taps)} tapped responses ({tap})")
            for row, srv in zip(rows, taps, strict=True):
                row["segments"] = _segments(row, srv)
            out[kind].append({"calls": rows})
    (work / "first_call_node.json").write_text(json.dumps(out))  # every call, for a closer look (--keep)
    return out


def _spread(values: list[float], digits: int = 2) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"


def report(runs: dict[str, list[dict]], calls: int) -> list[str]:
    """The report's section: per kind the distribution of first / median-of-next over the launches, and the
    median split of the first call and of the next ones."""
    launches = len(next(iter(runs.values())))
    lines = [
        f"## Control node: first `~/set_weights` after `active` vs a bare rclpy service ({launches} launches "
        f"per kind, N = {N}, 4 MB requests)",
        "",
        "Each launch: a fresh server process and a fresh client process (kinds interleaved); the control "
        "node from the read-only package copy on an empty cache folder, configured and activated by the "
        f"client, which waits for the service and {SETTLE_S:g} s more (discovery settled on both sides), "
        f"then makes {calls + 1} calls (requests built beforehand). "
        f"Ratio = first round trip / median of the next {calls} in the same launch (client wall time).",
        "",
        "| server | first / median: median | spread (min–max) | launches ≤ 2× | first round trip (median) "
        "| median of next (median) | first − median: median | spread |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, launch_runs in runs.items():
        ratios, firsts, nexts, excess = [], [], [], []
        for run in launch_runs:
            rtt = [c["rtt"] for c in run["calls"]]
            med = statistics.median(rtt[1:])
            ratios.append(rtt[0] / med)
            firsts.append(rtt[0])
            nexts.append(med)
            excess.append(rtt[0] - med)
        lines.append(f"| {kind} | {statistics.median(ratios):.2f}× | {_spread(ratios)}× | "
                     f"{sum(r <= 2.0 for r in ratios)}/{len(ratios)} | {statistics.median(firsts):.2f} ms | "
                     f"{statistics.median(nexts):.2f} ms | {statistics.median(excess):.2f} ms | "
                     f"{_spread(excess, 1)} ms |")
    lines += [
        "",
        "Where the time goes (ms; medians over the launches of the first call and of each launch's median of "
        "the next calls, so a column's entries do not add up to the round trip; timestamps in CLOCK_REALTIME "
        "of the client and of the server's executor; a negative entry: the server took the request before "
        "the client's `call_async` returned):",
        "",
        "| server | call | " + " | ".join(SEGMENTS) + " | round trip |",
        "|---|---|" + "---|" * (len(SEGMENTS) + 1),
    ]
    for kind, launch_runs in runs.items():
        first = [[*r["calls"][0]["segments"], r["calls"][0]["rtt"]] for r in launch_runs]
        nxt = [[statistics.median(c["segments"][i] for c in r["calls"][1:]) for i in range(len(SEGMENTS))]
               + [statistics.median(c["rtt"] for c in r["calls"][1:])] for r in launch_runs]
        for label, table in (("first", first), ("next", nxt)):
            cells = " | ".join(f"{statistics.median(row[i] for row in table):.2f}"
                               for i in range(len(SEGMENTS) + 1))
            lines.append(f"| {kind} | {label} | {cells} |")
    return lines


if __name__ == "__main__":
    role, kind_arg = sys.argv[1], sys.argv[2]
    if role == "serve":
        sys.exit(serve(kind_arg, sys.argv[3], sys.argv[4:]))
    sys.exit(client(kind_arg, sys.argv[3], int(sys.argv[4])))
