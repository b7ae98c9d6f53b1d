"""numba for the package's compiled kernels: imported on first use, cached in the user's cache folder.

Importing numba costs ~0.25-0.9 s (LLVM and its type system); a module that only *may* need a kernel
(``matmul`` for every CLI command, ``twin``) must not pay it at import. :func:`available` answers "is numba
installed" without importing it; :func:`njit` imports it, points the package's kernels at the cache folder
and returns numba's decorator. Callers compile (or load) their kernels when the object that uses them is
opened (``MatMulEngine``, ``ReservoirComputer``), so the first real call costs what the next ones cost.

Cache folder: ``$LIBREDGETPU_ROS_NUMBA_CACHE``, else ``$XDG_CACHE_HOME/libredgetpu_ros/numba`` (default
``~/.cache``). numba's own default is the package's ``__pycache__`` (read-only on an installed system; it then
falls back to its own user folder). Only kernels defined in this package's files are redirected, through
numba's cache locator list, so other numba code in the process keeps its own settings; a user's
``NUMBA_CACHE_DIR`` wins over this folder, as numba documents it. A cached kernel is reused only while every
kernel file of the package is unchanged (numba alone checks the kernel's own file, not its callees').
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from libredgetpu_ros.userdirs import user_cache_dir

CACHE_VAR = "LIBREDGETPU_ROS_NUMBA_CACHE"
_PACKAGE_DIR = Path(__file__).resolve().parent
_lock = threading.Lock()
_compile_lock = threading.Lock()  # compile_kernels: one module compiled by one thread
_installed = False
_available: bool | None = None


def cache_dir() -> Path:
    """Where the package's compiled kernels are cached (module docstring)."""
    return user_cache_dir("numba", CACHE_VAR)


def active_cache_dir() -> Path:
    """Where numba writes and reads the package's kernels: the user's ``NUMBA_CACHE_DIR`` when set (it wins,
    module docstring), else :func:`cache_dir`."""
    explicit = os.environ.get("NUMBA_CACHE_DIR")
    return Path(explicit) if explicit else cache_dir()


def available() -> bool:
    """True when numba is installed (checked without importing it)."""
    global _available
    if _available is None:
        try:
            _available = importlib.util.find_spec("numba") is not None
        except (ImportError, ValueError):  # a broken install: the NumPy paths work without it
            _available = False
    return _available


def _install_locator() -> None:
    """Put a locator for this package's kernels in front of numba's list (once per process)."""
    global _installed
    with _lock:
        if _installed:
            return
        from numba.core import caching, config

        class PackageCacheLocator(caching.UserProvidedCacheLocator):
            """numba's user-provided-folder locator, for this package's source files only, in cache_dir()."""

            def __init__(self, py_func: Any, py_file: str) -> None:
                super().__init__(py_func, py_file)
                self._cache_path = os.path.join(str(cache_dir()), self.get_suitable_cache_subpath(py_file))

            def get_source_stamp(self) -> Any:
                # numba stamps a kernel's cache with its own file only: a kernel that calls one defined in
                # another file kept the old callee's machine code after that file changed. Every kernel file
                # of the package is in the stamp.
                return super().get_source_stamp(), _kernel_files_stamp()

            @classmethod
            def from_function(cls, py_func: Any, py_file: str) -> Any:
                if config.CACHE_DIR or not Path(py_file).resolve().is_relative_to(_PACKAGE_DIR):
                    return None  # the user's NUMBA_CACHE_DIR, or someone else's function: numba decides
                return super(caching.UserProvidedCacheLocator, cls).from_function(py_func, py_file)

        impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed in numba 0.59
        impl._locator_classes.insert(0, PackageCacheLocator)
        _install_listener()
        _installed = True


_KERNEL_MARKERS = (b"compile_kernels(globals()", b"njit(")


def _marked_files() -> list[tuple[Path, bytes]]:
    """(path, text) of every package file whose text carries a kernel marker, this one included."""
    found = []
    for path in sorted(_PACKAGE_DIR.rglob("*.py")):
        try:
            text = path.read_bytes()
        except OSError:
            continue
        if any(marker in text for marker in _KERNEL_MARKERS):
            found.append((path, text))
    return found


