"""``libredgetpu-ros tt-worker``: a software Team Tensor worker board on UDP (see docs/teamtensor.md)."""

from __future__ import annotations

import argparse
import json

HELP = "run a software Team Tensor worker (model managers, batch queue, NumPy training) on UDP"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=18500, help="UDP port (0 = any free port; default 18500)")
    parser.add_argument("--managers", type=int, default=4, help="model managers on this worker")
    parser.add_argument("--queue", type=int, default=8, help="batches the batch queue holds (B_FULL)")
    parser.add_argument("--learning-rate", type=float, default=0.05, help="SGD step size")
    parser.add_argument("--json", action="store_true",
                        help="print the listening address and, at exit, the counters as JSON lines")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from libredgetpu_ros.errors import ConfigError
    from libredgetpu_ros.teamtensor.worker import WorkerConfig, WorkerCore, serve

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: not a UDP port")
    if args.managers < 1 or args.queue < 1 or not args.learning_rate > 0:
        raise ConfigError("--managers and --queue must be >= 1 and --learning-rate > 0")
    core = WorkerCore(WorkerConfig(managers=args.managers, queue_capacity=args.queue,
                                   learning_rate=args.learning_rate))

    def ready(addr: tuple[str, int]) -> None:
        if args.json:
            print(json.dumps({"listening": {"host": addr[0], "port": addr[1]}}), flush=True)
        else:
            print(f"tt-worker listening on udp {addr[0]}:{addr[1]}", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):  # a clean stop: counters printed, socket closed
            loop.add_signal_handler(sig, stop.set)
        try:
            await serve(core, args.host, args.port, stop, ready)
        except OSError as exc:
            raise ConfigError(f"cannot bind udp {args.host}:{args.port}: {exc}") from exc

    asyncio.run(main())
    stats = core.stats.as_dict()
    if args.json:
        print(json.dumps({"stats": stats}), flush=True)
    else:
        print(f"tt-worker stopped: {stats['received']} datagrams, {stats['duplicates']} duplicates, "
              f"{stats['rejected_total']} rejected", flush=True)
    return 0
