"""``libredgetpu-ros kernels``: the package's compiled (numba) kernels in the user's cache folder.

``build`` compiles every kernel family (``jit.FAMILIES``) by running each family's own warm-up, the one its
modules run when they open, so the result is exactly what a node's configure would otherwise compile: for a
deployment image's last install step or a robot's first boot. ``status`` says which families open from the
folder without compiling (each warm-up run with every compile refused: nothing is written).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import time
from typing import Any

from libredgetpu_ros import jit
from libredgetpu_ros.cli.output import add_json, print_json, say
from libredgetpu_ros.textdata import clip

HELP = "compiled kernels: build every family into the cache folder ahead of time (install step), status"
EXAMPLES = (
    "libredgetpu-ros kernels build                # every family, as the nodes' configure would compile them",
    "libredgetpu-ros kernels build --only flow --only resize",
    "libredgetpu-ros kernels status --json",
)
NOTHING = "numba is not installed: nothing to build (the package runs its NumPy paths without it)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="kernels_action", metavar="ACTION", required=True)
    names = ", ".join(f.name for f in jit.FAMILIES)
    p = sub.add_parser("build", help="compile (or load) every kernel family into the cache folder")
    p.add_argument("--only", action="append", metavar="FAMILY", default=[],
                   help=f"this family only (repeatable): {names}")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress lines on stderr (default: one as each family starts and ends)")
    add_json(p)
    p = sub.add_parser("status", help="which families load from the cache folder without compiling")
    add_json(p)
    parser.epilog = ("cache folder: $LIBREDGETPU_ROS_NUMBA_CACHE, else $XDG_CACHE_HOME/libredgetpu_ros/numba "
                     "(default ~/.cache/...; a set NUMBA_CACHE_DIR wins); docs/install.md, Compiled kernels")


def _numba_version() -> str | None:
    if not jit.available():
        return None
    try:
        return importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _selected(only: list[str]) -> list[str]:
    """The families to build, in the registry's order (callees first); InputError on an unknown name."""
    from libredgetpu_ros.errors import InputError

    known = [f.name for f in jit.FAMILIES]
    unknown = [name for name in only if name not in known]
    if unknown:
        raise InputError(f"--only {unknown[0]}: no such kernel family (known: {', '.join(known)})")
    return [name for name in known if not only or name in only]


def _writable_folder() -> str:
    """The cache folder, created; InputError when it cannot be written (numba would then cache elsewhere, or
    nowhere, and the nodes would compile again)."""
    from libredgetpu_ros.errors import InputError

    folder = jit.active_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cache folder {folder} cannot be created: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"cache folder {folder} is not writable by this user: build as the user the nodes "
                         f"run as, or point $LIBREDGETPU_ROS_NUMBA_CACHE at a folder it can write")
    return str(folder)


def _build_one(name: str, progress: bool) -> dict[str, Any]:
    family = jit.family(name)
    if progress:
        say(f"kernels: {name}...")
    wall, cpu = time.perf_counter(), time.process_time()
    error = ""
    with jit.compile_watch() as watch:
        try:
            ok = jit.warm_up(name)
        except Exception as exc:  # numba's errors have many types; the other families still get built
            ok, error = False, clip(f"{type(exc).__name__}: {exc}", 300)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    state = "failed" if error else ("unavailable" if not ok else
                                    ("compiled" if name in watch.families else "cached"))
    if progress:
        say(f"kernels: {name} {state} in {wall:.1f} s")
    return {"family": name, "state": state, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
            "also_compiled": [f for f in watch.families if f != name], "used_by": family.used_by,
            "error": error}


def _build(args: argparse.Namespace) -> int:
    names = _selected(args.only)
    version = _numba_version()
    if version is None:
        if args.json:
            print_json({"cache": str(jit.active_cache_dir()), "numba": None, "families": [],
                        "message": NOTHING})
        else:
            print(NOTHING)
        return 0
    folder = _writable_folder()
    progress = not args.no_progress
    rows = [_build_one(name, progress=progress) for name in names]
    failed = [row["family"] for row in rows if row["state"] == "failed"]
    if args.json:
        print_json({"cache": folder, "numba": version, "families": rows})
        return 1 if failed else 0
    for row in rows:
        also = f"  (also compiled: {', '.join(row['also_compiled'])})" if row["also_compiled"] else ""
        print(f"{row['family']:<12} {row['state']:<9} {row['seconds']:7.2f} s  "
              f"({row['cpu_seconds']:.2f} s CPU){also}")
        if row["error"]:
            print(f"  {row['error']}")
    print(f"cache folder: {folder} (numba {version})")
    if failed:  # the modules still work: they compile (or fall back) when they open, as without a build
        say(f"error: {len(failed)} kernel famil{'y' if len(failed) == 1 else 'ies'} did not build: "
            f"{', '.join(failed)}")
    return 1 if failed else 0


def _status(args: argparse.Namespace) -> int:
    version = _numba_version()
    rows = []
    for family in jit.FAMILIES:
        files = jit.cache_files(family.name)
        needs = None
        if version is None:
            state = "no numba"
        elif (blocker := jit.uncached(family.name)) is None:
            state = "cached"
        elif blocker != family.name:
            # its warm-up stopped at another family's kernel (flow runs image's): that family's row says
            # why; this one's own entries are not the cause
            state, needs = f"needs {blocker}", blocker
        else:
            state = "stale" if files else "missing"
        rows.append({"family": family.name, "state": state, "needs": needs, "index_files": len(files),
                     "used_by": family.used_by})
    folder = str(jit.active_cache_dir())
    if args.json:
        print_json({"cache": folder, "numba": version, "families": rows})
        return 0
    width = max(8, *(len(row["state"]) for row in rows))
    for row in rows:
        print(f"{row['family']:<12} {row['state']:<{width}} {row['used_by']}")
    print(f"cache folder: {folder} ({'numba ' + version if version else 'numba not installed'})")
    todo = [row["family"] for row in rows if row["state"] in ("stale", "missing") or row["needs"]]
    if todo:
        print(f"{len(todo)} of {len(rows)} families would compile when first opened: run "
              f"`{jit.BUILD_COMMAND}`")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.kernels_action == "build":
        return _build(args)
    return _status(args)