def kernel_files() -> list[Path]:
    """The package files that define compiled kernels (their text marks them): what :data:`FAMILIES` lists."""
    return [path for path, _ in _marked_files() if path.name != Path(__file__).name]


@functools.lru_cache(maxsize=1)
def _kernel_files_stamp() -> bytes:
    """A digest of every package file that defines compiled kernels (their text marks them), once per
    process: the part of every kernel's cache stamp that notices a change in another kernel file."""
    digest = hashlib.sha256()
    for path, text in _marked_files():
        name = str(path.relative_to(_PACKAGE_DIR)).encode()
        digest.update(name + b"\0" + hashlib.sha256(text).digest())
    return digest.digest()


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """numba's ``njit(**options)``, numba imported now and the package's cache folder in place.

    Raises ImportError without numba (callers check :func:`available` first)."""
    import numba

    _install_locator()
    return numba.njit(**options)


def read_only(array: Any) -> Any:
    """A read-only view of ``array``, for warm-ups: numba compiles read-only and writable arrays as two
    specializations, and a frame path gets both (a ROS ``rgb8`` image is a read-only view of the message, an
    Edge TPU output one of the USB bytes), so a warm-up runs a kernel on each kind it can get."""
    view = array.view()
    view.flags.writeable = False
    return view


_compiled_modules: set[str] = set()
_failed_modules: set[str] = set()


def compile_kernels(namespace: dict[str, Any], kernels: Sequence[tuple[str, dict[str, Any]]]) -> bool:
    """Compile a kernel module's functions in place, once per process: ``namespace`` is the module's
    ``globals()``, ``kernels`` its function names with their ``njit`` options, callees first (numba
    resolves a kernel's global names when it first compiles, so they must already name compiled code).

    Returns False without numba or when it cannot be imported (the module's NumPy path stays in use);
    numba is imported here, not when the kernel module is."""
    module = str(namespace.get("__name__"))
    if module in _compiled_modules:
        return True
    if module in _failed_modules or not available():
        return False
    with _compile_lock:
        if module not in _compiled_modules:
            try:
                decorate = njit
                decorate()
            except ImportError:  # numba found but broken: the NumPy paths work without it
                _failed_modules.add(module)
                return False
            for name, options in kernels:
                namespace[name] = decorate(**options)(namespace[name])
            _compiled_modules.add(module)
    return True


# ----- kernel families ------------------------------------------------------------------------------------

BUILD_COMMAND = "libredgetpu-ros kernels build"


@dataclass(frozen=True)
class Family:
    """One kernel file: ``module`` defines the kernels, its ``warm_up()`` compiles (or loads) every
    specialization its users need when they open and returns False without numba."""

    name: str
    module: str
    used_by: str


# Callees' families before their callers' (image and flow_refine before flow, matmul before reservoir), so a
# build times each family's own compile.
FAMILIES: tuple[Family, ...] = (
    Family("image", "libredgetpu_ros.robotics.image_kernels", "colour frames to grey (1-channel templates)"),
    Family("resize", "libredgetpu_ros.robotics.resize_kernels", "every robotics module's camera-size frames"),
    Family("spot", "libredgetpu_ros.robotics.spot_kernels", "SpotTracker's validity check"),
    Family("looming", "libredgetpu_ros.robotics.looming_kernels", "LoomingDetector (border, scale TTC)"),
    Family("flow_refine", "libredgetpu_ros.robotics.flow_refine_kernels", "OpticalFlow's refinement"),
    Family("flow", "libredgetpu_ros.robotics.flow_kernels", "OpticalFlow, VisualCompass"),
    Family("compass", "libredgetpu_ros.robotics.compass_kernels", "VisualCompass's cylinder warp"),
    Family("matmul", "libredgetpu_ros.matmul.fastpath", "MatMulEngine (control and reservoir nodes)"),
    Family("reservoir", "libredgetpu_ros.robotics.reservoir", "ReservoirComputer's step"),
    Family("postprocess", "libredgetpu_ros.postprocess.kernels", "DeepLab's CPU tail (segmentation)"),
)
_FAMILY_OF_MODULE = {f.module: f.name for f in FAMILIES}


def family(name: str) -> Family:
    """The family called ``name``; KeyError naming the known ones."""
    for item in FAMILIES:
        if item.name == name:
            return item
    raise KeyError(f"no kernel family {name!r} (known: {', '.join(f.name for f in FAMILIES)})")


