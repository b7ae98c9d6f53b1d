"""``libredgetpu-ros tt-worker``: a software Team Tensor worker board on UDP (see docs/teamtensor.md)."""

from __future__ import annotations

import argparse
import ipaddress
import json

HELP = "run a software Team Tensor worker (model managers, batch queue, NumPy training) on UDP"
EXAMPLES = (
    "libredgetpu-ros tt-worker                                    # 127.0.0.1:18500, as trainer.yaml",
    "libredgetpu-ros tt-worker --host 0.0.0.0 --key-file tt.key   # robot network: HMAC on each datagram",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=18500, help="UDP port (0 = any free port; default 18500)")
    parser.add_argument("--managers", type=int, default=4, help="model managers on this worker")
    parser.add_argument("--queue", type=int, default=8, help="batches the batch queue holds (B_FULL)")
    parser.add_argument("--learning-rate", type=float, default=0.05, help="SGD step size")
    parser.add_argument("--framing", choices=("reliable", "seed"), default="reliable",
                        help="reliable (default): integrity tag, sessions, request ids, fragments; seed: "
                             "exactly the seed's bytes, best effort (for peers built from the seed alone)")
    parser.add_argument("--value-dtype", default=">f4",
                        help="tensor value type on the wire, a NumPy dtype (default >f4; the seed's examples "
                             "use >i4)")
    parser.add_argument("--key", default=None,
                        help="shared key: datagrams carry an HMAC-SHA256 tag instead of a CRC-32 (reliable "
                             "framing); both ends need the same key")
    parser.add_argument("--key-file", default=None, help="read the shared key from this file (first line)")
    parser.add_argument("--session-timeout", type=float, default=10.0,
                        help="s of silence after which another Data Source may take the worker over")
    parser.add_argument("--memory-budget-mb", type=float, default=128.0,
                        help="MiB training one batch may allocate; larger models/batches are refused")
    parser.add_argument("--json", action="store_true",
                        help="print the listening address and, at exit, the counters as JSON lines")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal
    import sys

    from libredgetpu_ros.errors import ConfigError, ProtocolError
    from libredgetpu_ros.teamtensor.datagrams import read_key
    from libredgetpu_ros.teamtensor.wire import WireFormat
    from libredgetpu_ros.teamtensor.worker import MiB, WorkerConfig, WorkerCore, serve

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: not a UDP port")
    if args.managers < 1 or args.queue < 1 or not args.learning_rate > 0:
        raise ConfigError("--managers and --queue must be >= 1 and --learning-rate > 0")
    if not args.session_timeout > 0 or not args.memory_budget_mb > 0:
        raise ConfigError("--session-timeout and --memory-budget-mb must be > 0")
    key = read_key(args.key, args.key_file)
    try:
        wire = WireFormat(value_dtype=args.value_dtype, framing=args.framing)
    except ProtocolError as exc:
        raise ConfigError(f"--value-dtype {args.value_dtype!r} / --framing {args.framing}: {exc}") from exc
    if key is not None and wire.seed:
        raise ConfigError("--key needs --framing reliable: the seed's packets have no room for a tag")
    config = WorkerConfig(managers=args.managers, queue_capacity=args.queue, learning_rate=args.learning_rate,
                          session_timeout=args.session_timeout,
                          memory_budget=int(args.memory_budget_mb * MiB))
    core = WorkerCore(config, wire, key)

    def ready(addr: tuple[str, int]) -> None:
        if key is None and not _loopback(args.host):  # bound: say so once, before serving anyone
            print(f"warning: tt-worker bound to {args.host} without --key: anyone who can reach this port "
                  "can assign models and read weights (use --key on robot networks)", file=sys.stderr,
                  flush=True)
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


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
