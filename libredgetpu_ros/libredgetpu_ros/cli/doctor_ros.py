"""doctor's checks of the ROS environment that rclpy reads when it starts: the RMW implementation, the
domain id, the Fast DDS profile file and the template folder.

- RMW: rcl checks ``RMW_IMPLEMENTATION`` when its library is loaded (an initializer in librcl, before any
  node exists): the RMW must be loadable (a ``rmw_implementation`` build dlopens ``lib<name>.so``) and be
  the one rcl runs (a build linked to one RMW, as the PyPI wheels are, exits 102 on any other name). The
  check loads librcl the way ``import rclpy`` does, in a child process with the environment checked, and
  reports what rcl said; nothing is initialised, no participant is created.
- Domain id: parsed as rcl parses it (``strtoul`` base 0: ``0x10`` is 16, ``-1`` wraps to SIZE_MAX, which
  rcl takes for "default" = 0, trailing text is an error), then against the DDS port mapping (RTPS: port
  base 7400, 250 ports per domain, offsets up to 11, 2 per participant): the ports must stay <= 65535, so
  domains above 232 cannot start (Fast DDS: "Calculated port number is too high"), and a domain whose
  discovery ports fall in the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range) may collide
  with ports other programs were given.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from libredgetpu_ros.paths import file_kind
from libredgetpu_ros.textdata import clip

OK, WARN, FAIL = "OK", "WARN", "FAIL"
DEFAULT_RMW = "rmw_fastrtps_cpp"
# RTPS well-known ports (DDSI-RTPS 2.x, section 9.6.1.1), as Fast DDS and Cyclone DDS compute them.
PORT_BASE, DOMAIN_GAIN, PARTICIPANT_GAIN, MAX_OFFSET = 7400, 250, 2, 11
MAX_PORT = 65535
# The highest domain whose first participant's ports fit: (65535 - 7400 - 11) // 250 = 232.
MAX_DDS_DOMAIN = (MAX_PORT - PORT_BASE - MAX_OFFSET) // DOMAIN_GAIN
FEW_PARTICIPANTS = 120  # fewer participants than this fit in the domain's ports: said in a WARN
SIZE_MAX = 2**64 - 1
# RMW implementations that map domains to RTPS ports (zenoh does not).
DDS_RMWS = ("rmw_fastrtps_cpp", "rmw_fastrtps_dynamic_cpp", "rmw_cyclonedds_cpp", "rmw_connextdds",
            "rmw_gurumdds_cpp")
_PROBE = "import rclpy._rclpy_pybind11"  # loads librcl: its initializer checks RMW_IMPLEMENTATION
_RCL_SAID = re.compile(r"\[rcl\]: (.*?)(?:, at /|$)")


def parse_domain_id(text: str) -> int:
    """The domain id rcl reads from ``text`` (``rcl_get_default_domain_id``: C ``strtoul`` with base 0);
    ValueError with rcl's reason when rcl refuses it."""
    s = text.lstrip(" \t\n\v\f\r")
    negative = s[:1] == "-"
    if s[:1] in "+-" and s:
        s = s[1:]
    if s[:2].lower() == "0x" and s[2:3] and s[2:3] in "0123456789abcdefABCDEF":
        base, digits = 16, re.match(r"[0-9a-fA-F]*", s[2:])[0]
        rest = s[2 + len(digits):]
    elif s[:1] == "0":
        base, digits = 8, re.match(r"[0-7]*", s)[0]
        rest = s[len(digits):]
    else:
        base, digits = 10, re.match(r"[0-9]*", s)[0]
        rest = s[len(digits):]
    if not digits or rest:
        raise ValueError("ROS_DOMAIN_ID is not an integral number")
    if len(digits.lstrip("0")) > 64:  # past any 64-bit value in any base (and Python's int-string cap)
        raise ValueError("ROS_DOMAIN_ID is out of range")
    value = int(digits, base)
    if value > SIZE_MAX:
        raise ValueError("ROS_DOMAIN_ID is out of range")
    return (SIZE_MAX + 1 - value) % (SIZE_MAX + 1) if negative else value


def _ephemeral_range(path: Path) -> tuple[int, int] | None:
    try:
        low, high = (int(v) for v in path.read_text().split()[:2])
    except (OSError, ValueError):
        return None
    return low, high


