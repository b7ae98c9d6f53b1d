"""``python _ray_sockets_probe.py RESULT.json ARGV...``: runs ``libredgetpu-ros ARGV`` (``process-bags
--engine ray ...``) in this process and writes, as JSON, the command's exit status and, each time a bag's
result comes back (the local cluster up, its workers started), a snapshot: the node address Ray took,
whether usage statistics are on, and every TCP/UDP socket of this process (the driver) and of every
process under it (gcs_server, raylet, agents, log monitor, workers: the local cluster is all descendants).
Also the connections a listener on the cloud metadata address (169.254.169.254:80, when the namespace
has it) accepted during the run: Ray's dashboard head asks it which cloud it runs in.

psutil reads the sockets from /proc/net/{tcp,tcp6,udp,udp6} of this process's network namespace (the
cluster's) joined with each process's /proc/<pid>/fd inodes: run it in the namespace under test.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import psutil

METADATA = ("169.254.169.254", 80)


def snapshot() -> dict[str, Any]:
    import ray
    from ray._common.usage import usage_lib

    me = psutil.Process()
    processes = []
    for proc in [me, *me.children(recursive=True)]:
        try:
            with proc.oneshot():
                name, cmdline = proc.name(), " ".join(proc.cmdline())[:200]
                connections = proc.net_connections(kind="inet")
        except psutil.NoSuchProcess:  # a worker that exited meanwhile
            continue
        sockets = [{"type": "tcp" if c.type == socket.SOCK_STREAM else "udp",
                    "local": [c.laddr.ip, c.laddr.port] if c.laddr else None,
                    "remote": [c.raddr.ip, c.raddr.port] if c.raddr else None, "status": c.status}
                   for c in connections if not (c.laddr and tuple(c.laddr) == METADATA)]  # the trap's
        processes.append({"pid": proc.pid, "name": name, "cmdline": cmdline, "sockets": sockets})
    return {"node_ip": ray.util.get_node_ip_address(), "usage_stats_enabled": usage_lib.usage_stats_enabled(),
            "processes": processes}


def metadata_trap() -> list[str]:
    """Accepts (and closes) every connection to the metadata address, noting who came; nothing when the
    namespace does not have that address."""
    seen: list[str] = []
    try:
        server = socket.create_server(METADATA)
    except OSError:
        return seen

    def serve() -> None:
        while True:
            conn, peer = server.accept()
            seen.append(f"{peer[0]}:{peer[1]}")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return seen


def main() -> int:
    result_path, argv = Path(sys.argv[1]), sys.argv[2:]
    metadata_connections = metadata_trap()
    from libredgetpu_ros.ros import fleet_ray

    run_ray = fleet_ray.run_ray
    snapshots: list[dict[str, Any]] = []

    def run_ray_observed(jobs: list, on_record: Any, **kwargs: Any) -> None:
        def observed(record: dict) -> None:
            snapshots.append(snapshot())
            on_record(record)

        run_ray(jobs, observed, **kwargs)

    fleet_ray.run_ray = run_ray_observed  # process_bags_cmd imports it when it runs
    from libredgetpu_ros.cli import main as cli

    code = cli.main(argv)
    result_path.write_text(json.dumps({"exit_code": code, "snapshots": snapshots,
                                       "metadata_connections": metadata_connections}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
