"""``libredgetpu-ros models``: the pinned model catalogue and its local cache (list, fetch, path, import)."""

from __future__ import annotations

import argparse
import json
import sys

from libredgetpu_ros.cli.output import add_json, print_json, say

HELP = "models a robot can get: list the pinned catalogue, fetch (verified, resumable), path, import DIR"
EXAMPLES = (
    "libredgetpu-ros models list",
    "libredgetpu-ros models fetch mobilenet_v1_0.25_128        # model, CPU twin and labels into the cache",
    "libredgetpu-ros models fetch dense_256 color_red_64x64    # the control and tracker configs' templates",
    "libredgetpu-ros models import /media/usb/models           # no internet: files copied there beforehand",
    "libredgetpu-ros models path mobilenet_v1_0.25_128 --labels",
    "libredgetpu-ros models fetch mobilenet_v1_0.25_128 --json --no-progress   # for scripts",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="models_action", metavar="ACTION", required=True)
    p = sub.add_parser("list", help="catalogue entries, their task and whether they are cached")
    add_json(p)
    p = sub.add_parser("fetch", help="download entries' files (Edge TPU model, CPU twin, labels or a "
                                     "template's sidecar) into the cache")
    p.add_argument("name", nargs="+", help="catalogue entries (models list)")
    p.add_argument("--mirror", help="base URL serving the files by name instead of the official URLs "
                                    "(also $LIBREDGETPU_ROS_MODEL_MIRROR); checksums stay the catalogue's")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="overall deadline per file, whole transfer (default 600; a cut transfer resumes)")
    add_json(p, "print each entry's cached files as JSON (messages on stderr)")
    p = sub.add_parser("path", help="print the cached path of an entry's model (or --cpu twin, --labels)")
    p.add_argument("name")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--cpu", action="store_true", help="the CPU twin")
    which.add_argument("--labels", action="store_true", help="the labels file")
    add_json(p)
    p = sub.add_parser("import", help="copy catalogue files found under DIR (offline; checksums verified)")
    p.add_argument("dir")
    p.add_argument("names", nargs="*", help="entries to import (default: every one found)")
    add_json(p, "print the entries now complete in the cache as JSON (messages on stderr)")
    parser.epilog = "cache: $XDG_CACHE_HOME/libredgetpu_ros/models (default ~/.cache/...); docs/models.md"


def _list(as_json: bool) -> int:
    from libredgetpu_ros.models.catalogue import CATALOGUE
    from libredgetpu_ros.models.store import cache_dir, status

    rows = [{"name": e.name, "task": e.task, "status": status(e), "description": e.description,
             "files": [{"name": f.name, "url": f.url, "sha256": f.sha256} for f in e.files]}
            for e in CATALOGUE.values()]
    if as_json:
        print(json.dumps({"cache": str(cache_dir()), "models": rows}, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['task']:<8}  {r['status']:<7}  {r['description']}")
    print(f"cache: {cache_dir()}")
    return 0


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from libredgetpu_ros.errors import InputError
    from libredgetpu_ros.models import store

    action = args.models_action
    if action == "list":
        return _list(args.json)
    if action == "fetch":
        from libredgetpu_ros.models.download import DEADLINE_S, MAX_DEADLINE_S

        progress = not args.no_progress and sys.stderr.isatty()  # the bar draws on stderr
        deadline = DEADLINE_S if args.timeout is None else args.timeout
        if not 0 < deadline <= MAX_DEADLINE_S:  # huge values overflow the watchdog's timer (in its thread)
            raise InputError(f"--timeout must be a positive number of seconds, at most {MAX_DEADLINE_S:g}, "
                             f"got {args.timeout}")
        for name in args.name:
            store.entry(name)  # every name known before anything is downloaded
        fetched = []
        for name in args.name:
            path = store.fetch(name, mirror=args.mirror, progress=progress, say=say, deadline_s=deadline)
            fetched.append(_entry_files(name, path))
            if not args.json:
                print(path)
        if args.json:
            print_json({"cache": str(store.cache_dir()), "fetched": fetched})
        return 0
    if action == "path":
        e = store.entry(args.name)
        f = e.cpu if args.cpu else (e.labels if args.labels else e.edgetpu)
        if f is None:
            which = "labels" if args.labels else "compiled Edge TPU model (its CPU twin: --cpu)"
            raise InputError(f"model {e.name!r} has no {which} file")
        path = store.cached(f)
        if path is None:
            raise InputError(f"{f.name} of {e.name!r} is not in the cache ({store.cache_dir()}): "
                             f"run `libredgetpu-ros models fetch {e.name}` (or `models import DIR` offline)")
        print_json({"name": e.name, "file": f.name, "path": str(path)}) if args.json else print(path)
        return 0
    complete = store.import_dir(Path(args.dir), args.names or None, say=say)
    # Entries this import left incomplete, with the files still missing (e.g. a labels file kept in another
    # folder: import that folder too, or a common parent).
    wanted = [store.entry(n) for n in (args.names or store.CATALOGUE)]
    partial = {e.name: [f.name for f in e.files if store.cached(f) is None]
               for e in wanted if store.status(e) == "partial"}
    still = "; ".join(f"{name} still lacks {', '.join(files)}" for name, files in partial.items())
    if not complete:
        raise InputError(f"import: no complete catalogue entry under {args.dir} (each needs its Edge TPU "
                         f"model, CPU twin and labels or sidecar; `libredgetpu-ros models list --json` names "
                         f"them)" + (f": {still} (import a folder holding them too)" if still else ""))
    if args.json:
        print_json({"cache": str(store.cache_dir()), "complete": [_entry_files(n) for n in complete],
                    "partial": partial})
    else:
        print("\n".join(complete))
        if still:
            print(f"note: {still}", file=sys.stderr)
    return 0


def _entry_files(name: str, model: object = None) -> dict:
    """An entry's name, its model's cached path (``model``, else looked up) and each file's."""
    from libredgetpu_ros.models import store

    e = store.entry(name)
    files = {f.name: str(store.cached(f) or "") for f in e.files}
    main = e.edgetpu or e.files[0]
    return {"name": e.name, "path": str(model) if model is not None else files[main.name], "files": files}