def check_domain(environ: Mapping[str, str], port_range_file: Path) -> tuple[str, str, str]:
    """(status, detail, fix) of ROS_DOMAIN_ID for the RMW in ``environ``."""
    text = environ.get("ROS_DOMAIN_ID", "")
    rmw = environ.get("RMW_IMPLEMENTATION", "") or DEFAULT_RMW
    if text == "":
        return OK, "ROS_DOMAIN_ID unset: domain 0", ""
    fix = "export ROS_DOMAIN_ID=N with N in 0..101 (the ROS documentation's safe range)"
    try:
        domain = parse_domain_id(text)
    except ValueError as exc:
        return FAIL, f"ROS_DOMAIN_ID={clip(text, 40)!r}: {exc}: rclpy.init() fails", fix
    if domain == SIZE_MAX:
        return WARN, (f"ROS_DOMAIN_ID={clip(text, 40)!r} is read as SIZE_MAX, rcl's marker for the default "
                      "domain: the nodes use domain 0"), "export ROS_DOMAIN_ID=0 (or unset it)"
    if rmw not in DDS_RMWS:
        return OK, f"domain {domain} ({rmw} does not map domains to ports)", ""
    if domain > MAX_DDS_DOMAIN:
        return FAIL, (f"domain {domain}: its RTPS ports would be {PORT_BASE + DOMAIN_GAIN * domain} and up, "
                      f"past {MAX_PORT} (the highest domain {rmw} can use is {MAX_DDS_DOMAIN}): no node can "
                      "start (\"Calculated port number is too high\")"), fix
    base = PORT_BASE + DOMAIN_GAIN * domain
    participants = (MAX_PORT - base - MAX_OFFSET) // PARTICIPANT_GAIN + 1
    if participants < FEW_PARTICIPANTS:
        return WARN, (f"domain {domain}: ports {base}..{MAX_PORT} hold only {participants} participants "
                      "(ROS processes) on one machine"), fix
    ephemeral = _ephemeral_range(port_range_file)
    if ephemeral and ephemeral[0] <= base + MAX_OFFSET and base <= ephemeral[1]:
        return WARN, (f"domain {domain}: its discovery ports ({base}+) are in the kernel's ephemeral port "
                      f"range {ephemeral[0]}..{ephemeral[1]}: another program may hold them"), fix
    return OK, f"domain {domain} (ports {base}+)", ""


def probe_rmw(environ: Mapping[str, str], timeout_s: float = 30.0) -> tuple[int, str]:
    """(exit code, what rcl said) of loading librcl with ``environ``, in a child process (rcl exits the
    process when the RMW does not match or cannot be loaded)."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], env=dict(environ), capture_output=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return -1, f"loading rclpy did not finish in {timeout_s:g} s"
    except OSError as exc:
        return -1, f"cannot run {sys.executable}: {exc.strerror}"
    text = done.stderr.decode(errors="replace")
    said = _RCL_SAID.search(text)
    lines = [line for line in text.splitlines() if line.strip()]
    return done.returncode, clip(said[1] if said else (lines[-1] if lines else ""), 300)


def check_rmw(environ: Mapping[str, str], probe=probe_rmw) -> tuple[str, str, str]:
    """(status, detail, fix) of RMW_IMPLEMENTATION, by what rcl does when rclpy loads it."""
    rmw = environ.get("RMW_IMPLEMENTATION", "") or f"{DEFAULT_RMW} (default)"
    code, said = probe(environ)
    if code == 0:
        return OK, f"RMW {rmw} loads", ""
    return FAIL, (f"RMW_IMPLEMENTATION={clip(rmw, 60)!r}: loading rclpy exits {code}"
                  f"{': ' + said if said else ''}"), (
        f"unset RMW_IMPLEMENTATION (the default is {DEFAULT_RMW}), or install that RMW for this ROS "
        "distro (apt-get install ros-$ROS_DISTRO-<rmw name with - for _>)")


def check_profile_file(path: str) -> tuple[str, str, str] | None:
    """None when FASTDDS_DEFAULT_PROFILES_FILE names a regular file, else (status, detail, fix)."""
    kind = file_kind(path)
    if kind is None:
        return None
    fix = "point FASTDDS_DEFAULT_PROFILES_FILE at an XML file, or unset it"
    if kind == "missing":
        return WARN, (f"FASTDDS_DEFAULT_PROFILES_FILE={clip(path)} does not exist: Fast DDS uses its "
                      "defaults"), fix
    return FAIL, (f"FASTDDS_DEFAULT_PROFILES_FILE={clip(path)} is {kind}, not an XML file: every ROS process "
                  "would block or fail reading it"), fix


def check_templates_env(environ: Mapping[str, str]) -> tuple[str, str, str] | None:
    """None when LIBREDGETPU_ROS_TEMPLATES is unset or a folder, else (status, detail, fix): a file, a FIFO
    or nothing there would be passed over silently by the template search."""
    from libredgetpu_ros.models.templates import TEMPLATES_ENV

    value = environ.get(TEMPLATES_ENV, "")
    if not value:
        return None
    kind = file_kind(value)
    if kind == "a folder":
        return None
    what = "a file" if kind is None else kind
    return WARN, (f"{TEMPLATES_ENV}={clip(value)} is {what}, not a folder: the template search skips it"), (
        f"export {TEMPLATES_ENV}=FOLDER (a folder of templates), or unset it")
