"""The backend choices every node parameter and CLI option offers, defined once.

``auto`` (the Edge TPU when one is attached, else the CPU twin), ``cpu`` or ``edgetpu``; what each means is
``backends.choose``'s. Kept in a module of its own, without NumPy, so that a CLI builds its ``--backend``
option without importing the backends.
"""

from __future__ import annotations

BACKEND_KINDS: tuple[str, ...] = ("auto", "cpu", "edgetpu")
