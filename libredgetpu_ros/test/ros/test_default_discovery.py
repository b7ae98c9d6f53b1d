"""Issue 22 item 1: the nodes never change discovery or transport; they use ROS's defaults.

Each node's real entry point (the console scripts ``ros2 run`` starts: perception_node, control_node,
spu_node, trainer_node) runs with an environment that has no ``ROS_*`` / ``FASTDDS_*`` / ``RMW_*`` variable,
inside a private network namespace of its own that holds a veth pair (10.200.0.1 <-> 10.200.0.2, both ends
inside: nothing leaves the namespace; the suite itself stays in ``tools/ros_sandbox.sh``'s localhost-only
namespace). ``_discovery_probe.py`` listens on the default domain's discovery multicast group through the
veth: the node must announce itself there, with the veth addresses as its locators, i.e. ROS's default
discovery (SUBNET, every interface), not localhost only.

The control case runs the same probe with the sandbox's localhost-only settings: no announcement reaches
the veth. Also: ``tools/env.sh`` sets no discovery range unless ``--localhost``; the sandbox forces it.
Before the fix every node ``main()`` filled those settings in when unset, so a clean environment behaved
exactly like the control case and the four node cases failed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

PROBE = Path(__file__).with_name("_discovery_probe.py")
BIN = Path(sys.executable).parent
NETNS_SETUP = ("ip link set lo up && ip link add v0 type veth peer name v1 && "
               "ip addr add 10.200.0.1/24 dev v0 && ip addr add 10.200.0.2/24 dev v1 && "
               "ip link set v0 up && ip link set v1 up")
NODES = ("perception_node", "control_node", "spu_node", "trainer_node")


def _netns_with_veth_available() -> bool:
    if not (shutil.which("unshare") and shutil.which("ip")):
        return False
    probe = subprocess.run(["unshare", "-n", "sh", "-c", NETNS_SETUP], capture_output=True, timeout=20)
    return probe.returncode == 0


requires_netns = pytest.mark.skipif(not _netns_with_veth_available(),
                                    reason="needs 'unshare -n' and a veth pair (root or user namespaces)")


def _clean_env(home: Path) -> dict[str, str]:
    """The caller's environment without any ROS / DDS setting (as on a robot with nothing configured)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ROS_", "FASTDDS_", "FASTRTPS_", "RMW_", "CYCLONEDDS_"))}
    env["HOME"] = str(home)
    return env


def _probe(env: dict[str, str], command: list[str]) -> dict:
    run = subprocess.run(["unshare", "-n", "sh", "-c", f'{NETNS_SETUP} && exec "$@"', "probe",
                          sys.executable, str(PROBE), "10", *command],
                         env=env, capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@requires_netns
@pytest.mark.parametrize("entry_point", NODES)
def test_a_node_started_with_a_clean_environment_uses_ros_default_discovery(entry_point, tmp_path) -> None:
    env = _clean_env(tmp_path)
    result = _probe(env, [str(BIN / entry_point)])
    assert result["announced_on"], f"{entry_point} sent no discovery onto the veth: {result}"
    assert result["exit_code"] == 0, result


@requires_netns
def test_the_large_frames_profile_keeps_default_discovery(tmp_path) -> None:
    """The profile shipped for robots that pass large frames (16 MiB shared memory, UDP on every
    interface): discovery still reaches the veth, unlike the localhost profile below."""
    from libredgetpu_ros.ros.dds_profile import shm_segment_bytes
    from libredgetpu_ros.ros.environment import DDS_PROFILE

    profile = DDS_PROFILE.with_name("fastdds_large_frames.xml")
    assert shm_segment_bytes(profile) == 16 * 1024 * 1024
    env = {**_clean_env(tmp_path), "FASTDDS_DEFAULT_PROFILES_FILE": str(profile)}
    result = _probe(env, [str(BIN / "perception_node")])
    assert result["announced_on"] and result["exit_code"] == 0, result


@requires_netns
def test_control_case_the_sandbox_settings_keep_discovery_off_the_veth(tmp_path) -> None:
    from libredgetpu_ros.ros.environment import localhost_only_environ

    env = localhost_only_environ(log_dir=str(tmp_path / "log"), base=_clean_env(tmp_path))
    env.pop("ROS_DOMAIN_ID", None)  # domain 0: the port the probe listens on
    result = _probe(env, [str(BIN / "control_node")])
    assert result["announced_on"] == [] and result["exit_code"] == 0, result


REPO = Path(__file__).resolve().parents[3]


def _discovery_range_after(script: str, tmp_path: Path) -> str:
    env = _clean_env(tmp_path)
    run = subprocess.run(["bash", "-c", f"{script}; echo \"${{ROS_AUTOMATIC_DISCOVERY_RANGE:-unset}}\""],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "activate").is_file(), reason="no .venv (make setup)")
def test_env_sh_follows_ros_defaults_unless_asked_to_confine(tmp_path) -> None:
    """``source tools/env.sh`` is like sourcing setup.bash: no discovery setting; ``--localhost`` fills in
    the localhost-only ones; the sandbox forces them (what the tests, benches and demo run in)."""
    assert _discovery_range_after("source tools/env.sh", tmp_path) == "unset"
    assert _discovery_range_after("source tools/env.sh --localhost", tmp_path) == "LOCALHOST"
    sandboxed = subprocess.run(["tools/ros_sandbox.sh", "printenv", "ROS_AUTOMATIC_DISCOVERY_RANGE"],
                               env=_clean_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert sandboxed.stdout.strip() == "LOCALHOST"
