"""The local model cache: where catalogue files live, fetching and importing them, resolving config names.

Layout: ``$XDG_CACHE_HOME/libredgetpu_ros/models/<file name>`` (default ``~/.cache``; override the whole
folder with ``LIBREDGETPU_ROS_MODELS``). Flat on purpose: an Edge TPU model and its CPU twin sit side by
side under the names the pipeline expects (twin = name without ``_edgetpu``), and entries share a labels
file. Every file in the cache passed its SHA-256 check before it was renamed into place.

A config names a model either by path or by catalogue name (``model: mobilenet_v1_0.25_128``,
``labels: mobilenet_v1_0.25_128``): :func:`resolve_model` / :func:`resolve_labels` turn a name into its
cached file and leave anything else alone. Nothing is downloaded on that path (a node at configure time
must not reach for the internet): a missing file is an error that says which command fetches it.
ROS-free.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from libredgetpu_ros.atomicio import atomic_path
from libredgetpu_ros.errors import InputError, ModelFetchError, ModelSourceError, OutputError
from libredgetpu_ros.models.catalogue import CATALOGUE, ModelEntry, ModelFile
from libredgetpu_ros.models.download import DEADLINE_S, check_url, download, sha256_of
from libredgetpu_ros.paths import file_kind, walk_files
from libredgetpu_ros.textdata import clip
from libredgetpu_ros.userdirs import user_cache_dir

MIRROR_VAR = "LIBREDGETPU_ROS_MODEL_MIRROR"  # base URL serving the catalogue's files by name
CACHE_VAR = "LIBREDGETPU_ROS_MODELS"  # the whole cache folder, instead of the XDG one


def cache_dir() -> Path:
    """The models cache folder (module docstring)."""
    return user_cache_dir("models", CACHE_VAR)


def entry(name: str) -> ModelEntry:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise InputError(f"unknown model {name!r}: the catalogue has {', '.join(sorted(CATALOGUE))} "
                         f"(libredgetpu-ros models list)") from None


def cached(file: ModelFile, cache: Path | None = None) -> Path | None:
    """The cached path of ``file`` if present (size and hash are checked when it is written, not here)."""
    path = (cache or cache_dir()) / file.name
    return path if path.is_file() else None


def status(e: ModelEntry, cache: Path | None = None) -> str:
    present = sum(cached(f, cache) is not None for f in e.files)
    return "cached" if present == len(e.files) else ("partial" if present else "missing")


def fetch(name: str, *, mirror: str | None = None, cache: Path | None = None, progress: bool = False,
          say: Callable[[str], None] = lambda _: None, deadline_s: float = DEADLINE_S) -> Path:
    """Download every file of entry ``name`` not cached yet (verified, resumable); the Edge TPU model's path.

    ``mirror`` (or ``$LIBREDGETPU_ROS_MODEL_MIRROR``) replaces the official URL by ``<mirror>/<file name>``,
    for a site cache or an air-gapped robot; the checksums stay the catalogue's. Each file must arrive
    within ``deadline_s`` seconds (a resumed transfer gets a fresh deadline).
    """
    e = entry(name)
    cache = cache or cache_dir()
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_VAR) or None
    for f in e.files:
        url = f"{mirror.rstrip('/')}/{f.name}" if mirror else f.url
        dest = cache / f.name
        # a link is replaced, not read
        if file_kind(dest, follow=False) is None and sha256_of(dest, follow=False) == f.sha256:
            say(f"{f.name}: cached")
            continue
        check_url(url)  # before it is echoed: a CR/LF in --mirror split the output lines
        say(f"{f.name}: fetching {url}")
        download(url, dest, f.sha256, progress=progress, deadline_s=deadline_s)
    return cache / (e.edgetpu or e.cpu).name


def import_dir(folder: Path, names: list[str] | None = None, *, cache: Path | None = None,
               say: Callable[[str], None] = lambda _: None) -> list[str]:
    """Copy catalogue files found anywhere under ``folder`` (by file name) into the cache, each checked
    against its SHA-256 first; returns the entries the folder contributed to that are complete afterwards.
    A file with the right name and the wrong bytes is an error, not skipped silently."""
    if not folder.is_dir():
        raise InputError(f"import: {folder} is not a directory")
    cache = cache or cache_dir()
    wanted = [entry(n) for n in names] if names else list(CATALOGUE.values())
    by_name: dict[str, Path] = {}
    for path in walk_files(folder, "import folder"):  # iterative: no RecursionError on a deep tree
        by_name.setdefault(path.name, path)
    done: set[str] = set()
    touched: list[ModelEntry] = []
    for e in wanted:
        if any(f.name in by_name for f in e.files):
            touched.append(e)
        for f in e.files:
            if f.name in done or f.name not in by_name:
                continue
            src = by_name[f.name]
            got = sha256_of(src, "import: file")
            if got != f.sha256:
                raise ModelSourceError(f"import: {src}: checksum mismatch for {f.name}: SHA-256 {got}, "
                                      f"expected {f.sha256}; nothing of it was imported")
            dest = cache / f.name
            if not (dest.is_file() and sha256_of(dest) == f.sha256):
                _copy_verified(src, dest, f)
            say(f"{f.name}: imported from {src}")
            done.add(f.name)
    return [e.name for e in touched if status(e, cache) == "cached"]


def _copy_verified(src: Path, dest: Path, f: ModelFile) -> None:
    """Copy ``src`` to ``dest`` through a temporary that is hashed again before the rename: the source may
    have changed since it was checked, or the copy gone wrong; either way ``dest`` is left as it was."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)
            got = sha256_of(tmp)
            if got != f.sha256:
                raise ModelFetchError(f"import: the copy of {src} has SHA-256 {got}, expected {f.sha256} "
                                      f"(the file changed while it was imported?); nothing was imported")
    except (OSError, OutputError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ModelFetchError(f"import: cannot copy {clip(str(src))} into {clip(str(dest.parent))}: "
                              f"{reason}") from exc


def _resolve(text: str, pick: Callable[[ModelEntry], ModelFile | None], what: str) -> str:
    e = CATALOGUE.get(text.strip())
    if e is None:
        return text
    f = pick(e)
    if f is None:
        raise InputError(f"{what}: catalogue model {e.name!r} has no {what} file")
    path = cached(f)
    if path is None:
        raise InputError(f"{what}: catalogue model {e.name!r} is not in the cache ({cache_dir()}): "
                         f"run `libredgetpu-ros models fetch {e.name}` (or `models import DIR`)")
    return str(path)


def resolve_model(text: str) -> str:
    """A config's ``model`` value: a catalogue name becomes its cached Edge TPU file; paths pass through."""
    return _resolve(text, lambda e: e.edgetpu, "model")


def resolve_labels(text: str) -> str:
    """A config's ``labels`` value: a catalogue name becomes its cached labels file; paths pass through."""
    return _resolve(text, lambda e: e.labels, "labels")
