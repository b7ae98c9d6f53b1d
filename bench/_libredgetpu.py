"""LibrEdgeTPU's Python package from a checkout, for the benchmark columns and test oracles that compare
against it. Nothing of it is in this repository: the checkout is ``$LIBREDGETPU_SRC`` (default
/work/ext/LibrEdgeTPU), found at run time; without it the callers skip their column or test and say so.

Its package imports pyusb at import time; nothing here talks to a device, so an empty ``usb`` module stands
in when pyusb is not installed. Imported as ``from _libredgetpu import ...`` by the benchmarks (a script's
own folder is on ``sys.path``, like ``_timing.py``) and by test/robotics/_flow_scenes.py.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

ENV = "LIBREDGETPU_SRC"
DEFAULT = Path("/work/ext/LibrEdgeTPU")


def checkout(marker: str) -> Path | None:
    """The checkout's root when it holds ``libredgetpu/<marker>`` (the module a caller needs), else None."""
    root = Path(os.environ.get(ENV) or DEFAULT)
    return root if (root / "libredgetpu" / marker).is_file() else None


def import_package(marker: str) -> types.ModuleType | None:
    """The ``libredgetpu`` package of :func:`checkout` (its submodules then import as usual), or None when
    there is no checkout or it does not import (said on stdout)."""
    root = checkout(marker)
    if root is None:
        return None
    try:
        import usb.core  # noqa: F401
    except ImportError:
        for name in ("usb", "usb.core", "usb.util"):
            sys.modules.setdefault(name, types.ModuleType(name))
    if str(root) not in sys.path:
        sys.path.append(str(root))
    try:
        import libredgetpu
    except ImportError as exc:
        print(f"LibrEdgeTPU at {root} does not import ({exc}); its columns are skipped")
        return None
    return libredgetpu
