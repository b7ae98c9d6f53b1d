"""The per-user folders the package keeps data in, one rule for all of them.

A cache folder is the one its environment variable names (``LIBREDGETPU_ROS_MODELS``,
``LIBREDGETPU_ROS_NUMBA_CACHE``), else ``$XDG_CACHE_HOME/libredgetpu_ros/<sub>`` (``~/.cache`` when
``XDG_CACHE_HOME`` is unset, empty or relative: the XDG Base Directory spec has a relative path there
"considered invalid and ignored"); an empty variable counts as unset. Standard library only, on the lowest
layer, so ``jit.py`` and ``models/store.py`` (layers that may not import each other) share it.
"""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir(sub: str, env_var: str) -> Path:
    """``$env_var`` when set and not empty, else ``$XDG_CACHE_HOME/libredgetpu_ros/<sub>`` (an absolute
    ``XDG_CACHE_HOME``; else ``~/.cache``)."""
    explicit = os.environ.get(env_var)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "libredgetpu_ros" / sub
