"""Thread pools of the numeric libraries (OpenBLAS / OpenMP under NumPy and OpenCV, OpenCV's own), set by
the package instead of left to the environment.

Why: NumPy's OpenBLAS starts one thread per core and spins them while it waits. The CPU tails run small
products (DeepLab's 1x1 convolutions on 65x65 pixels): on an idle 2-core machine two BLAS threads gain
nothing, and on a busy one (a robot's CPU never is idle: drivers, navigation, other nodes) the spinning
threads fight the other processes for the cores (bench/results/library_threads.md). LiteRT's threads are a
separate setting (``cpu_threads`` of the perception node / ``PipelineConfig``).

:func:`limit_library_threads` applies a count to the libraries already loaded (threadpoolctl, process-wide)
and, through ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS``, to the ones loaded later
(they read it when they load; child processes inherit it). The count: the perception node's
``library_threads`` parameter, ``PipelineConfig.library_threads``, else ``$LIBREDGETPU_ROS_LIBRARY_THREADS``,
else :data:`DEFAULT_LIBRARY_THREADS`; 0 leaves the libraries' own defaults.
"""

from __future__ import annotations

import logging
import os
import sys

from libredgetpu_ros.errors import ConfigError

log = logging.getLogger(__name__)

LIBRARY_THREADS_VAR = "LIBREDGETPU_ROS_LIBRARY_THREADS"
DEFAULT_LIBRARY_THREADS = 1
MAX_LIBRARY_THREADS = 256
_ENV_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def default_library_threads() -> int:
    """``$LIBREDGETPU_ROS_LIBRARY_THREADS`` if set (ConfigError naming it if not an integer in range), else
    :data:`DEFAULT_LIBRARY_THREADS`."""
    text = os.environ.get(LIBRARY_THREADS_VAR, "").strip()
    if not text:
        return DEFAULT_LIBRARY_THREADS
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_LIBRARY_THREADS:
        raise ConfigError(f"{LIBRARY_THREADS_VAR}={text[:40]!r}: expected an integer in "
                          f"[0, {MAX_LIBRARY_THREADS}] (0: the libraries' own defaults)")
    return value


def limit_library_threads(threads: int | None = None) -> dict[str, int]:
    """Set the numeric libraries' pools to ``threads`` (None: :func:`default_library_threads`; 0: leave them).

    Returns what the loaded pools now use, by API (``{"blas": 1, "openmp": 1, "opencv": 1}``), for logs.
    """
    n = default_library_threads() if threads is None else int(threads)
    if not 0 <= n <= MAX_LIBRARY_THREADS:
        raise ConfigError(f"library_threads must be in [0, {MAX_LIBRARY_THREADS}], got {n}")
    if n == 0:
        return {}
    for var in _ENV_VARS:
        os.environ[var] = str(n)
    applied: dict[str, int] = {}
    if not {"numpy", "cv2"} & sys.modules.keys():
        return applied  # nothing loaded yet (a CLI command starting): the variables are enough, no scan
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:  # pragma: no cover - pinned in requirements.lock.txt; the variables still apply
        log.warning("threadpoolctl is not installed: libraries already loaded keep their thread pools")
    else:
        threadpool_limits(limits=n)  # process-wide until changed again (never restored here)
        for pool in threadpool_info():
            applied[pool["user_api"]] = max(applied.get(pool["user_api"], 0), int(pool["num_threads"]))
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        cv2.setNumThreads(n)
        applied["opencv"] = n
    return applied
