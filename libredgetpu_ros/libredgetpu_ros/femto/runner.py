"""One small runner interface for the SPU family, chosen by name.

A runner takes quantized, padded integer input vectors one at a time (``send``), in the order the caller's
sequence engine accepted them, and hands back the integer outputs produced since the last ``recv``. It knows
when a sequence completes from the IOSpec (femtorun semantics), as femtorun's ``FemtoRunner`` does.

=============  ==============================================  ===============================================
name           class                                           what it needs
=============  ==============================================  ===============================================
reference      :class:`~.reference.ReferenceRunner`            nothing: NumPy, an affine program YAML
femtodriver    :class:`~.adapters.FemtodriverRunner`           ``femtodriver`` + an SPU (EVK2 / ZCU104) and
                                                               a femtofile from femtocrux
fqir           :class:`~.adapters.FqirRunner`                  ``femtodriver`` + ``fmot`` (torch), an FQIR
                                                               pickle
=============  ==============================================  ===============================================
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

import numpy as np

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.femto.iospec import IOSpec

RUNNERS: dict[str, str] = {
    "reference": "libredgetpu_ros.femto.reference:ReferenceRunner",
    "femtodriver": "libredgetpu_ros.femto.adapters:FemtodriverRunner",
    "fqir": "libredgetpu_ros.femto.adapters:FqirRunner",
}


class SpuRunner(Protocol):
    """What the node and the CLI use; every runner meets it."""

    name: str

    def reset(self) -> None:
        """Start from zero state (latched inputs 0, nothing pending)."""

    def send(self, name: str, vector: np.ndarray) -> None:
        """One input by varname: integer vector of the input's padded length."""

    def recv(self) -> dict[str, np.ndarray]:
        """Integer outputs produced since the last recv, by varname (at least ``length`` elements each)."""

    def describe(self) -> dict:
        """JSON-ready description (runner name, program / device, options)."""

    def close(self) -> None:
        """Release the program, device or simulator."""


def open_runner(name: str, spec: IOSpec, **options: Any) -> SpuRunner:
    """The runner registered as ``name``; ``options`` go to its constructor (e.g. ``program=PATH``)."""
    target = RUNNERS.get(name)
    if target is None:
        raise ConfigError(f"runner {name!r} is unknown; choose one of {sorted(RUNNERS)}")
    module_name, cls_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    runner = cls(spec, **options)
    runner.reset()
    return runner
