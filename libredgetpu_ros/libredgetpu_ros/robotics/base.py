"""RoboticsModule: what every robotics module has around its runner, written once.

A module (SpotTracker, PatternTracker, LoomingDetector, OpticalFlow, VisualCompass, EmbeddingExtractor)
holds a ``runner`` (a ``robotics.template.TemplateRunner``; the extractor's is the backend it opened) and
usually a ``template`` (``RoboticsTemplate``) and a ``resize`` flag. This base gives them:

- ``version``: the parameter version the next frame runs with (0 for a runner that never swaps);
- ``backend_name`` and ``describe()`` (the runner's description plus ``module``, the input ``size`` and
  ``channels``, and what the module adds in ``details()``);
- ``fit(image)`` / ``model_input(image)``: a frame as the template's input image / its (1, H, W, C) batch
  (resized or refused as ``resize`` says; colour made grey where the template takes one channel, see
  robotics/image.py), and
  ``match_channels(image)``: the same channel rule without a resize (for patches the caller cut itself);
- ``shared_status()``: the module's stream on an Edge TPU it shares with other users of its process
  (``edgetpu/broker.py``: stream name, ``rate_hz``, served, superseded, latency, faults; the device's users),
  {} on the CPU;
- ``close()`` and the context manager (``with SpotTracker(...) as tracker:``).

Modules keep their own ``__init__`` (each checks its template before opening a device) and set the
attributes above there. Each takes ``device`` (the accelerator selector, or a ``DeviceBroker`` to share) and
``rate_hz`` (its weight on that accelerator when other users of the process share it: the camera nodes'
``device_share_hz``; 0: unset, ``broker.Stream.weight``) and ``stream`` (that stream's name: a node's, from
``ros/params.share_stream``; "": the model file), and hands them to its runner (``TemplateRunner``,
``open_backend``).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import numpy as np

from libredgetpu_ros.robotics.image import fit_image, match_channels

_Module = TypeVar("_Module", bound="RoboticsModule")  # typing.Self needs Python 3.11


class RoboticsModule:
    """The shared part of the robotics modules (see the module docstring)."""

    MODULE: ClassVar[str] = ""  # the ``module`` entry of describe()
    runner: Any
    template: Any
    resize: bool = True

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(height, width, channels) of the image the module's model takes."""
        return self.template.image_shape

    @property
    def version(self) -> int:
        """The parameter version the next frame runs with (0 when the runner never swaps parameters)."""
        store = getattr(self.runner, "store", None)
        return 0 if store is None else store.version

    @property
    def backend_name(self) -> str:
        name = getattr(self.runner, "backend_name", None)
        return str(name if name is not None else getattr(self.runner, "name", type(self.runner).__name__))

    def fit(self, image: object, what: str = "image") -> np.ndarray:
        """``image`` as the template's (H, W, C) uint8 input image (see robotics.image.fit_image)."""
        height, width, channels = self.template.image_shape  # read once per template (a cached property)
        return fit_image(image, height, width, channels, self.resize, what)

    def model_input(self, image: object) -> np.ndarray:
        """The template's input (1, H, W, C) uint8 from a frame."""
        return self.fit(image)[None]

    def match_channels(self, image: object, what: str = "image") -> np.ndarray:
        """``image`` as uint8 (h, w, C) with the template's channel count, its size kept (RGB -> luma for a
        one-channel template; one channel given to a colour template is refused)."""
        return match_channels(image, self.image_shape[2], what)

    def details(self) -> dict[str, Any]:
        """What the module adds to describe() (its settings)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """The runner's description (backend, device, template, parameter version) and the module's own."""
        info = dict(self.runner.describe()) if hasattr(self.runner, "describe") else {"backend": "none"}
        height, width, channels = self.image_shape
        info.update(module=self.MODULE, size=[width, height], channels=channels)
        info.update(self.details())
        return info

    def shared_status(self) -> dict[str, Any]:
        """The runner's stream on a shared Edge TPU (``EdgeTpuBackend.shared_status``), {} on the CPU."""
        backend = getattr(self.runner, "backend", self.runner)  # a TemplateRunner's, or the opened backend
        status = getattr(backend, "shared_status", None)
        return status() if callable(status) else {}

    def close(self) -> None:
        self.runner.close()

    def __enter__(self: _Module) -> _Module:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
