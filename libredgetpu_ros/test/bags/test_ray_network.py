"""Issue 35, network safety: the local Ray cluster ``process-bags --engine ray`` starts (no ``--ray-address``)
is reachable from this machine only, and asks nothing of the network.

The command runs (``_ray_sockets_probe.py``) in a private network namespace that looks like a machine on a
network: a veth pair 10.200.0.1 <-> 10.200.0.2 with both ends inside and a default route through it, so
nothing leaves the namespace but the kernel has a route to 8.8.8.8, the address Ray asks it to route to
when it chooses the node's address. Each time a bag's result comes back, every TCP/UDP socket of the driver
and of every process Ray started (gcs_server, raylet, dashboard head, runtime-env and dashboard agents,
log monitor, autoscaler monitor, workers) must be bound to loopback (127.0.0.1, ::1, or 127.0.0.1 mapped
into IPv6 by gRPC's dual-stack sockets) and connected to loopback only; the node's address is 127.0.0.1;
usage statistics are off; the ``RAY_ADDRESS`` set in the environment is not followed. Before the fix
(ray.init(..., _node_ip_address="127.0.0.1")), Ray replaced that address by the veth's (10.200.0.2: the
source address of the route to 8.8.8.8); gcs_server, raylet (2 ports), the driver and every worker
listened on ``::`` (every interface), the runtime-env agent on 10.200.0.2, and the processes talked over
10.200.0.2; with ``RAY_ADDRESS`` set, ray.init() tried to join that cluster (a ValueError).

In tools/ros_sandbox.sh's namespace (only ``lo``) every attempt to route to 8.8.8.8 fails and Ray logs it:
``no_address_probe`` checks the command's stderr and every Ray log for that (used by
test_process_bags_ray.py's run there).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ..ros.test_default_discovery import NETNS_SETUP, requires_netns
from .test_process_bags import IMAGES, config

pytestmark = [pytest.mark.ros, pytest.mark.slow]

PROBE = Path(__file__).with_name("_ray_sockets_probe.py")
# 8.8.8.8 routable (nothing leaves: both ends are here), the cloud metadata address a listener of the probe's
NETWORKED = f"{NETNS_SETUP} && ip route add default via 10.200.0.2 && ip addr add 169.254.169.254/32 dev v1"
PROBE_LOGGED = ("8.8.8.8", "2001:4860:4860", "external connectivity")  # Ray's failed-probe warning


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # gRPC binds 127.0.0.1 as ::ffff:127.0.0.1 on a dual-stack socket
    return address.is_loopback


def off_loopback(snapshot: dict[str, Any]) -> list[str]:
    """Every socket bound to or connected to something other than loopback (an unbound socket, port 0,
    accepts nothing and is not counted)."""
    found = []
    for proc in snapshot["processes"]:
        for sock in proc["sockets"]:
            local, remote = sock["local"], sock["remote"]
            if (local and local[1] and not loopback(local[0])) or (remote and not loopback(remote[0])):
                found.append(f"{proc['name']} (pid {proc['pid']}: {proc['cmdline'][:100]}): {sock}")
    return found


@contextmanager
def ray_temp_dir() -> Iterator[Path]:
    """A private RAY_TMPDIR (Ray's sessions and logs), short: Ray's unix socket paths live under it."""
    path = Path(tempfile.mkdtemp(prefix="rayt"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def ray_logs(ray_tmp: Path) -> dict[str, str]:
    """Every log file of every Ray session under ``ray_tmp`` (not twice through the session_latest link)."""
    files = [p for p in ray_tmp.glob("ray/session_*/logs/**/*") if "session_latest" not in p.parts]
    return {str(p.relative_to(ray_tmp)): p.read_text(errors="replace") for p in files if p.is_file()}


def usage_reporting_off(logs: dict[str, str]) -> None:
    """The dashboard head (started even without a dashboard: usage statistics are reported from there)
    logged that reporting is off."""
    dashboard = [text for name, text in logs.items() if name.endswith("/dashboard.log")]
    assert dashboard and all("Usage reporting is disabled." in text for text in dashboard), dashboard


def no_address_probe(stderr: str, ray_tmp: Path) -> None:
    """No Ray process looked for its address through 8.8.8.8 (in a namespace without a route to it, every
    attempt is logged, to the command's stderr or to that process's log), and usage reporting is off."""
    logs = ray_logs(ray_tmp)
    assert logs, f"no Ray logs under {ray_tmp}"
    probed = [name for name, text in {"stderr": stderr, **logs}.items()
              if any(sign in text for sign in PROBE_LOGGED)]
    assert not probed, f"a Ray process looked its address up through 8.8.8.8: {probed}"
    usage_reporting_off(logs)


@requires_netns
def test_the_local_cluster_listens_on_loopback_only_on_a_networked_machine(tmp_path: Path, fixture_path,
                                                                           ros_env) -> None:
    pytest.importorskip("ray", reason="ray is installed by make setup (requirements.lock.txt)")
    from libredgetpu_ros.cli import main as cli

    bags = []
    for name, images in (("a", IMAGES[:2]), ("b", IMAGES[1:])):
        bags.append(tmp_path / "in" / name)
        assert cli.main(["make-bag", "--images", *(str(fixture_path(i)) for i in images), "--out",
                         str(bags[-1]), "--rate", "10", "--no-progress"]) == 0
    result_path = tmp_path / "probe.json"
    argv = ["process-bags", "--engine", "ray", "--jobs", "2", "--no-progress", "--config",
            str(config(tmp_path, fixture_path)), "-o", str(tmp_path / "out"), *map(str, bags)]
    command = ["unshare", "-n", "sh", "-c", f'{NETWORKED} && exec "$@"', "ray-probe", sys.executable,
               str(PROBE), str(result_path), *argv]
    with ray_temp_dir() as ray_tmp:
        # RAY_ADDRESS names a cluster: ray.init() with no address would join it (before: a ValueError)
        env = {**ros_env.env, "RAY_TMPDIR": str(ray_tmp), "RAY_ADDRESS": "10.200.0.2:6379"}
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-3000:]
        result = json.loads(result_path.read_text())
        assert result["exit_code"] == 0, run.stderr[-3000:]
        usage_reporting_off(ray_logs(ray_tmp))
    assert result["metadata_connections"] == [], "a Ray process asked the cloud metadata service"
    assert len(result["snapshots"]) == 2
    for snapshot in result["snapshots"]:
        names = {proc["name"] for proc in snapshot["processes"]}
        assert {"gcs_server", "raylet"} <= names and any(n.startswith("ray::") for n in names), names
        listening = [s for proc in snapshot["processes"] for s in proc["sockets"] if s["status"] == "LISTEN"]
        assert len(listening) >= 4, listening  # driver, gcs_server, raylet (2), workers, runtime-env agent
        offending = off_loopback(snapshot)
        assert not offending, "Ray sockets off loopback:\n" + "\n".join(offending)
        assert snapshot["node_ip"] == "127.0.0.1"
        assert snapshot["usage_stats_enabled"] is False