def warm_up(name: str) -> bool:
    """Compile (or load from the cache folder) family ``name`` for every argument type its modules use, as
    they do when they open; False without numba."""
    return bool(importlib.import_module(family(name).module).warm_up())


def cache_files(name: str) -> list[Path]:
    """The cache folder's index files of family ``name``'s kernels (this installation's source file)."""
    spec = importlib.util.find_spec(family(name).module)
    if spec is None or spec.origin is None:
        return []
    # numba's subfolder for a source folder (caching._CacheLocator.get_suitable_cache_subpath), without
    # importing numba: the folder's name and a digest of its absolute path
    source = Path(os.path.abspath(spec.origin))
    digest = hashlib.sha1(str(source.parent).encode()).hexdigest()
    return sorted((active_cache_dir() / f"{source.parent.name}_{digest}").glob(f"{source.stem}.*.nbi"))


@dataclass
class Compiled:
    """What numba compiled (not loaded from the cache folder) on one thread during :func:`compile_watch`."""

    families: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the outermost compiles

    def notice(self) -> str:
        """The line a node logs when its configure had to compile."""
        return (f"compiled the numba kernels of {', '.join(self.families)} in {self.seconds:.1f} s (cache "
                f"folder {active_cache_dir()} empty or outdated for them); pre-build them at install time "
                f"with `{BUILD_COMMAND}` (docs/install.md, Compiled kernels)")


class NotCached(RuntimeError):
    """Raised by a kernel that would compile while :func:`probe` runs: its cache entry is missing or stale."""

    def __init__(self, family: str) -> None:
        super().__init__(f"kernel family {family} is not in the cache folder {active_cache_dir()}")
        self.family = family


_thread = threading.local()  # per thread: open watches, compile depth, probing


def _family_of(data: Any) -> str | None:
    py_func = getattr(data.get("dispatcher") if isinstance(data, dict) else None, "py_func", None)
    return _FAMILY_OF_MODULE.get(getattr(py_func, "__module__", ""))


def _install_listener() -> None:
    """numba's ``numba:compile`` event (a cache miss about to compile) feeds the watches and the probe."""
    from numba.core import event

    class CompileListener(event.Listener):
        def on_start(self, ev: Any) -> None:
            name = _family_of(ev.data)
            if name is None:
                return
            if getattr(_thread, "probing", False):
                raise NotCached(name)
            depth = getattr(_thread, "depth", 0)
            if depth == 0:
                _thread.started = time.perf_counter()
            _thread.depth = depth + 1
            for watch in getattr(_thread, "watches", ()):
                if name not in watch.families:
                    watch.families.append(name)

        def on_end(self, ev: Any) -> None:
            if _family_of(ev.data) is None or getattr(_thread, "probing", False):
                return
            _thread.depth -= 1
            if _thread.depth == 0:
                elapsed = time.perf_counter() - _thread.started
                for watch in getattr(_thread, "watches", ()):
                    watch.seconds += elapsed

    event.register("numba:compile", CompileListener())


@contextlib.contextmanager
def compile_watch() -> Iterator[Compiled]:
    """The families this thread compiles inside the block (none when the cache folder had them all): a
    node's configure logs :meth:`Compiled.notice` when there are some."""
    watch = Compiled()
    watches = getattr(_thread, "watches", None)
    if watches is None:
        watches = _thread.watches = []
    watches.append(watch)
    try:
        yield watch
    finally:
        watches.remove(watch)


@contextlib.contextmanager
def compile_notice(log: Callable[[str], None]) -> Iterator[None]:
    """:func:`compile_watch` whose notice goes to ``log`` (a node's INFO) when the block compiled."""
    with compile_watch() as watch:
        yield
    if watch.families:
        log(watch.notice())


def uncached(name: str) -> str | None:
    """None when family ``name`` opens from the cache folder without compiling anything (its warm-up runs
    with every compile refused, no cache entry written); else the family whose kernel would compile
    first: ``name`` itself, or a family its warm-up uses (flow runs image's luma), whose missing entries then
    say nothing of ``name``'s own. Without numba: ``name``."""
    if not available():
        return name
    _thread.probing = True
    try:
        return None if warm_up(name) else name
    except NotCached as refused:
        return refused.family
    finally:
        _thread.probing = False
