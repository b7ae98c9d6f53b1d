"""State publisher process for the control node tests and benchmark (run it with the localhost-only env).

Publishes ``sensor_msgs/JointState`` at a fixed rate for a bounded time, each stamped with the current time
(unique per message) and holding random positions in [-amplitude, amplitude] under the joint names given, in
a shuffled message order. On exit it writes what it sent (stamp in ns, state in the *configured* joint
order) to an .npz file, so the consumer can match every command to the state that produced it.

    python _control_state_publisher.py --topic /state --names j0,j1,j2 --rate 500 --duration 3 --out sent.npz
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--names", required=True, help="comma-separated joint names (state vector order)")
    parser.add_argument("--rate", type=float, default=500.0, help="Hz")
    parser.add_argument("--duration", type=float, default=3.0, help="s of publishing (after discovery)")
    parser.add_argument("--amplitude", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stamp-offset", type=float, default=0.0,
                        help="s added to every stamp (negative = stale states)")
    parser.add_argument("--discovery-timeout", type=float, default=20.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import rclpy
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import JointState

    names = args.names.split(",")
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(names))  # message order differs from the configured order on purpose
    rclpy.init()
    node = rclpy.create_node("control_test_state_publisher")
    pub = node.create_publisher(JointState, args.topic, QoSProfile(depth=1000))
    deadline = time.monotonic() + args.discovery_timeout
    while pub.get_subscription_count() == 0:
        if time.monotonic() > deadline:
            print(f"no subscriber on {args.topic} after {args.discovery_timeout} s", file=sys.stderr)
            return 1
        time.sleep(0.02)
    time.sleep(0.2)  # let the reliable reader finish matching before the first sample

    count = max(1, int(args.rate * args.duration))
    states = rng.uniform(-args.amplitude, args.amplitude, size=(count, len(names))).astype(np.float32)
    stamps = np.zeros(count, np.int64)
    msg = JointState()
    msg.name = [names[i] for i in order]
    period = 1.0 / args.rate
    offset_ns = int(args.stamp_offset * 1e9)
    start = time.perf_counter()
    last_ns = 0
    for k in range(count):
        # Sleep until this message's slot (absolute schedule: no drift from jitter).
        delay = start + k * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        now_ns = max(time.time_ns(), last_ns + 1) + offset_ns  # strictly increasing, so stamps are unique
        last_ns = now_ns - offset_ns
        stamps[k] = now_ns
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now_ns, 1_000_000_000)
        msg.position = states[k, order].astype(np.float64).tolist()
        pub.publish(msg)
    time.sleep(0.3)  # let reliable delivery drain before the publisher goes away
    tmp = Path(f"{args.out}.partial")
    with tmp.open("wb") as f:
        np.savez(f, stamps=stamps, states=states)
    os.replace(tmp, args.out)  # atomic: a reader polling for --out never sees a half-written file
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
