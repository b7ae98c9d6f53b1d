"""``CameraProcessor``: what a camera node does with one frame, without the node: the one piece the live node
(``camera/node_base.py``, its ``PROCESSOR``) and ``process-bag`` (``ros/bag_nodes.py``, the registry of
processors) both run, so that offline results are the live node's by construction.

A processor is opened from the node's parameters (the values dataclass of its ``ParamTable``) and turns a
decoded frame (HxWx3 uint8 RGB + the frame's ``Header``) into the (relative topic, message) pairs the node
publishes, in publishing order, plus the time per stage. It holds every state that depends on the frames
only (a tau history, a frame pair, counters shown in diagnostics); what needs the node (publishers,
services, CameraInfo subscriptions, the parameter services) stays in the node.

One subclass per node type, next to its node (``ros/robotics/tracker_processor.py``, ...).

Two stages where it pays: a processor may override ``prepare`` (the frame -> what its per-frame work starts
from, e.g. the perception model's input: pure CPU on that frame only, no device, backend or processor state
touched, safe on any thread, its own output allocated). ``frame`` takes that result as ``prepared`` or, when
none is given (the live node), runs ``prepare`` itself first: one code path, back to back. ``process-bag``'s
pipelined loop prepares frames on its reader thread while the loop runs the rest (``ros/bag_processing.py``).
A processor that does not override ``prepare`` does everything in ``frame``, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

# the shared_* diagnostics of every node on a shared accelerator (camera nodes' processors import them here)
from libredgetpu_ros.ros.diagnostics import shared_values, shared_warnings  # noqa: F401

if TYPE_CHECKING:
    from libredgetpu_ros.ros.conversions import ImagePlane

Warn = Callable[[str], Any]
Wanted = Callable[[str], bool]
# The stage the node adds its own publishing time to (when the processor reports one): "publish" covers
# building the messages and publishing them, as it did when the nodes did both in one loop.
PUBLISH_STAGE = "publish"


@dataclass(frozen=True, slots=True)
class Unprepared:
    """``prepare``'s exception for one frame, carried to the second stage, which raises it (``ready``): the
    frame fails where and as it would have without the split (same counting, same message)."""

    error: Exception


@dataclass
class FrameOutput:
    """One frame's (relative topic, message) pairs in publishing order, its time per stage in ms
    (``~/timing`` / diagnostics ``<stage>_ms``), and the bad-input causes the node counts for it although
    it was processed (e.g. a non-finite estimate left unpublished)."""

    messages: list[tuple[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    bad_input: tuple[str, ...] = ()


class CameraProcessor:
    """Base of the per-node-type processors; see the module docstring.

    A subclass sets ``out_types`` (relative topic -> message class: every topic it may publish) and
    implements ``frame``; the rest has defaults for a processor with no latched output, no diagnostics of
    its own and nothing to release."""

    out_types: dict[str, type]

    def __init__(self, params: Any, warn: Warn | None = None, node: str = "") -> None:
        """Open what ``frame`` needs from the node's parameters (a ``LibrEdgeTpuError`` if it cannot be;
        nothing is left open then); ``warn`` hears what was substituted or ignored; ``node``: the live node's
        fully qualified name, which names its streams on a shared accelerator (``params.share_stream``;
        "" offline)."""
        self.params = params
        self.warn: Warn = warn or (lambda text: None)
        self.node = node

    @classmethod
    def offline_notes(cls, params: Any) -> list[str]:
        """What ``process-bag`` does otherwise than the live node with these parameters (logged once)."""
        return []

    def warm_up(self, rgb: np.ndarray | None) -> None:
        """Pay the first inference's one-off costs (on ``rgb``, or a blank frame of the input size) without
        changing any state a later frame sees."""

    def restart(self) -> None:
        """The live node's activate: forget what the frames before the pause left (a last frame or result, a
        frame pair), which no longer shows the scene: a service or diagnostics must not serve it as current.
        Default: nothing kept between frames."""

    @classmethod
    def prepares(cls) -> bool:
        """Whether this processor has a first stage (overrides ``prepare``): worth running ahead."""
        return cls.prepare is not CameraProcessor.prepare

    def prepare(self, rgb: np.ndarray) -> Any:
        """The first stage (module docstring): pure CPU on ``rgb`` alone, thread-safe; raises as ``frame``
        would for that frame's data. Default: nothing (``frame`` does everything)."""
        return None

    def prepare_or_unprepared(self, rgb: np.ndarray) -> Any:
        """``prepare(rgb)``, its exception (not a ``BaseException`` such as Ctrl-C) returned as ``Unprepared``
        for the second stage to raise: for a thread preparing frames ahead of the loop."""
        try:
            return self.prepare(rgb)
        except Exception as exc:  # the frame's failure, raised by frame() in the loop (Unprepared)
            return Unprepared(exc)

    def ready(self, rgb: np.ndarray, prepared: Any) -> Any:
        """What ``frame`` starts from: ``prepared`` as given, ``prepare(rgb)`` run now when None, and the
        first stage's exception raised when it is ``Unprepared``."""
        if prepared is None:
            return self.prepare(rgb)
        if isinstance(prepared, Unprepared):
            raise prepared.error
        return prepared

    def frame(self, header: Any, rgb: np.ndarray, wanted: Wanted | None = None,
              plane: ImagePlane | None = None, prepared: Any = None) -> FrameOutput:
        """One frame -> its messages (only the topics ``wanted`` says someone reads, default all the
        parameters ask for; markers on ``plane`` when given) and timings; ``prepared``: ``prepare(rgb)``'s
        result when it ran ahead (``ready``; every processor takes the argument, one without a first stage
        is only ever given None). Raises ``InputError`` for bad frame data, ``DeviceError`` /
        ``BackendError`` when it cannot run any more."""
        raise NotImplementedError

    def messages(self, header: Any, rgb: np.ndarray, prepared: Any = None) -> list[tuple[str, Any]]:
        """Offline: every message the parameters ask for (as if someone subscribed to every topic);
        ``prepared``: see ``frame``."""
        return self.frame(header, rgb, prepared=prepared).messages

    def latched(self, header: Any) -> list[tuple[str, Any]]:
        """Transient-local messages the node publishes once on configure (stamped with ``header``)."""
        return []

    def diagnostic_values(self) -> dict[str, object]:
        """Key/values put first in the node's diagnostics status (task, backend, model, counters...)."""
        return {}

    def diagnostic_warnings(self) -> list[str]:
        """Reasons for a WARN status besides a CPU fallback (``fallbacks``); may consume a per-period
        window."""
        return []

    def fallbacks(self) -> list[str]:
        """Why each runner it opened runs on the CPU although ``backend: auto`` looked for an accelerator
        (its ``fallback``, "" if it did not fall back): the node's WARN
        (``diagnostics.fallback_warnings``)."""
        return []

    def hardware_id(self) -> str:
        """The diagnostics ``hardware_id`` (device or backend)."""
        return "cpu"

    def check_runtime_params(self, changes: dict[str, Any]) -> str | None:
        """A runtime parameter change (name -> new value, the table's checks passed): applied to what the
        processor runs, or why it is refused (nothing changed then)."""
        return None

    def close(self) -> None:
        """Release what ``__init__`` opened (idempotent); a ``LibrEdgeTpuError`` is logged by the node."""


def described_hardware(describe: dict[str, Any]) -> str:
    """``hardware_id`` from a ``describe()`` dict: its device, else its backend, else cpu."""
    return str(describe.get("device") or describe.get("backend") or "cpu")
