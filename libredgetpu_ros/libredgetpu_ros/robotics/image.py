"""Frames -> a template's input image (uint8 H x W x C), resized or refused as configured.

The robotics templates take raw pixels (input scale 1, zero point 0), so no arithmetic runs besides the resize
(OpenCV ``INTER_AREA`` when shrinking: block means, as LibrEdgeTPU's integer-ratio path, at a fractional
ratio the same bytes from robotics/resize_kernels.py's compiled pass once warmed up; ``INTER_LINEAR`` when
enlarging) and, for one-channel templates given colour, BT.601 luma (OpenCV's; a frame already at the
template's size in one compiled pass once robotics/image_kernels.py is warmed up, the same bytes).
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.errors import ImageError
from libredgetpu_ros.robotics import image_kernels, resize_kernels


def as_uint8(image: object, what: str = "image") -> np.ndarray:
    """A uint8 array of the image; floats must be finite and inside [0, 255] (rounded), ints inside it."""
    array = np.asarray(image)
    if array.dtype == np.uint8:
        return array
    if array.dtype.kind not in "fiu" or array.size == 0:
        raise ImageError(f"{what}: dtype {array.dtype} with shape {array.shape}; expected a "
                         f"non-empty numeric image")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ImageError(f"{what}: contains NaN/inf")
    low, high = float(array.min()), float(array.max())
    if low < 0 or high > 255:
        raise ImageError(f"{what}: values span [{low:g}, {high:g}], outside [0, 255]")
    return np.rint(array).astype(np.uint8) if array.dtype.kind == "f" else array.astype(np.uint8)


def match_channels(image: object, channels: int, what: str = "image") -> np.ndarray:
    """``image`` as uint8 (H, W, ``channels``), its size kept.

    Accepts (H, W), (H, W, 1), (H, W, 3) and a leading batch of 1; RGB given to a one-channel template
    becomes BT.601 luma; one channel given to a colour template is refused (the colour cannot be invented).
    """
    array = as_uint8(image, what)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 3) or min(array.shape[:2]) < 1:
        raise ImageError(f"{what}: shape {array.shape}; expected (H, W), (H, W, 1) or (H, W, 3)")
    if array.shape[2] != channels:
        if channels == 3:
            raise ImageError(f"{what}: {array.shape[2]} channel(s) given, the template tracks colour and "
                             f"needs RGB (H, W, 3)")
        array = luma(array)[:, :, None]
    return array


def luma(rgb: np.ndarray) -> np.ndarray:
    """BT.601 luma (h, w) uint8 of a uint8 RGB array (h, w, 3), as ``cv2.cvtColor(COLOR_RGB2GRAY)`` makes it.

    In image_kernels' one compiled pass once it is warmed up (OpenCV's bytes for less,
    bench/results/resize.md), else OpenCV's own call.
    """
    if not rgb.flags.c_contiguous:
        rgb = np.ascontiguousarray(rgb)
    if image_kernels.ready():
        gray = np.empty(rgb.shape[:2], np.uint8)
        image_kernels.luma(rgb, gray)
        return gray
    import cv2

    return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)


def to_gray(image: object, what: str = "image") -> np.ndarray:
    """``image``'s grey levels (h, w) uint8: a uint8 RGB array's :func:`luma` at once (a camera frame passes
    every check of match_channels, which cost about what a small frame's luma does), anything else as
    :func:`match_channels` makes it for one channel."""
    if (type(image) is np.ndarray and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
            and image.shape[0] and image.shape[1]):
        return luma(image)
    return match_channels(image, 1, what)[:, :, 0]


def fit_image(image: object, height: int, width: int, channels: int, resize: bool = True,
              what: str = "image") -> np.ndarray:
    """``image`` as a contiguous uint8 (height, width, channels) array.

    The channels as :func:`match_channels` makes them; a wrong size is resized when ``resize`` is true,
    else refused.
    """
    if type(image) is np.ndarray and image.ndim == 3 and image.dtype == np.uint8 \
            and image.shape[0] == height and image.shape[1] == width:
        # a camera frame at the template's size (every frame of a node whose camera gives it): what the
        # general path below returns, without its checks
        if image.shape[2] == channels and image.flags.c_contiguous:
            return image
        if channels == 1 and image.shape[2] == 3:
            return luma(image).reshape(height, width, 1)
    array = match_channels(image, channels, what)
    if array.shape[:2] != (height, width):
        if not resize:
            raise ImageError(f"{what}: {array.shape[1]}x{array.shape[0]} given, the template takes "
                             f"{width}x{height} (resizing is off)")
        shrink = array.shape[0] >= height and array.shape[1] >= width
        # a camera-size frame: OpenCV's INTER_AREA bytes in one compiled pass (None: OpenCV's own call)
        resized = resize_kernels.shrink(array, height, width) if shrink else None
        if resized is None:
            import cv2

            resized = cv2.resize(np.ascontiguousarray(array), (width, height),
                                 interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
        array = resized.reshape(height, width, channels)
    return np.ascontiguousarray(array)
