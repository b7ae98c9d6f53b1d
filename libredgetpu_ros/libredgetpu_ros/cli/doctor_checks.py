"""Checks behind ``libredgetpu-ros doctor``: is this machine ready to run the nodes, and what to do if not.

Each check returns a :class:`Check` (``OK`` | ``WARN`` | ``FAIL``, what was found, and the one-line fix).
Everything a check reads from the machine comes through :class:`Machine` (sysfs and /dev roots, udev rule
folders, the environment, the model cache, how libusb and rclpy are found), so every branch is testable with
a fake tree instead of patched internals. ROS-free: rclpy is located, never imported (importing it would
start nothing, but it pulls in the rmw and reads the environment we are reporting on).

Sizes of camera frames (``frame_sizes``) decide the DDS transport check: a frame larger than the Fast DDS
shared-memory segment travels as fragmented UDP, where bursts of large frames are lost
(docs/perception_node.md "Large frames").
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from libredgetpu_ros.cli import doctor_ros
from libredgetpu_ros.cli.doctor_ros import FAIL, OK, WARN
from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.edgetpu.firmware import FIRMWARE_NAME, SOURCE_HINT, firmware_candidates
from libredgetpu_ros.edgetpu.locks import holders as lock_holders
from libredgetpu_ros.edgetpu.transport import UDEV_INSTALL_HINT, UDEV_RULE_FILE

_RANK = {OK: 0, WARN: 1, FAIL: 2}

RUNNING_ID = f"{r.APP_VENDOR_ID:04x}:{r.APP_PRODUCT_ID:04x}"
BOOTLOADER_ID = f"{r.DFU_VENDOR_ID:04x}:{r.DFU_PRODUCT_ID:04x}"
# sysfs `speed` is in Mbit/s; the Edge TPU needs USB 3 (5000) for its documented throughput.
USB3_MBPS = 5000.0
DEFAULT_FRAME = (1920, 1080, 3)  # the largest common camera stream: 1080p rgb8
KILTED_IGNORES_LOCALHOST_ONLY = ("ROS_LOCALHOST_ONLY is ignored since Kilted; "
                                 "use ROS_AUTOMATIC_DISCOVERY_RANGE")


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class UsbDevice:
    """An Edge TPU as sysfs shows it."""

    sysfs_name: str  # "1-2.3"
    usb_id: str
    mode: str  # running | bootloader
    speed_mbps: float | None
    node: Path | None  # /dev/bus/usb/BBB/DDD


@dataclass
class Machine:
    """Where the checks look. Defaults are this machine; tests pass fake trees."""

    sysfs_usb: Path = Path("/sys/bus/usb/devices")
    dev_root: Path = Path("/dev")
    udev_dirs: Sequence[Path] = (Path("/etc/udev/rules.d"), Path("/lib/udev/rules.d"),
                                 Path("/usr/lib/udev/rules.d"))
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    find_library: Callable[[str], str | None] = ctypes.util.find_library
    find_module: Callable[[str], bool] = lambda name: importlib.util.find_spec(name) is not None
    firmware_paths: Callable[[], list[Path]] = firmware_candidates
    model_status: Callable[[], dict[str, str]] | None = None  # name -> cached | partial | missing
    # template name -> (base path, "cache" or the folder) or None; default models/templates.find_template
    find_template: Callable[[str], tuple[Path, str] | None] | None = None
    python_version: tuple[int, int] = sys.version_info[:2]
    access: Callable[[Path, int], bool] = lambda path, mode: os.access(path, mode)
    # environ -> (exit code, what rcl said) of loading librcl as `import rclpy` does (doctor_ros.probe_rmw)
    probe_rmw: Callable[[Mapping[str, str]], tuple[int, str]] = doctor_ros.probe_rmw
    port_range_file: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")
    # device lock name (the bus path) -> "pid N (name)" of the process holding it (edgetpu/locks.py)
    device_holders: Callable[[], dict[str, str]] = lock_holders


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def find_accelerators(m: Machine) -> list[UsbDevice]:
    """Edge TPUs on the USB buses, read from sysfs (works without libusb and without permissions)."""
    found = []
    try:
        entries = sorted(m.sysfs_usb.iterdir())
    except OSError:
        return []
    for entry in entries:
        usb_id = f"{_read(entry / 'idVendor') or ''}:{_read(entry / 'idProduct') or ''}".lower()
        if usb_id not in (RUNNING_ID, BOOTLOADER_ID):
            continue
        try:
            speed = float(_read(entry / "speed") or "")
        except ValueError:
            speed = None
        bus, dev = _read(entry / "busnum"), _read(entry / "devnum")
        node = (m.dev_root / "bus" / "usb" / f"{int(bus):03d}" / f"{int(dev):03d}"
                if bus and dev and bus.isdigit() and dev.isdigit() else None)
        found.append(UsbDevice(entry.name, usb_id, "running" if usb_id == RUNNING_ID else "bootloader",
                               speed, node))
    return found


def check_python(m: Machine) -> Check:
    version = ".".join(map(str, m.python_version))
    if m.python_version >= (3, 11):
        return Check("python", OK, f"Python {version}")
    return Check("python", FAIL, f"Python {version}; the package needs 3.11 or newer",
                 "install python3.11 (Debian 12: apt-get install python3.11 python3.11-venv)")


def check_holders(m: Machine, devices: list[UsbDevice]) -> Check:
    """Which process holds each attached accelerator: only it can use the device (its nodes share it)."""
    if not devices:
        return Check("device holder", OK, "not checked: no accelerator attached")
    held = m.device_holders()
    busy = [f"{d.sysfs_name} held by {held[d.sysfs_name]}" for d in devices if d.sysfs_name in held]
    if not busy:
        return Check("device holder", OK, "no process holds an accelerator")
    return Check("device holder", OK, "; ".join(busy),
                 "a node in another process cannot open a held accelerator: run the camera nodes in the "
                 "holder's process (bringup / cameras.launch.py share one device), or stop the holder")


def check_libusb(m: Machine) -> Check:
    lib = m.find_library("usb-1.0")
    if lib:
        return Check("libusb", OK, f"{lib} found")
    return Check("libusb", FAIL, "libusb-1.0 is not installed: the Edge TPU driver cannot talk to USB",
                 "sudo apt-get install libusb-1.0-0")


def check_accelerator(devices: list[UsbDevice], require: bool) -> Check:
    if not devices:
        status = FAIL if require else WARN
        return Check("accelerator", status, "no Coral USB Accelerator enumerated: nodes with backend auto "
                     "run the CPU twin (slower); backend edgetpu or require_accelerator fails to configure",
                     "plug the accelerator into a USB 3 port (check `lsusb` for 1a6e:089a or 18d1:9302)")
    names = ", ".join(f"{d.sysfs_name} {d.usb_id} ({d.mode})" for d in devices)
    note = "; a bootloader-mode device gets its firmware when first opened" if any(
        d.mode == "bootloader" for d in devices) else ""
    return Check("accelerator", OK, f"{len(devices)} found: {names}{note}")


def check_link_speed(devices: list[UsbDevice]) -> Check:
    if not devices:
        return Check("usb link", WARN, "not checked: no accelerator attached")
    slow = [d for d in devices if d.speed_mbps is not None and d.speed_mbps < USB3_MBPS]
    if slow:
        text = ", ".join(f"{d.sysfs_name} at {d.speed_mbps:g} Mbit/s" for d in slow)
        return Check("usb link", WARN, f"{text}: a USB 2 link makes every transfer several times slower",
                     "use a USB 3 port (often blue) and the short cable that came with the accelerator")
    speeds = ", ".join(f"{d.sysfs_name} {d.speed_mbps:g} Mbit/s" if d.speed_mbps
                       else f"{d.sysfs_name} unknown" for d in devices)
    return Check("usb link", OK, speeds)


def check_permissions(m: Machine, devices: list[UsbDevice]) -> Check:
    if not devices:
        return Check("device access", WARN, "not checked: no accelerator attached")
    denied = [d for d in devices if d.node is not None and not m.access(d.node, os.R_OK | os.W_OK)]
    if denied:
        return Check("device access", FAIL,
                     "no read/write access to " + ", ".join(str(d.node) for d in denied), UDEV_INSTALL_HINT)
    return Check("device access", OK, "read/write on " + ", ".join(str(d.node) for d in devices))


def _rule_mentions_both(text: str) -> bool:
    text = text.lower()
    return f'"{r.DFU_VENDOR_ID:04x}"' in text and f'"{r.APP_VENDOR_ID:04x}"' in text


def _shipped_rule() -> str:
    """Where this install keeps the udev rule (colcon/venv share folder, else the source tree)."""
    try:
        from ament_index_python.packages import get_package_share_directory

        path = Path(get_package_share_directory("libredgetpu_ros")) / "config" / UDEV_RULE_FILE
    except (ImportError, LookupError, ValueError, OSError):  # not installed the ament way
        path = Path(__file__).resolve().parents[2] / "config" / UDEV_RULE_FILE
    return str(path)


def check_udev(m: Machine) -> Check:
    for folder in m.udev_dirs:
        try:
            rules = sorted(folder.glob("*.rules"))
        except OSError:
            continue
        for rule in rules:
            text = _read(rule)
            if text and _rule_mentions_both(text):
                return Check("udev rule", OK, f"{rule} covers both USB ids")
    return Check("udev rule", WARN, "no udev rule for the accelerator's two USB ids (bootloader and "
                 "running): only root can open it",
                 f"sudo cp {_shipped_rule()} /etc/udev/rules.d/ && sudo udevadm control --reload-rules && "
                 "sudo udevadm trigger; add yourself to the plugdev group; replug the accelerator")


def check_firmware(m: Machine, devices: list[UsbDevice]) -> Check:
    paths = m.firmware_paths()
    for path in paths:
        if path.is_file() and path.stat().st_size > 0:
            return Check("firmware", OK, f"{path}")
    needed = any(d.mode == "bootloader" for d in devices)
    looked = ", ".join(str(p) for p in paths)
    return Check("firmware", FAIL if needed else WARN,
                 f"{FIRMWARE_NAME} not found (looked in: {looked})"
                 + ("; an accelerator in bootloader mode cannot start without it" if needed else
                    "; needed the first time an accelerator is opened after plugging it in"),
                 SOURCE_HINT)


def check_models(m: Machine) -> Check:
    if m.model_status is None:
        from libredgetpu_ros.models import store

        states = {name: store.status(e) for name, e in store.CATALOGUE.items()}
        where = str(store.cache_dir())
    else:
        states, where = m.model_status(), "the model cache"
    cached = sorted(n for n, s in states.items() if s == "cached")
    if cached:
        return Check("models", OK, f"{len(cached)} of {len(states)} catalogue models cached in {where}: "
                     + ", ".join(cached))
    # The catalogue's first entry is the default perception config's model (config/perception_pose.yaml).
    first = next(iter(states), "NAME")
    return Check("models", WARN, f"no catalogue model is cached in {where}: a launch with a catalogue "
                 "name fails to configure",
                 f"libredgetpu-ros models fetch {first}  (or models import DIR offline)")


def check_templates(m: Machine) -> Check:
    """Whether the templates the shipped configs name (control, trackers, looming, flow, recognition) resolve,
    by the nodes' own resolution (models/templates.py: the model cache, $LIBREDGETPU_ROS_TEMPLATES, the
    fixtures); a robot without them finds out here, not at configure."""
    from libredgetpu_ros.errors import InputError
    from libredgetpu_ros.models.templates import CONFIG_TEMPLATES, TEMPLATES_ENV, find_template

    find = m.find_template or find_template
    env_problem = doctor_ros.check_templates_env(m.environ)
    where: dict[str, str] = {}
    missing: dict[str, list[str]] = {}  # template -> configs naming it
    for config, names in CONFIG_TEMPLATES.items():
        for name in names:
            try:
                found = find(name)
            except InputError as exc:  # a folder the search cannot walk (too deep, too large: /proc)
                return Check("templates", WARN, f"the template search fails: {exc}",
                             f"point {TEMPLATES_ENV} at a folder of templates, or unset it")
            if found is None:
                missing.setdefault(name, []).append(config)
            else:
                where[name] = found[1]
    if env_problem is not None:
        return Check("templates", *env_problem)
    if not missing:
        places = sorted(set(where.values()))
        return Check("templates", OK, f"the {len(where)} templates the shipped configs name are installed "
                     f"({', '.join(places)})")
    detail = "; ".join(f"{n} ({', '.join(c)})" for n, c in missing.items())
    return Check("templates", WARN, f"not installed: {detail}: these launches fail to configure",
                 f"libredgetpu-ros models fetch {' '.join(missing)}  (offline: models import DIR)")


def check_ros(m: Machine) -> Check:
    distro = m.environ.get("ROS_DISTRO", "")
    if not m.find_module("rclpy"):
        return Check("ros", FAIL, "rclpy is not importable: the nodes cannot start",
                     "source /opt/ros/<distro>/setup.bash (or `source tools/env.sh` in this repository)")
    status, detail, fix = doctor_ros.check_rmw(m.environ, m.probe_rmw)
    if status != OK:
        return Check("ros", status, detail, fix)
    return Check("ros", OK, f"ROS 2 {distro or '(ROS_DISTRO unset)'}, rclpy found, {detail}")


def check_domain(m: Machine) -> Check:
    return Check("domain id", *doctor_ros.check_domain(m.environ, m.port_range_file))


def check_discovery(m: Machine) -> Check:
    env = m.environ
    scope = env.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "") or "SUBNET"
    peers = env.get("ROS_STATIC_PEERS", "")
    extra = f"; static peers {peers}" if peers else ""
    legacy = f"; {KILTED_IGNORES_LOCALHOST_ONLY}" if env.get("ROS_LOCALHOST_ONLY") else ""
    domain = env.get("ROS_DOMAIN_ID", "") or "0"
    if scope.upper() == "OFF" and not peers:
        return Check("discovery", WARN, f"ROS_AUTOMATIC_DISCOVERY_RANGE=OFF and no static peers: nodes see "
                     f"no one{legacy}", "unset ROS_AUTOMATIC_DISCOVERY_RANGE (ROS default: SUBNET)")
    if scope.upper() == "LOCALHOST":
        return Check("discovery", OK if not legacy else WARN,
                     f"LOCALHOST, domain {domain}: only this machine sees the nodes (rviz on another "
                     f"computer will not){extra}{legacy}",
                     "for other machines: unset ROS_AUTOMATIC_DISCOVERY_RANGE (or set SUBNET) on every host")
    return Check("discovery", WARN if legacy else OK,
                 f"{scope.upper()}, domain {domain}: other machines on the network see the nodes"
                 f"{extra}{legacy}",
                 "to confine to this machine: export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST"
                 if legacy else "")


def check_transport(m: Machine, frame_sizes: Sequence[tuple[int, int, int]]) -> Check:
    # ROS-free, but in ros/: imported here so the CLI's parser stays clear of the ROS layer (test_layers).
    from libredgetpu_ros.ros.dds_profile import FASTDDS_DEFAULT_SEGMENT, shm_segment_bytes

    profile = m.environ.get("FASTDDS_DEFAULT_PROFILES_FILE", "")
    rmw = m.environ.get("RMW_IMPLEMENTATION", "") or "rmw_fastrtps_cpp"
    largest = max((w * h * c for w, h, c in frame_sizes), default=0)
    sizes = ", ".join(f"{w}x{h}x{c}" for w, h, c in frame_sizes)
    if "fastrtps" not in rmw:
        return Check("dds transport", OK, f"{rmw}: its own transport settings apply (not checked)")
    problem = doctor_ros.check_profile_file(profile) if profile else None
    if problem is not None and problem[0] == FAIL:
        return Check("dds transport", *problem)
    segment = shm_segment_bytes(profile) if profile else FASTDDS_DEFAULT_SEGMENT
    source = f"profile {profile}" if profile else "Fast DDS default"
    if segment is None:
        return Check("dds transport", WARN, f"{source} cannot be read or declares no shared-memory transport",
                     "check the XML profile named by FASTDDS_DEFAULT_PROFILES_FILE")
    mib = 1024 * 1024
    if largest > segment:
        # The package ships a profile with a larger segment (every interface, as by default): name it when
        # it fits the frames, as the one line to run in the camera driver's and the node's shells.
        shipped = Path(__file__).resolve().parents[1] / "data" / "fastdds_large_frames.xml"
        shipped_segment = shm_segment_bytes(shipped) or 0
        fix = (f"export FASTDDS_DEFAULT_PROFILES_FILE={shipped} in the shells of both the camera driver "
               f"and the node ({shipped_segment / mib:.0f} MiB segments; docs/perception_node.md "
               "'Large frames')" if 2 * largest <= shipped_segment else
               "set <segment_size> of an SHM transport in a Fast DDS profile to at least twice the "
               "frame size for both processes (docs/perception_node.md 'Large frames')")
        return Check("dds transport", WARN,
                     f"frames of {largest / mib:.1f} MiB ({sizes}) exceed the {segment / mib:.1f} MiB "
                     f"shared-memory segment ({source}): they go as fragmented UDP, where bursts are lost",
                     fix)
    return Check("dds transport", OK, f"shared-memory segment {segment / mib:.1f} MiB ({source}) holds "
                 f"frames of {largest / mib:.1f} MiB ({sizes})")


def run_checks(m: Machine | None = None, *, frame_sizes: Sequence[tuple[int, int, int]] = (DEFAULT_FRAME,),
               require_accelerator: bool = False) -> list[Check]:
    m = m or Machine()
    devices = find_accelerators(m)
    return [
        check_python(m), check_libusb(m), check_accelerator(devices, require_accelerator),
        check_link_speed(devices), check_permissions(m, devices), check_holders(m, devices), check_udev(m),
        check_firmware(m, devices),
        check_models(m), check_templates(m), check_ros(m), check_domain(m), check_discovery(m),
        check_transport(m, frame_sizes),
    ]


def worst(checks: Sequence[Check]) -> str:
    return max((c.status for c in checks), key=_RANK.__getitem__, default=OK)


def to_json(checks: Sequence[Check]) -> dict:
    return {"status": worst(checks), "checks": [asdict(c) for c in checks]}
