"""Run inside a private network namespace that has a veth pair (10.200.0.1 <-> 10.200.0.2, both ends in the
namespace, so nothing leaves it): start one node entry point, listen for its DDS discovery on the default
multicast group, read its UDP sockets, stop it with SIGINT; print one JSON line.

    python _discovery_probe.py TIMEOUT_S COMMAND...

The node's environment is the caller's (the test gives it a clean one). Output keys: ``announced_on`` (the
v0/v1 addresses found as locators in an RTPS datagram received on 239.255.0.1:7400 through v1, the default
domain's SPDP port), ``bound`` (the local addresses of the node's IPv4 UDP sockets), ``exit_code``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

GROUP, SPDP_PORT = "239.255.0.1", 7400  # Fast DDS / RTPS defaults for domain 0
ADDRESSES = ("10.200.0.1", "10.200.0.2")


def _bound_addresses(pid: int) -> list[str]:
    """Local IPv4 addresses of the UDP sockets process ``pid`` holds (/proc/net/udp is per namespace; the
    socket inodes among the process's file descriptors pick its own)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    with open("/proc/net/udp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[9] in inodes:
                out.add(socket.inet_ntoa(struct.pack("<I", int(fields[1].split(":")[0], 16))))
    return sorted(out)


def main() -> int:
    timeout_s, command = float(sys.argv[1]), sys.argv[2:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("", SPDP_PORT))
    listener.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                        socket.inet_aton(GROUP) + socket.inet_aton(ADDRESSES[1]))
    listener.settimeout(0.5)
    node = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    announced: set[str] = set()
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not announced:
        try:
            data, _ = listener.recvfrom(65536)
        except TimeoutError:
            continue
        if data[:4] == b"RTPS":
            announced = {a for a in ADDRESSES if socket.inet_aton(a) in data}
    bound = _bound_addresses(node.pid)
    node.send_signal(signal.SIGINT)
    try:
        code = node.wait(timeout=20)
    except subprocess.TimeoutExpired:
        node.kill()
        code = node.wait()
    print(json.dumps({"announced_on": sorted(announced), "bound": bound, "exit_code": code}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
