"""The ROS side of the test suite: what the ``ros_env`` fixture (conftest.py) returns, the helper processes a
test spawns, and the Fast DDS shared-memory files they leave behind.

Each test gets its own domain, log folder and localhost-only DDS settings.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SHM = Path("/dev/shm")
_LOG_TAIL_BYTES = 6000
_domain_counter = itertools.count()


def next_domain_id() -> int:
    # 100..199: away from the default domain 0; the pid spreads concurrent pytest runs on one host apart.
    return 100 + (next(_domain_counter) + os.getpid() * 37) % 100


def fastdds_shm_names() -> set[str]:
    try:
        return {p.name for p in _SHM.iterdir() if p.name.startswith(("fastdds_", "sem.fastdds_"))}
    except OSError:
        return set()


def remove_dead_fastdds_shm(before: set[str]) -> None:
    """Remove Fast DDS segments created since ``before`` whose owner is gone.

    Every segment ``X`` has a lock file ``X_el`` that its owner holds with flock() while alive, so a segment
    we can lock belongs to no live process; segments of concurrent tests elsewhere stay untouched.
    """
    for name in sorted(fastdds_shm_names() - before):
        if not (name.startswith("fastdds_") and name.endswith("_el")):
            continue
        lock_path = _SHM / name
        base = name.removesuffix("_el")
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # still in use
        try:
            for path in (_SHM / base, _SHM / f"sem.{base}_mutex", lock_path):
                path.unlink(missing_ok=True)
        finally:
            os.close(fd)


def log_tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return ("...\n" if size > _LOG_TAIL_BYTES else "") + text


@dataclass
class _Spawned:
    name: str
    proc: subprocess.Popen
    log_path: Path
    expect_exit: bool
    stopped_by_fixture: bool = False

    def died_unexpectedly(self) -> bool:
        code = self.proc.poll()
        return not self.stopped_by_fixture and not self.expect_exit and code is not None and code != 0


@dataclass
class RosTestEnv:
    """What the ``ros_env`` fixture returns; see the fixture's docstring."""

    domain_id: int
    log_dir: Path
    env: dict[str, str]
    work_dir: Path
    _spawned: list[_Spawned] = field(default_factory=list)
    _contexts: list[Any] = field(default_factory=list)

    def spawn(self, args: list[str], name: str, *, expect_exit: bool = False) -> subprocess.Popen:
        """Start ``args`` with :attr:`env`; stdout+stderr go to ``<work_dir>/<name>.log``.

        The process is terminated (then killed) at teardown. A non-zero exit before teardown fails the test
        with the log tail, unless ``expect_exit`` says the test provokes it.
        """
        if any(s.name == name for s in self._spawned):
            raise ValueError(f"a process named {name!r} was already spawned in this test")
        log_path = self.work_dir / f"{name}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env, cwd=self.work_dir, start_new_session=True)
        self._spawned.append(_Spawned(name, proc, log_path, expect_exit))
        return proc

    def spawn_bringup(self, config_text: str, name: str = "bringup") -> subprocess.Popen:
        """Write ``config_text`` as ``<work_dir>/<name>.yaml`` and run ``libredgetpu-ros bringup`` on it."""
        config = self.work_dir / f"{name}.yaml"
        config.write_text(config_text)
        return self.spawn([sys.executable, "-m", "libredgetpu_ros.cli.main", "bringup", str(config)], name)

    def probe(self, name: str) -> tuple[Any, Any]:
        """A plain node in a fresh context of this test's domain and a single-threaded executor spinning
        nothing yet: the test's own end of the wire. Both go away with the context at teardown."""
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node

        context = self.init_rclpy()
        node = Node(name, context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        return node, executor

    def init_rclpy(self) -> Any:
        """``rclpy.init`` on a new Context bound to :attr:`domain_id`; shut down at teardown."""
        import rclpy
        import rclpy.context

        context = rclpy.context.Context()
        rclpy.init(context=context, domain_id=self.domain_id)
        self._contexts.append(context)
        return context

    def log_sections(self, only_unexpected: bool) -> list[tuple[str, str]]:
        return [(f"ros process {s.name!r} (exit {s.proc.poll()}) log tail", log_tail(s.log_path))
                for s in self._spawned if not only_unexpected or s.died_unexpectedly()]

    def _teardown(self) -> list[_Spawned]:
        """Stop everything; return the processes that had died unexpectedly."""
        dead = [s for s in self._spawned if s.died_unexpectedly()]
        for context in self._contexts:
            context.try_shutdown()
        for s in self._spawned:
            if s.proc.poll() is None:
                s.stopped_by_fixture = True
                s.proc.terminate()
        for s in self._spawned:
            try:
                s.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(s.proc.pid, signal.SIGKILL)
                s.proc.wait(timeout=5)
        return dead
