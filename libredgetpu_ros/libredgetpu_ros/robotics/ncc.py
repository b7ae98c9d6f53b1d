"""Normalised cross-correlation around the pattern template's correlation (CPU side of robotics/pattern.py).

Raw correlation of a zero-mean patch with the search image grows with the local contrast of the image: a
bright, textured region outscores the patch itself. Normalised cross-correlation divides by the local
energy of the image under the kernel,

    ncc(p) = sum_k t'(k) (I(p + k) - mu(p)) / (|t'| * sqrt(sum_k (I(p + k) - mu(p))^2)),    t' = t - mean(t)

which only the CPU can do here, since the template ends in ``SOFTMAX -> soft argmax`` (the device returns a
position, not the correlation map). Two steps, both O(pixels):

1. :func:`normalize_search`: the search image is locally normalised before it is sent, each pixel made
   ``128 + gain * (I - mu) / max(sigma, floor)`` with ``mu``, ``sigma`` the mean and standard deviation of
   the kernel-sized box around it (two box filters: integral images, cv2.boxFilter; ``floor`` a quarter of
   the median sigma, so flat areas are not blown up into noise), and the patch the same way (cut from the
   normalised frame when it comes from one). Under a window where ``sigma`` is nearly constant the device's
   correlation of the two is ``|t'| |I'| ncc(p)``, so its argmax (the template's softmax over the int8
   correlation is nearly hard: one output step is e^16 at 64 x 64 / 8 x 8) is the NCC peak wherever the
   contrast varies slowly over one kernel;
2. :func:`refine`: the exact NCC (the formula above; OpenCV's TM_CCOEFF_NORMED on a small region) of the
   device's own int8 filter against the normalised image on the ``(2 r + 1)^2`` positions around the
   device's answer, the best one with a
   parabola fit per axis (sub-pixel) and its score in [-1, 1]. The score is what ``valid`` is decided on;
   a device answer more than ``r`` off shows as a low score rather than a wrong position reported as good.
   The pattern tracker runs the device a second time with the first answer's neighbourhood blanked and
   keeps the better-scoring of the two (robotics/pattern.py).

:func:`score` is the same NCC for one pair of equal-size images (robotics/flow_refine.py's match).

Cost at 64 x 64 with an 8 x 8 kernel: two box filters and a multiply-add for (1), 49 dot products of 64
values for (2) (bench/bench_robotics_validity.py).
"""

from __future__ import annotations

import numpy as np

NORMAL_GAIN = 40.0  # grey levels per local standard deviation (+-3.2 sigma fits in uint8 around 128)
MIN_SIGMA = 2.0  # grey levels: flat windows are not amplified into noise
SIGMA_FLOOR = 0.25  # ... nor windows far flatter than the image's typical window (share of the median sigma)


def _as_float(image: np.ndarray) -> np.ndarray:
    array = np.asarray(image, dtype=np.float32)
    return array[:, :, None] if array.ndim == 2 else array


def local_stats(image: np.ndarray, kh: int, kw: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, standard deviation) of every kh x kw box centred on each pixel, per channel (float32,
    (H, W, C)); the box is reflected at the borders."""
    import cv2

    img = _as_float(image)
    mean = cv2.boxFilter(img, -1, (kw, kh), normalize=True, borderType=cv2.BORDER_REFLECT)
    square = cv2.boxFilter(img * img, -1, (kw, kh), normalize=True, borderType=cv2.BORDER_REFLECT)
    mean = mean.reshape(img.shape)
    var = np.maximum(square.reshape(img.shape) - mean * mean, 0.0)
    return mean, np.sqrt(var)


def normalize_search(image: np.ndarray, kh: int, kw: int, gain: float = NORMAL_GAIN) -> np.ndarray:
    """The search image (H, W, C) uint8 locally normalised for the device (see the module docstring); a
    patch alone is normalised the same way (its own boxes, reflected at its borders), a patch cut from a
    frame is best cut from the frame's normalised image (the same boxes the search will use)."""
    img = _as_float(image)
    mean, std = local_stats(img, kh, kw)
    floor = max(MIN_SIGMA, SIGMA_FLOOR * float(np.median(std)))
    out = 128.0 + gain * (img - mean) / np.maximum(std, floor)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def ncc_grid(image: np.ndarray, patch: np.ndarray, x0: int, y0: int,
             radius: int) -> tuple[np.ndarray, int, int]:
    """(scores (rows, cols), first x, first y): exact zero-mean NCC of ``patch`` at every top-left position
    within ``radius`` of (x0, y0) that keeps the patch inside the image (OpenCV's TM_CCOEFF_NORMED on the
    small region: per-channel means removed, channels summed; a flat window scores 0 or -1)."""
    import cv2

    img, tpl = _as_float(image), _as_float(patch)
    kh, kw = tpl.shape[:2]
    h, w = img.shape[:2]
    xa, xb = max(0, x0 - radius), min(w - kw, x0 + radius)
    ya, yb = max(0, y0 - radius), min(h - kh, y0 + radius)
    if xa > xb or ya > yb:
        return np.full((1, 1), -1.0), min(max(x0, 0), w - kw), min(max(y0, 0), h - kh)
    region = np.ascontiguousarray(img[ya:yb + kh, xa:xb + kw])
    scores = cv2.matchTemplate(region, np.ascontiguousarray(tpl), cv2.TM_CCOEFF_NORMED).astype(np.float64)
    scores[~np.isfinite(scores) | (scores > 1.0 + 1e-3)] = -1.0  # a flat window has no correlation
    return scores, xa, ya


def score(a: np.ndarray, b: np.ndarray) -> float:
    """The zero-mean NCC of two same-size one-channel images over all their pixels: the value
    :func:`ncc_grid` gives at one position, computed directly (OpenCV's means and standard deviations,
    float64 sums; one window is too small for matchTemplate's setup to pay); 0 when either image is flat.
    Flow's refinement scores its match with it."""
    import cv2

    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    mean_a, std_a = cv2.meanStdDev(a)
    mean_b, std_b = cv2.meanStdDev(b)
    sa, sb = float(std_a[0, 0]), float(std_b[0, 0])
    if sa * sa <= 1e-6 or sb * sb <= 1e-6:
        return 0.0
    cross = float(cv2.mean(cv2.multiply(a, b))[0])
    return (cross - float(mean_a[0, 0]) * float(mean_b[0, 0])) / (sa * sb)


def _parabola(minus: float, centre: float, plus: float) -> float:
    denom = minus - 2.0 * centre + plus
    return 0.0 if denom >= 0 else float(np.clip(0.5 * (minus - plus) / denom, -0.5, 0.5))


def refine(image: np.ndarray, patch: np.ndarray, x: float, y: float, radius: int = 3
           ) -> tuple[float, float, float]:
    """(top-left x, top-left y, score): the best exact-NCC position within ``radius`` of (x, y), sub-pixel
    by a parabola per axis through the neighbouring scores."""
    scores, xa, ya = ncc_grid(image, patch, round(x), round(y), radius)
    row, col = np.unravel_index(int(np.argmax(scores)), scores.shape)
    best = float(scores[row, col])
    dx = _parabola(scores[row, col - 1], best, scores[row, col + 1]) if 0 < col < scores.shape[1] - 1 else 0.0
    dy = _parabola(scores[row - 1, col], best, scores[row + 1, col]) if 0 < row < scores.shape[0] - 1 else 0.0
    return xa + col + dx, ya + row + dy, best
