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

import functools
import hashlib
import importlib.util
import os
import threading
from collections.abc import Callable, Sequence
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
        _installed = True


_KERNEL_MARKERS = (b"compile_kernels(globals()", b"njit(")


@functools.lru_cache(maxsize=1)
def _kernel_files_stamp() -> bytes:
    """A digest of every package file that defines compiled kernels (their text marks them), once per
    process: the part of every kernel's cache stamp that notices a change in another kernel file."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE_DIR.rglob("*.py")):
        try:
            text = path.read_bytes()
        except OSError:
            continue
        if any(marker in text for marker in _KERNEL_MARKERS):
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
