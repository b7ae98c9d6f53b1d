"""Install an (already ``pip install -e``'d) ament_python package into a prefix the way colcon lays it out.

``ros2 launch``, ``ros2 run``, launch files (``LifecycleNode(package=..., executable=...)``) and
``ament_index_python.get_package_share_directory`` find a package only through the ament layout:

    <prefix>/share/ament_index/resource_index/packages/<pkg>   the index marker
    <prefix>/share/<pkg>/package.xml, launch/*, config/*, rviz/*  symlinks to the checkout's files
    <prefix>/lib/<pkg>/<executable>                              every console_script of the package

A bare ``pip install -e`` registers none of these. Share files are per-file symlinks (``ros2 launch``
searches the share directory with ``os.walk``, which does not descend into symlinked directories), so edits
to a launch or config file take effect at once; a new or removed file needs a re-run (``make setup`` does it
whenever the folder listing is newer than its stamp). Executables come from the installed distribution's
``console_scripts`` entry points, so a script added to setup.py appears after ``pip install -e`` + this
tool, with no list kept here. Idempotent; stale links it made before are removed.

Usage: python tools/install_ament_package.py PACKAGE_DIR [PREFIX]   (PREFIX defaults to sys.prefix)
Run it with the prefix's own Python: the entry points are read from that environment.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

# Folders of the package copied (as symlinks) into share/<pkg>/, and the file patterns taken from each.
_SHARE_DIRS = {
    "launch": ("*.launch.py", "*.launch.xml", "*.launch.yaml"),
    "config": ("*.yaml", "*.xml", "*.rules"),
    "rviz": ("*.rviz",),
}


def _link(target: Path, link: Path) -> None:
    """Make ``link`` a symlink to ``target`` unless it already is one (replaces a stale file or link)."""
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    link.symlink_to(target)


def _sync_links(wanted: dict[str, Path], folder: Path) -> None:
    """``folder`` holds exactly the symlinks in ``wanted`` (name -> target); other symlinks are removed."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, target in wanted.items():
        _link(target, folder / name)
    for entry in folder.iterdir():
        if entry.is_symlink() and entry.name not in wanted:
            entry.unlink()


def console_scripts(distribution: str) -> dict[str, str]:
    """Name -> ``module:function`` of every console_script the installed ``distribution`` declares."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise SystemExit(f"error: {distribution} is not installed in {sys.prefix}; "
                         "pip install -e it first") from None
    return {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}


def install(package_dir: Path, prefix: Path) -> list[str]:
    package_dir = package_dir.resolve()
    pkg = package_dir.name
    if not (package_dir / "package.xml").is_file():
        raise SystemExit(f"error: no package.xml in {package_dir}")
    share = prefix / "share" / pkg
    share.mkdir(parents=True, exist_ok=True)
    _link(package_dir / "package.xml", share / "package.xml")
    for sub, patterns in _SHARE_DIRS.items():
        files = sorted({p for pattern in patterns for p in (package_dir / sub).glob(pattern) if p.is_file()})
        _sync_links({p.name: p for p in files}, share / sub)
    marker = prefix / "share" / "ament_index" / "resource_index" / "packages" / pkg
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    # pip already wrote a launcher per console_script into <prefix>/bin (shebang: the prefix's Python);
    # lib/<pkg>/ links to those, so `ros2 run` starts exactly what `pip install -e` installed.
    scripts = console_scripts(pkg)
    bin_dir = prefix / "bin"
    missing = [name for name in scripts if not (bin_dir / name).is_file()]
    if missing:
        raise SystemExit(f"error: console scripts {missing} of {pkg} are not in {bin_dir}; "
                         "re-run pip install -e")
    _sync_links({name: bin_dir / name for name in scripts}, prefix / "lib" / pkg)
    return sorted(scripts)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    prefix = Path(argv[2]).resolve() if len(argv) == 3 else Path(sys.prefix)
    names = install(Path(argv[1]), prefix)
    print(f"install_ament_package: {Path(argv[1]).resolve().name} -> {prefix} "
          f"(executables: {', '.join(names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
