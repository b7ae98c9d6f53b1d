"""`libredgetpu-ros doctor`: every OK/WARN/FAIL branch against fake machine trees, and once for real here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from libredgetpu_ros.cli import doctor_checks as d
from libredgetpu_ros.cli.doctor_cmd import frame_size

FAKE_PROFILE = """<?xml version="1.0" encoding="UTF-8" ?>
<profiles xmlns="http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles">
  <transport_descriptors>
    <transport_descriptor><transport_id>shm</transport_id><type>SHM</type>
      <segment_size>{size}</segment_size></transport_descriptor>
  </transport_descriptors>
</profiles>
"""


def usb_device(root: Path, name: str, vid: str, pid: str, speed: str = "5000", bus: int = 2,
               dev: int = 7) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    for key, value in (("idVendor", vid), ("idProduct", pid), ("speed", speed), ("busnum", str(bus)),
                       ("devnum", str(dev))):
        (folder / key).write_text(value + "\n")


@pytest.fixture
def machine(tmp_path: Path) -> d.Machine:
    """A machine with nothing on it: no devices, no rules, no firmware, no models, rclpy present."""
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    usb_device(sysfs, "1-1", "1d6b", "0002")  # a root hub: not ours
    return d.Machine(sysfs_usb=sysfs, dev_root=tmp_path / "dev", udev_dirs=(tmp_path / "rules",),
                     environ={}, find_library=lambda name: None, find_module=lambda name: True,
                     firmware_paths=lambda: [tmp_path / "fw" / d.FIRMWARE_NAME],
                     model_status=lambda: {"a_model": "missing", "b_model": "partial"},
                     python_version=(3, 11), access=lambda path, mode: False)


def by_name(checks: list[d.Check]) -> dict[str, d.Check]:
    return {c.name: c for c in checks}


def test_empty_machine_warns_and_fails_with_fixes(machine: d.Machine) -> None:
    checks = by_name(d.run_checks(machine))
    assert checks["libusb"].status == d.FAIL and "apt-get install libusb-1.0-0" in checks["libusb"].fix
    assert checks["accelerator"].status == d.WARN and "USB 3" in checks["accelerator"].fix
    assert checks["usb link"].status == d.WARN and "not checked" in checks["usb link"].detail
    assert checks["device access"].status == d.WARN
    assert checks["udev rule"].status == d.WARN and "/etc/udev/rules.d/" in checks["udev rule"].fix
    assert checks["firmware"].status == d.WARN and "LIBREDGETPU_FIRMWARE" in checks["firmware"].fix
    assert checks["models"].status == d.WARN
    assert checks["models"].fix.startswith("libredgetpu-ros models fetch")
    assert checks["discovery"].status == d.OK and "SUBNET" in checks["discovery"].detail
    assert checks["dds transport"].status == d.WARN and "0.5 MiB" in checks["dds transport"].detail
    assert d.worst(list(checks.values())) == d.FAIL


@pytest.mark.ros  # the "ros" check probes the real RMW (librcl loaded in a child process)
def test_ready_machine_is_all_ok(machine: d.Machine, tmp_path: Path) -> None:
    usb_device(machine.sysfs_usb, "2-1", "18d1", "9302", speed="5000")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "99-edgetpu-accelerator.rules").write_text(
        'SUBSYSTEM=="usb", ATTRS{idVendor}=="1a6e", ATTRS{idProduct}=="089a"\n'
        'SUBSYSTEM=="usb", ATTRS{idVendor}=="18d1", ATTRS{idProduct}=="9302"\n')
    firmware = tmp_path / "fw" / d.FIRMWARE_NAME
    firmware.parent.mkdir()
    firmware.write_bytes(b"\x01" * 16)
    profile = tmp_path / "profile.xml"
    profile.write_text(FAKE_PROFILE.format(size=16 * 1024 * 1024))
    machine.find_library = lambda name: "libusb-1.0.so.0"
    machine.access = lambda path, mode: path == machine.dev_root / "bus" / "usb" / "002" / "007"
    machine.model_status = lambda: {"a_model": "cached"}
    machine.environ = {"ROS_DISTRO": "kilted", "FASTDDS_DEFAULT_PROFILES_FILE": str(profile)}
    checks = d.run_checks(machine)
    assert [c.status for c in checks] == [d.OK] * len(checks), checks
    named = by_name(checks)
    assert "2-1 18d1:9302 (running)" in named["accelerator"].detail
    assert "/dev/bus/usb/002/007" in named["device access"].detail
    assert named["device holder"].detail == "no process holds an accelerator"
    assert "kilted" in named["ros"].detail


def test_bootloader_device_on_usb2_without_access_or_firmware(machine: d.Machine) -> None:
    usb_device(machine.sysfs_usb, "3-2.1", "1a6e", "089a", speed="480", bus=3, dev=12)
    checks = by_name(d.run_checks(machine))
    assert checks["accelerator"].status == d.OK and "bootloader" in checks["accelerator"].detail
    assert checks["usb link"].status == d.WARN and "480 Mbit/s" in checks["usb link"].detail
    assert checks["device access"].status == d.FAIL and "/bus/usb/003/012" in checks["device access"].detail
    assert "udev" in checks["device access"].fix
    # A bootloader-mode device cannot start without firmware: FAIL, not WARN.
    assert checks["firmware"].status == d.FAIL and "bootloader" in checks["firmware"].detail


def test_the_holder_of_an_attached_accelerator_is_shown(machine: d.Machine, tmp_path: Path) -> None:
    """Read from the lock file a real holder wrote (another process's open names it the same way)."""
    from libredgetpu_ros.edgetpu.locks import DeviceLock, holders, set_holder_name

    usb_device(machine.sysfs_usb, "2-1.4", "18d1", "9302")
    machine.device_holders = holders
    set_holder_name("cameras (bringup)")
    lock = DeviceLock("2-1.4").acquire()
    try:
        check = by_name(d.run_checks(machine))["device holder"]
    finally:
        lock.release()
        set_holder_name("")
    assert check.detail == f"2-1.4 held by pid {os.getpid()} (cameras (bringup))" and "bringup" in check.fix
    assert by_name(d.run_checks(machine))["device holder"].detail == "no process holds an accelerator"


def test_require_accelerator_turns_absence_into_fail(machine: d.Machine) -> None:
    assert by_name(d.run_checks(machine, require_accelerator=True))["accelerator"].status == d.FAIL


def test_python_too_old_and_rclpy_missing(machine: d.Machine) -> None:
    machine.python_version = (3, 10)
    machine.find_module = lambda name: False
    checks = by_name(d.run_checks(machine))
    assert checks["python"].status == d.FAIL
    assert checks["ros"].status == d.FAIL and "setup.bash" in checks["ros"].fix


@pytest.mark.parametrize(("environ", "status", "words"), [
    ({}, d.OK, "other machines"),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}, d.OK, "only this machine"),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF"}, d.WARN, "see no one"),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF", "ROS_STATIC_PEERS": "10.0.0.2"}, d.OK, "static peers"),
    ({"ROS_LOCALHOST_ONLY": "1"}, d.WARN, "ignored since Kilted"),
])
def test_discovery_branches(machine: d.Machine, environ: dict, status: str, words: str) -> None:
    machine.environ = environ
    check = d.check_discovery(machine)
    assert check.status == status and words in check.detail


