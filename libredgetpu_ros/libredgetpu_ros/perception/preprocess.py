"""RGB frame -> the quantized input tensor of a model, and the map back to image pixels.

Choices follow Google's own examples for each model family so that our results are comparable with theirs:

- PoseNet (project-posenet): nearest-neighbour resize with PIL's pixel-centre sampling, which is OpenCV's
  ``INTER_NEAREST_EXACT`` (plain ``INTER_NEAREST`` samples the top-left corner and shifts results by up to
  half a source pixel). The reference poses in the fixtures were produced this way.
- Classification and DeepLab (pycoral examples): PIL ``ANTIALIAS`` (Lanczos with a widened kernel) when
  shrinking. We use OpenCV's ``INTER_AREA`` for shrinking (also an antialiasing filter; no Pillow
  dependency) and ``INTER_LINEAR`` for enlarging.

All models here take RGB. When the input quantization maps pixels onto the range the model was trained on
— scale 1/128 with zero point 128 (real ``(p - 128) / 128``, every fixture) or scale 1/255 with zero point 0
(real ``p / 255``) — raw pixels are the quantized input and no arithmetic runs at all. Otherwise we assume
pycoral's default convention (mean 128, std 128: real ``(p - 128) / 128``) and quantize that real value with
the input's scale and zero point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from libredgetpu_ros.backends.base import TensorSpec
from libredgetpu_ros.errors import ModelFormatError

ResizeMode = Literal["nearest", "area"]


@dataclass(frozen=True, slots=True)
class InputTransform:
    """How frames become the model input and how model-input coordinates map back to the frame."""

    width: int
    height: int
    resize: ResizeMode
    spec: TensorSpec
    raw_pixels: bool  # the quantized input equals the pixel value

    @classmethod
    def for_input(cls, spec: TensorSpec, resize: ResizeMode) -> InputTransform:
        shape = spec.shape
        if len(shape) != 4 or shape[0] != 1 or shape[3] != 3:
            raise ModelFormatError(f"input {spec.name!r} has shape {shape}; image models take [1, H, W, 3]")
        if spec.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)):
            raise ModelFormatError(f"input {spec.name!r} is {spec.dtype}; only uint8/int8 image inputs are "
                                   f"supported")
        return cls(width=int(shape[2]), height=int(shape[1]), resize=resize, spec=spec,
                   raw_pixels=_is_raw_pixels(spec))

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the model input."""
        return self.width, self.height

    def resize_image(self, rgb: np.ndarray) -> np.ndarray:
        import cv2

        h, w = rgb.shape[:2]
        if (w, h) == (self.width, self.height):
            return rgb
        if self.resize == "nearest":
            flag = cv2.INTER_NEAREST_EXACT
        else:
            flag = cv2.INTER_AREA if (w >= self.width and h >= self.height) else cv2.INTER_LINEAR
        return cv2.resize(rgb, (self.width, self.height), interpolation=flag)

    def quantize(self, resized: np.ndarray) -> np.ndarray:
        """Resized uint8 RGB -> the input tensor (shape [1, H, W, 3], the model's dtype)."""
        if self.raw_pixels and self.spec.dtype == np.uint8:
            return resized[None]
        real = (resized.astype(np.float32) - 128.0) / 128.0
        info = np.iinfo(self.spec.dtype)
        q = np.rint(real / np.float32(self.spec.scale)) + np.float32(self.spec.zero_point)
        return np.clip(q, info.min, info.max).astype(self.spec.dtype)[None]

    def __call__(self, rgb: np.ndarray) -> np.ndarray:
        return self.quantize(self.resize_image(rgb))

    def scale_to(self, image_size: tuple[int, int]) -> tuple[float, float]:
        """(sx, sy) taking model-input pixel coordinates to pixels of an image of ``(width, height)``."""
        return image_size[0] / self.width, image_size[1] / self.height


def _is_raw_pixels(spec: TensorSpec) -> bool:
    if spec.dtype != np.uint8:
        return False
    centred = np.isclose(spec.scale, 1 / 128, rtol=1e-5) and spec.zero_point == 128  # (p - 128) / 128
    unit = np.isclose(spec.scale, 1 / 255, rtol=1e-5) and spec.zero_point == 0  # p / 255
    return bool(centred or unit)
