"""The ROS environment that keeps DDS traffic on this machine, for tests, benches and the demo.

By default Fast DDS discovers peers by multicast on every network interface. Tests, demos and CI must not
send a packet off the host, so they run with:

- ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (``ROS_LOCALHOST_ONLY`` is ignored since Kilted);
- ``FASTDDS_DEFAULT_PROFILES_FILE`` = :data:`DDS_PROFILE`, shared memory (16 MB segments, so camera frames
  are not fragmented into UDP) plus UDPv4 whitelisted to 127.0.0.1;
- ``RMW_IMPLEMENTATION=rmw_fastrtps_cpp`` (the only RMW the PyPI wheels ship; the profile is Fast DDS only);
- ``ROS_LOG_DIR`` (``rclpy.init`` fails without it when ``HOME`` is unset, as under some CI runners).

The package's nodes never change discovery or transport: they follow ROS's defaults and the user's
environment, like every other ROS package (docs/install.md "Across machines, or confined to one").
What is here is for the code that must stay on this machine by itself:

- :func:`localhost_only_environ` *forces* all of the above into a copy of an environment: for tests,
  benches and every subprocess they start (``tools/ros_sandbox.sh`` exports the same in the shell);
- :func:`confine_to_localhost` forces them into ``os.environ`` of a process whose participants talk only
  among themselves (``make demo``'s in-process demo);
- :func:`ensure_log_dir` is all a node's ``main()`` sets: ``ROS_LOG_DIR`` when neither it nor ``HOME``
  exists (``rclpy.init`` fails then; some CI runners and service managers start processes so).

This module must not import rclpy: it runs before rclpy reads the environment.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from libredgetpu_ros.errors import ConfigError

DDS_PROFILE: Path = Path(__file__).resolve().parents[1] / "data" / "fastdds_localhost.xml"

DISCOVERY_RANGE_VAR = "ROS_AUTOMATIC_DISCOVERY_RANGE"
PROFILE_VAR = "FASTDDS_DEFAULT_PROFILES_FILE"
RMW_VAR = "RMW_IMPLEMENTATION"
LOG_DIR_VAR = "ROS_LOG_DIR"
DOMAIN_VAR = "ROS_DOMAIN_ID"

RMW = "rmw_fastrtps_cpp"
# Fast DDS maps a domain to UDP ports 7400 + 250 * id + ...; ids above 232 overflow the port range.
MAX_DOMAIN_ID = 232


def _check_domain_id(domain_id: int) -> str:
    if isinstance(domain_id, bool) or not isinstance(domain_id, int) or not 0 <= domain_id <= MAX_DOMAIN_ID:
        raise ConfigError(f"ROS domain id {domain_id!r} is out of range: "
                          f"expected an integer 0..{MAX_DOMAIN_ID}")
    return str(domain_id)


def _make_log_dir(log_dir: str | os.PathLike[str] | None) -> str:
    path = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="libredgetpu_ros_log_"))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create ROS log directory {str(path)!r}: {exc}") from exc
    return str(path)


def localhost_only_environ(
    domain_id: int | None = None,
    log_dir: str | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) with the localhost-only ROS settings forced.

    ``ROS_LOG_DIR`` is ``log_dir`` if given, else the one in ``base``, else a fresh temporary directory; it
    is created. ``ROS_DOMAIN_ID`` is set only when ``domain_id`` is given (else ``base``'s value stays).
    """
    env = dict(os.environ if base is None else base)
    env[DISCOVERY_RANGE_VAR] = "LOCALHOST"
    env[PROFILE_VAR] = str(DDS_PROFILE)
    env[RMW_VAR] = RMW
    env[LOG_DIR_VAR] = _make_log_dir(log_dir if log_dir is not None else env.get(LOG_DIR_VAR) or None)
    if domain_id is not None:
        env[DOMAIN_VAR] = _check_domain_id(domain_id)
    return env


def confine_to_localhost(domain_id: int | None = None, log_dir: str | None = None) -> None:
    """Force the localhost-only settings (:func:`localhost_only_environ`) into ``os.environ``; call it before
    rclpy is initialised, only in a process whose participants talk only among themselves."""
    os.environ.update(localhost_only_environ(domain_id=domain_id, log_dir=log_dir))


def ensure_log_dir() -> None:
    """Set ``ROS_LOG_DIR`` to a fresh temporary directory when neither it nor ``HOME`` is set (rcl logs to
    ``~/.ros/log`` otherwise, and ``rclpy.init`` fails without either). Nothing else is touched."""
    if not os.environ.get(LOG_DIR_VAR) and not os.environ.get("HOME"):
        os.environ[LOG_DIR_VAR] = _make_log_dir(None)
