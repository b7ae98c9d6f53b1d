"""EmbeddingExtractor: an image -> the float embedding of a feature-extractor model (Edge TPU or CPU twin).

The fixture is MobileNet v1 with its classifier cut off (``robotics/embedding``: input 224x224x3 uint8, output
1x1x1x1024 uint8, the whole graph one Edge TPU op). Frames are resized to the input (``INTER_AREA`` when
shrinking, as for the classifiers: perception/preprocess.py) and the output is dequantized with the model's
own scale and zero point. ``region`` crops a box of the frame first (enrol "the object in this box").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.backends import open_backend
from libredgetpu_ros.errors import InputError, ModelFormatError
from libredgetpu_ros.perception.images import check_rgb
from libredgetpu_ros.perception.preprocess import InputTransform
from libredgetpu_ros.robotics.base import RoboticsModule


def default_model() -> Path:
    """The catalogue's extractor (compiled; its twin is found beside it): the model cache first, then the
    fixtures (models/templates.py; ConfigError with the fetch command when it is nowhere)."""
    from libredgetpu_ros.models.template_catalogue import EXTRACTOR
    from libredgetpu_ros.models.templates import resolve_template

    base = resolve_template(EXTRACTOR, family="embedding extractor")
    return base.with_name(base.name + "_edgetpu.tflite")


class EmbeddingExtractor(RoboticsModule):
    """``runner`` is the opened backend (no parameter swaps: ``version`` stays 0); frames are fitted by the
    classifiers' input transform, not a template's."""

    MODULE = "extractor"

    def __init__(self, model: str | Path | None = None, backend: str = "auto",
                 cpu_model: str | Path | None = None, device: Any = None, rate_hz: float = 0.0,
                 stream: str = "") -> None:
        self.model_path = Path(model) if model is not None else default_model()
        self.runner = open_backend(backend, self.model_path, cpu_model, device, rate_hz=rate_hz,
                                   stream=stream)
        boundary = self.runner.boundary
        if len(boundary.inputs) != 1 or len(boundary.outputs) != 1:
            self.runner.close()
            raise ModelFormatError(f"{self.model_path}: an embedding extractor has one input and one output, "
                                   f"got {len(boundary.inputs)} and {len(boundary.outputs)}")
        self._input = boundary.inputs[0]
        self._transform = InputTransform.for_input(self._input, "area")
        self._output = boundary.outputs[0]
        self.dim = int(np.prod(self._output.shape))

    @property
    def image_shape(self) -> tuple[int, int, int]:
        shape = self._input.shape
        return int(shape[1]), int(shape[2]), int(shape[3])

    def model_input(self, image: object) -> np.ndarray:
        """The model's input from an HxWx3 uint8 RGB frame (the classifiers' area resize)."""
        return self._transform(check_rgb(image))

    def embed(self, rgb: np.ndarray, region: tuple[int, int, int, int] | None = None) -> np.ndarray:
        """float32 (dim,) embedding of an HxWx3 uint8 RGB frame (or of ``region`` = x, y, width, height)."""
        rgb = check_rgb(rgb)
        if region is not None:
            x, y, w, h = (int(v) for v in region)
            height, width = rgb.shape[:2]
            if w <= 0 or h <= 0 or x < 0 or y < 0 or x + w > width or y + h > height:
                raise InputError(f"region (x={x}, y={y}, w={w}, h={h}) is not inside the {width}x{height} "
                                 f"image")
            rgb = rgb[y:y + h, x:x + w]
        outputs = self.runner.run([self.model_input(rgb)])
        return self._output.dequantize(outputs[self._output.name]).reshape(-1)

    def details(self) -> dict[str, Any]:
        return {"model": str(self.model_path), "dim": self.dim}