def test_transport_branches(machine: d.Machine, tmp_path: Path) -> None:
    small = tmp_path / "small.xml"
    small.write_text(FAKE_PROFILE.format(size=4 * 1024 * 1024))
    machine.environ = {"FASTDDS_DEFAULT_PROFILES_FILE": str(small)}
    assert d.check_transport(machine, [(640, 480, 3)]).status == d.OK
    assert d.check_transport(machine, [(640, 480, 3), (1920, 1080, 3)]).status == d.WARN
    broken = tmp_path / "broken.xml"
    broken.write_text("<profiles><not closed")
    machine.environ = {"FASTDDS_DEFAULT_PROFILES_FILE": str(broken)}
    assert d.check_transport(machine, [(640, 480, 3)]).status == d.WARN
    machine.environ = {"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}
    assert d.check_transport(machine, [(4000, 3000, 3)]).status == d.OK


def test_unreadable_sysfs_and_odd_files_are_tolerated(machine: d.Machine, tmp_path: Path) -> None:
    usb_device(machine.sysfs_usb, "4-1", "18d1", "9302", speed="fast?", bus=4, dev=2)
    (machine.sysfs_usb / "4-1" / "busnum").write_text("x\n")
    devices = d.find_accelerators(machine)
    assert devices and devices[0].speed_mbps is None and devices[0].node is None
    machine.sysfs_usb = tmp_path / "no-such-dir"
    assert d.find_accelerators(machine) == []


def test_frame_size_argument() -> None:
    assert frame_size("1920x1080") == (1920, 1080, 3)
    assert frame_size("640x480x1") == (640, 480, 1)
    for bad in ("1920", "0x10", "99999x2", "1x1x9", "a" * 10_000):
        with pytest.raises(Exception, match=r"WIDTHxHEIGHT|each side"):
            frame_size(bad)


def test_cli_for_real_on_this_machine() -> None:
    """No accelerator here: the accelerator item is a WARN with its fix, everything else runs; JSON parses."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROS_", "FASTDDS_"))}
    done = subprocess.run([sys.executable, "-m", "libredgetpu_ros.cli.main", "doctor", "--json",
                           "--frame", "640x480"], capture_output=True, text=True, env=env, timeout=60)
    report = json.loads(done.stdout)
    names = [c["name"] for c in report["checks"]]
    assert names == ["python", "libusb", "accelerator", "usb link", "device access", "device holder",
                     "udev rule", "firmware", "models", "templates", "ros", "domain id", "discovery",
                     "dds transport"]
    accelerator = report["checks"][2]
    assert accelerator["status"] in (d.OK, d.WARN) and accelerator["fix"]
    assert done.returncode == (1 if report["status"] == d.FAIL else 0)
    text = subprocess.run([sys.executable, "-m", "libredgetpu_ros.cli.main", "doctor", "--frame", "nonsense"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert text.returncode == 2 and "WIDTHxHEIGHT" in text.stderr


def test_models_fix_fetches_the_default_configs_model(machine: d.Machine, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With the real (empty) cache the fix names the model the default perception launch needs."""
    import yaml

    monkeypatch.setenv("LIBREDGETPU_ROS_MODELS", str(tmp_path / "empty_cache"))
    config = Path(__file__).resolve().parents[2] / "config" / "perception_pose.yaml"
    default_model = yaml.safe_load(config.read_text())["/**"]["ros__parameters"]["model"]
    machine.model_status = None
    check = by_name(d.run_checks(machine))["models"]
    assert check.status == d.WARN and check.fix.startswith(f"libredgetpu-ros models fetch {default_model} ")


def test_dds_transport_fix_is_one_export_that_makes_the_check_ok(machine: d.Machine) -> None:
    """1920x1080 rgb8 over the default 0.5 MiB segment: the fix names the shipped large-frames profile;
    exporting it as the fix says turns the check OK."""
    check = by_name(d.run_checks(machine))["dds transport"]
    assert check.status == d.WARN and check.fix.startswith("export FASTDDS_DEFAULT_PROFILES_FILE=")
    assignment = check.fix.split()[1]
    name, value = assignment.split("=", 1)
    assert Path(value).is_file()
    machine.environ[name] = value
    assert by_name(d.run_checks(machine))["dds transport"].status == d.OK
    huge = by_name(d.run_checks(machine, frame_sizes=[(8000, 6000, 3)]))["dds transport"]
    assert huge.status == d.WARN and "<segment_size>" in huge.fix  # beyond the shipped profile


def test_templates_branches(machine: d.Machine, tmp_path: Path) -> None:
    """The shipped configs' templates by the nodes' own resolution: all found, some missing (a robot with an
    empty cache and no fixtures: the fix is the fetch command naming each, once)."""
    machine.find_template = lambda name: (tmp_path / name, "cache")
    ok = by_name(d.run_checks(machine))["templates"]
    assert ok.status == d.OK and "(cache)" in ok.detail
    machine.find_template = lambda name: None
    none = by_name(d.run_checks(machine))["templates"]
    assert none.status == d.WARN and "fail to configure" in none.detail
    assert "color_red_64x64 (tracker_spot)" in none.detail and "dense_256 (control)" in none.detail
    assert none.fix == ("libredgetpu-ros models fetch dense_256 color_red_64x64 pattern_64x64_8x8_1ch "
                        "looming_64x64_3x3 gabor_64x64_p4 dense_1024 "
                        "mobilenet_v1_1.0_224_quant_embedding_extractor  (offline: models import DIR)")
    machine.find_template = lambda name: None if name == "gabor_64x64_p4" else (tmp_path / name, "cache")
    one = by_name(d.run_checks(machine))["templates"]
    assert one.status == d.WARN and one.fix.startswith("libredgetpu-ros models fetch gabor_64x64_p4  (")
