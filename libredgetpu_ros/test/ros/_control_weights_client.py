"""Load client for the control node's ``set_weights`` (run as a process, with the localhost-only env).

Calls ``~/set_weights`` back to back (one outstanding call, like a planner) until ``--calls`` calls or
``--duration`` seconds, whichever comes first, each with its own weights and ``request_id``, through
``ros.control.client.call_set_weights``. A call without an answer within ``--timeout`` s is *lost*: with
``--retry`` it is sent again (same request, same request_id) and the answer says whether the first copy
had been applied. Writes a JSON summary to ``--out``.

    python _control_weights_client.py --fqn /ctl/control_node --rows 4 --cols 8 --duration 10 --out c0.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _control_harness import float32_field


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fqn", required=True)
    parser.add_argument("--name", default="weights_client")
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--cols", type=int, required=True)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--retry", action="store_true", help="re-send a lost call with the same request_id")
    parser.add_argument("--deep", action="store_true", help="the node's REPLY_QOS (history 1000) for the "
                        "client instead of ROS's default service QoS (history 10)")
    parser.add_argument("--fresh", action="store_true",
                        help="a new client per call (like a CLI per call); loses more replies under load")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from libredgetpu_ros_interfaces.srv import SetWeights

    rclpy.init()
    node = rclpy.create_node(args.name)
    from libredgetpu_ros.ros.control.client import REPLY_QOS, call_set_weights

    service = f"{args.fqn}/set_weights"
    qos = {"qos_profile": REPLY_QOS} if args.deep else {}
    client = node.create_client(SetWeights, service, **qos)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    if not client.wait_for_service(timeout_sec=20.0):
        print("service not available", file=sys.stderr)
        return 1
    rng = np.random.default_rng(zlib.crc32(args.name.encode()))
    # lost: no answer within --timeout; lost_then_applied: the retry was answered "replayed" (the first copy
    # had been applied, its reply lost); lost_not_applied: the retry applied it (the request had been lost).
    summary: dict = {"calls": 0, "answered": 0, "lost": 0, "lost_then_applied": 0, "lost_not_applied": 0,
                     "unresolved": 0, "refused": 0, "versions": [], "max_ms": 0.0}

    def call(req: SetWeights.Request, attempts: int) -> SetWeights.Response | None:
        nonlocal client
        if args.fresh:
            node.destroy_client(client)
            client = node.create_client(SetWeights, service, **qos)
            client.wait_for_service(timeout_sec=args.timeout)
        return call_set_weights(client, req, args.timeout, attempts)

    start = time.monotonic()
    while summary["calls"] < args.calls and time.monotonic() - start < args.duration:
        req = SetWeights.Request()
        req.rows, req.cols = args.rows, args.cols
        req.data = float32_field(rng.uniform(-1e-4, 1e-4, args.rows * args.cols))
        req.request_id = f"{args.name}-{summary['calls']}"
        summary["calls"] += 1
        t0 = time.perf_counter()
        resp = call(req, attempts=1)
        summary["max_ms"] = max(summary["max_ms"], (time.perf_counter() - t0) * 1e3)
        if resp is None:
            summary["lost"] += 1
            if not args.retry:
                continue
            resp = call(req, attempts=3)  # the same request_id: answered from the record if applied
            if resp is None:
                summary["unresolved"] += 1
                continue
            summary["lost_then_applied" if resp.replayed else "lost_not_applied"] += 1
        else:
            summary["answered"] += 1
        if resp.accepted:
            summary["versions"].append(int(resp.version))
        else:
            summary["refused"] += 1
    executor.shutdown(timeout_sec=2.0)
    spinner.join(timeout=5.0)
    node.destroy_node()
    rclpy.try_shutdown()
    tmp = Path(f"{args.out}.partial")
    tmp.write_text(json.dumps(summary))
    os.replace(tmp, args.out)  # atomic for a polling reader
    return 0


if __name__ == "__main__":
    sys.exit(main())
