"""tools/check_prereqs.sh: a missing system package is named with its install line before anything builds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "check_prereqs.sh"
BASH = shutil.which("bash") or "/bin/bash"


def real_python311() -> str | None:
    """The interpreter itself, not a version manager's shim (a shim needs its own PATH to work)."""
    if not shutil.which("python3.11"):
        return None
    return subprocess.run(["python3.11", "-c", "import sys; print(sys.executable)"], capture_output=True,
                          text=True, timeout=30).stdout.strip() or None


def run(tmp_path: Path, tools: list[str], *args: str) -> subprocess.CompletedProcess:
    """The script with a PATH holding only ``tools`` (symlinked from this machine) and bash's builtins."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        found = real_python311() if tool == "python3.11" else shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(bin_dir)})


def test_this_machine_has_everything_for_the_tests() -> None:
    done = subprocess.run([BASH, str(SCRIPT), "--for", "test"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_missing_mips_binutils_is_named_with_the_install_line(tmp_path: Path) -> None:
    base = ["python3.11", "cmake", "g++", "make", "grep", "ldconfig", "ip", "unshare", "git"]
    if not all(shutil.which(t) for t in base):
        pytest.skip("this machine lacks one of the base tools the fake PATH links to")
    assert run(tmp_path, base, "--for", "setup").returncode == 0  # the Ingenic toolchain is a test need only
    done = run(tmp_path, base, "--for", "test")
    assert done.returncode == 2
    assert "sudo apt-get install binutils-mipsel-linux-gnu" in done.stderr
    listed = run(tmp_path, base, "--for", "test", "--list")
    assert listed.returncode == 0 and listed.stdout.split() == ["binutils-mipsel-linux-gnu"]


def test_nothing_on_path_names_every_package(tmp_path: Path) -> None:
    done = run(tmp_path, [], "--for", "test")
    assert done.returncode == 2
    for package in ("python3.11-venv", "cmake", "g++", "libusb-1.0-0", "iproute2",
                    "binutils-mipsel-linux-gnu"):
        assert package in done.stderr
    assert run(tmp_path, [], "--for", "nonsense").returncode == 2
