"""doctor's ROS environment checks (issue 30 item 6, issue 33): each false OK of the issue replayed with a
fake environment, the RMW through the real librcl (loaded in a child process, as `import rclpy` loads it),
the domain id against rcl's parser and the RTPS port limit measured here (domain 232 starts, 233 does not:
"Calculated port number is too high"), and a FIFO as profile file that hung doctor."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from libredgetpu_ros.cli import doctor_checks as d
from libredgetpu_ros.cli.doctor_ros import MAX_DDS_DOMAIN, SIZE_MAX, parse_domain_id
from libredgetpu_ros.ros.dds_profile import shm_segment_bytes


@pytest.fixture
def machine(tmp_path: Path) -> d.Machine:
    ports = tmp_path / "ip_local_port_range"
    ports.write_text("32768\t60999\n")  # Linux's default
    return d.Machine(sysfs_usb=tmp_path, dev_root=tmp_path, udev_dirs=(), environ={},
                     find_library=lambda name: None, find_module=lambda name: True, firmware_paths=lambda: [],
                     model_status=lambda: {}, find_template=lambda name: (tmp_path / name, "cache"),
                     port_range_file=ports)


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("42", 42), ("0x10", 16), ("010", 8), (" 7", 7),
                                             ("+5", 5), ("-1", SIZE_MAX), ("18446744073709551615", SIZE_MAX)])
def test_domain_ids_are_parsed_as_rcl_parses_them(text: str, value: int) -> None:
    assert parse_domain_id(text) == value


@pytest.mark.parametrize(("text", "reason"), [("abc", "not an integral"), ("5 ", "not an integral"),
                                              ("08", "not an integral"), ("0x", "not an integral"),
                                              ("", "not an integral"),
                                              (str(2**64), "out of range"), ("9" * 5000, "out of range")])
def test_domain_ids_rcl_refuses(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_domain_id(text)


@pytest.mark.parametrize(("value", "status", "words"), [
    ("", d.OK, "unset"), ("0", d.OK, "domain 0"), ("101", d.OK, "domain 101"),
    ("102", d.WARN, "ephemeral port range 32768..60999"), ("231", d.OK, "domain 231"),
    ("232", d.WARN, "only 63 participants"),
    ("233", d.FAIL, "highest domain rmw_fastrtps_cpp can use is 232"),
    ("999", d.FAIL, "past 65535"), ("-1", d.WARN, "domain 0"), ("-2", d.FAIL, "past 65535"),
    ("abc", d.FAIL, "not an integral number"), (str(2**64), d.FAIL, "out of range"),
])
def test_domain_id_check(machine: d.Machine, value: str, status: str, words: str) -> None:
    """Before: doctor said nothing of the domain ("[OK] ros" for 999, -1, abc and 2^64)."""
    machine.environ = {"ROS_DOMAIN_ID": value} if value else {}
    check = d.check_domain(machine)
    assert check.status == status and words in check.detail, check
    assert check.status == d.OK or check.fix


def _rtps_ports(domain: int, participant: int) -> list[int]:
    """The four well-known ports of a participant, DDSI-RTPS 2.2 section 9.6.1.1 (PB 7400, DG 250, PG 2,
    d0 0, d1 10, d2 1, d3 11): metatraffic and user multicast, metatraffic and user unicast."""
    base = 7400 + 250 * domain
    return [base + 0, base + 1, base + 10 + 2 * participant, base + 11 + 2 * participant]


def test_domain_verdicts_follow_the_rtps_port_mapping(machine: d.Machine) -> None:
    """Every domain 0..300 against the participants whose ports all fit in 65535, counted from the spec's
    port mapping: none is a FAIL (232 is the last domain with one, as test_domain_limit_for_real measures),
    fewer than FEW_PARTICIPANTS a WARN naming that count, more never a FAIL nor a count."""
    from libredgetpu_ros.cli.doctor_ros import FEW_PARTICIPANTS

    last_usable = None
    for domain in range(301):
        fitting = sum(1 for p in range(400) if max(_rtps_ports(domain, p)) <= 65535)
        machine.environ = {"ROS_DOMAIN_ID": str(domain)}
        check = d.check_domain(machine)
        if fitting == 0:
            assert check.status == d.FAIL and "past 65535" in check.detail, (domain, check)
            continue
        last_usable = domain
        if fitting < FEW_PARTICIPANTS:
            assert check.status == d.WARN and f"only {fitting} participants" in check.detail, (domain, check)
        else:
            assert check.status != d.FAIL and "participants" not in check.detail, (domain, check)
    assert last_usable == MAX_DDS_DOMAIN == 232


def test_zenoh_domains_are_not_port_limited(machine: d.Machine) -> None:
    machine.environ = {"ROS_DOMAIN_ID": "999", "RMW_IMPLEMENTATION": "rmw_zenoh_cpp"}
    assert d.check_domain(machine).status == d.OK


@pytest.mark.parametrize(("rmw", "status", "words"), [
    ("", d.OK, "rmw_fastrtps_cpp (default) loads"),
    ("rmw_fastrtps_cpp", d.OK, "loads"),
    ("nonsense", d.FAIL, "exits 102"),
    ("rmw_zenoh_cpp", d.FAIL, "exits 102"),  # not installed here: rclpy exits 102 at import
])
def test_rmw_is_checked_by_loading_librcl(machine: d.Machine, rmw: str, status: str, words: str) -> None:
    """Real librcl in a child process with the environment under test (no rcl_init, no participant)."""
    env = {k: v for k, v in os.environ.items() if k != "RMW_IMPLEMENTATION"}
    machine.environ = dict(env, RMW_IMPLEMENTATION=rmw) if rmw else env
    check = d.check_ros(machine)
    assert check.status == status and words in check.detail, check
    if status == d.FAIL:
        assert repr(rmw) in check.detail and "RMW_IMPLEMENTATION" in check.fix


def _fifo(tmp_path: Path) -> Path:
    fifo = tmp_path / "profile.xml"
    os.mkfifo(fifo)
    return fifo


def test_a_fifo_as_fastdds_profile_fails_without_hanging(machine: d.Machine, tmp_path: Path) -> None:
    """Before: doctor (and the perception node's intake) blocked forever opening the FIFO."""
    machine.environ = {"FASTDDS_DEFAULT_PROFILES_FILE": str(_fifo(tmp_path))}
    result: list[d.Check] = []
    worker = threading.Thread(target=lambda: result.append(d.check_transport(machine, [(640, 480, 3)])),
                              daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        fd = os.open(tmp_path / "profile.xml", os.O_WRONLY | os.O_NONBLOCK)  # release the blocked reader
        os.close(fd)
        pytest.fail("check_transport blocked on a FIFO")
    assert result[0].status == d.FAIL and "is a FIFO" in result[0].detail
    assert shm_segment_bytes(tmp_path / "profile.xml") is None  # the node's reader: no answer, no hang
    machine.environ = {"FASTDDS_DEFAULT_PROFILES_FILE": str(tmp_path / "missing.xml")}
    assert d.check_transport(machine, [(640, 480, 3)]).status == d.WARN


@pytest.mark.parametrize("kind", ["file", "fifo", "nothing"])
def test_templates_variable_that_is_not_a_folder_is_reported(machine: d.Machine, tmp_path: Path,
                                                             kind: str) -> None:
    """Before: OK, and the search passed over the variable in silence."""
    target = tmp_path / "templates"
    if kind == "file":
        target.write_text("x")
    elif kind == "fifo":
        os.mkfifo(target)
    machine.environ = {"LIBREDGETPU_ROS_TEMPLATES": str(target)}
    check = d.check_templates(machine)
    assert check.status == d.WARN and "not a folder" in check.detail and check.fix
    target.unlink(missing_ok=True)
    target.mkdir()
    assert d.check_templates(machine).status == d.OK


def test_domain_limit_for_real() -> None:
    """rclpy in the sandbox: a node starts in domain 232 and not in 233 (what MAX_DDS_DOMAIN says)."""
    code = "import rclpy\nrclpy.init()\nrclpy.create_node('probe').destroy_node()\nrclpy.shutdown()\n"
    results, said = {}, {}
    for domain in (232, 233):
        env = dict(os.environ, ROS_DOMAIN_ID=str(domain))
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
        results[domain], said[domain] = done.returncode, done.stderr.decode(errors="replace")
    assert "port number is too high" in said[233]
    assert results[232] == 0 and results[233] != 0, (results, said)


def test_a_templates_folder_the_search_cannot_walk_is_a_warn(machine: d.Machine, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder deeper than the search walks (here 40 levels): the search's typed error becomes the WARN's
    detail instead of a traceback out of doctor."""
    deep = tmp_path / "deep"
    deep.joinpath(*["d"] * 40).mkdir(parents=True)
    monkeypatch.setenv("LIBREDGETPU_ROS_TEMPLATES", str(deep))
    monkeypatch.setenv("LIBREDGETPU_ROS_MODELS", str(tmp_path / "empty_cache"))
    machine.find_template = None  # the real search
    machine.environ = {"LIBREDGETPU_ROS_TEMPLATES": str(deep)}
    check = d.check_templates(machine)
    assert check.status == d.WARN and "more than 32 folders deep" in check.detail, check
