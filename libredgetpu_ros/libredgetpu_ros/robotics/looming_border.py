"""The looming template's border response, removed on the CPU (the ``scale`` TTC mode's zones and tau).

The template runs Sobel x / y with SAME padding on the int8 input, whose zero point makes the padding real
0: a frame's own brightness reads as an edge along its border. Its 21 x 21 average pool (VALID, stride 21)
covers rows and columns 0..62 of 64, so the response of row 0 and column 0 lands in the top and left zones
(a uniform grey frame lights them: 3-5 output levels at grey 128) while row and column 63 are dropped.

:class:`BorderCorrection` recomputes, for the 125 pooled pixels whose 3 x 3 neighbourhood reaches the
padding (row 0 and column 0 inside the pooled area; the 128 x 128 template: 253 of them), the energy the
device computes there (the int8 Sobel, its quantization, the squares and their sum, each step on the model's
own scales, read from the twin) once with the padding the device uses and once with the border pixels
repeated, and subtracts the difference, pooled like the device, from each zone. A uniform frame then has
zones of 0 (within half an output level, the device's own rounding of the pool), and the interior of any
frame is unchanged. Cost: one compiled loop over the ring pixels (robotics/looming_kernels.py; the NumPy
operations here without numba), bench/results/robotics_frames.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from libredgetpu_ros.backends.base import tensor_spec
from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.robotics import looming_kernels


class BorderCorrection:
    """Per-zone correction of one looming template (see the module docstring)."""

    def __init__(self, template: Any, zones_per_side: int, kernels: bool = True) -> None:
        twin = template.twin
        ops = list(twin.operators)
        convs = [op for op in ops if op.opcode_name == "CONV_2D"]
        muls = [op for op in ops if op.opcode_name == "MUL"]
        adds = [op for op in ops if op.opcode_name == "ADD"]
        pools = [op for op in ops if op.opcode_name == "AVERAGE_POOL_2D"]
        if len(convs) != 2 or len(muls) != 2 or len(adds) != 1 or len(pools) != 1:
            raise ModelFormatError(f"{template.twin_path}: not the looming graph (2 CONV_2D, 2 MUL, ADD, "
                                   f"AVERAGE_POOL_2D) the border correction models")
        self.height, self.width = template.image_shape[:2]
        self._kernels, self._conv_q, self._square_q = [], [], []
        for conv, mul in zip(convs, muls, strict=True):
            weights = template.conv_weights(convs.index(conv))
            self._kernels.append(twin.buffer_data(weights).reshape(3, 3).astype(np.float64)
                                 * template.weight_scale(weights))
            out = tensor_spec(twin.tensors[conv.outputs[0]])
            self._conv_q.append((float(out.scale), int(out.zero_point)))
            sq = tensor_spec(twin.tensors[mul.outputs[0]])
            self._square_q.append((float(sq.scale), int(sq.zero_point)))
        total = tensor_spec(twin.tensors[adds[0].outputs[0]])
        self._sum_q = (float(total.scale), int(total.zero_point))
        options = pools[0].builtin_options or {}
        self.pool = int(options.get("filter_height", self.height // zones_per_side))
        self.zones_per_side = zones_per_side
        covered = self.pool * zones_per_side
        # the pooled pixels whose neighbourhood reaches the padding: row 0 and column 0 (the last row and
        # column reach it too, but the pool stops short of them when 3 x pool < size)
        ring = {(0, c) for c in range(covered)} | {(r, 0) for r in range(covered)}
        if covered >= self.height:
            ring |= {(self.height - 1, c) for c in range(covered)}
        if covered >= self.width:
            ring |= {(r, self.width - 1) for r in range(covered)}
        rows, cols = np.array(sorted(ring)).T
        self._zone = (rows // self.pool) * zones_per_side + cols // self.pool
        # flat indices of each ring pixel's 3 x 3 neighbourhood in the 1-pixel padded frame: one gather
        taps = [(dy, dx) for dy in range(3) for dx in range(3)]
        self._gather = np.stack([(rows + dy) * (self.width + 2) + cols + dx for dy, dx in taps], axis=1)
        self._stacked = np.stack([k.reshape(-1) for k in self._kernels], axis=1)  # (9, 2)
        # the compiled loop over the ring pixels (robotics/looming_kernels.py), compiled or loaded now; per
        # ring pixel and tap its flat index in the frame with the border repeated and each branch's weight
        # with the zero padding (0 where the tap leaves the frame)
        self.kernels = kernels and looming_kernels.warm_up()
        ys = rows[:, None] + np.array([dy - 1 for dy, _ in taps])
        xs = cols[:, None] + np.array([dx - 1 for _, dx in taps])
        inside = (ys >= 0) & (ys < self.height) & (xs >= 0) & (xs < self.width)
        flat = np.clip(ys, 0, self.height - 1) * self.width + np.clip(xs, 0, self.width - 1)
        self._index = flat.astype(np.uint32)  # unsigned: no negative-index check in the kernel
        self._zero_taps = np.stack([inside * self._stacked[:, b] for b in range(2)], axis=2)
        self._quant = np.array([*self._conv_q, *self._square_q, self._sum_q], float)
        self._out_zero = np.float32(template.output.zero_point)
        self._out_scale = np.float32(template.output.scale)

    def _energy(self, padded: np.ndarray) -> np.ndarray:
        """The device's quantized energy (real units) at the ring pixels of a 1-pixel padded frame."""
        grads = padded.reshape(-1)[self._gather].astype(np.float64) @ self._stacked  # (ring, 2): Sobel x, y
        total = 0.0
        for i, ((c_scale, c_zero), (s_scale, s_zero)) in enumerate(zip(self._conv_q, self._square_q,
                                                                        strict=True)):
            gq = np.clip(np.rint(grads[:, i] / c_scale) + c_zero, -128, 127)
            g_real = (gq - c_zero) * c_scale
            sq = np.clip(np.rint(g_real * g_real / s_scale) + s_zero, -128, 127)
            total = total + (sq - s_zero) * s_scale
        scale, zero = self._sum_q
        return (np.clip(np.rint(total / scale) + zero, -128, 127) - zero) * scale

    def correction(self, fitted: np.ndarray) -> np.ndarray:
        """(zones, zones) float32: what the padding adds to each zone of this frame (subtract it)."""
        import cv2

        image = np.ascontiguousarray(np.asarray(fitted, dtype=np.float32).reshape(self.height, self.width))
        zero = cv2.copyMakeBorder(image, 1, 1, 1, 1, cv2.BORDER_CONSTANT, value=0.0)
        edge = cv2.copyMakeBorder(image, 1, 1, 1, 1, cv2.BORDER_REPLICATE)
        diff = self._energy(zero) - self._energy(edge)
        per_zone = np.bincount(self._zone, weights=diff, minlength=self.zones_per_side ** 2)
        side = self.zones_per_side
        return (per_zone / (self.pool * self.pool)).reshape(side, side).astype(np.float32)

    def apply(self, zones: np.ndarray, fitted: np.ndarray) -> np.ndarray:
        """``zones`` (dequantized) with this frame's correction taken out, floored at 0: :meth:`zones`'s
        NumPy path (without numba, or a frame that is not C-contiguous uint8), the reference its compiled
        call is tested against."""
        return np.maximum(zones - self.correction(fitted), np.float32(0.0))

    def zones(self, raw: np.ndarray, fitted: np.ndarray) -> np.ndarray:
        """The corrected zones (float32, zones x zones) of the device's raw output for the frame ``fitted``
        (the template's uint8 input): dequantized, corrected and floored in one compiled call."""
        image = np.asarray(fitted)
        if not (self.kernels and image.dtype == np.uint8 and image.flags.c_contiguous):
            return self.apply(dequantize(raw, self._out_zero, self._out_scale, self.zones_per_side), fitted)
        out = np.empty((self.zones_per_side, self.zones_per_side), np.float32)
        looming_kernels.border_correction(image.reshape(-1), self._index, self._zero_taps, self._zone,
                                          self._stacked, self._quant, self.pool, np.asarray(raw).reshape(-1),
                                          self._out_zero, self._out_scale, out.reshape(-1))
        return out


def dequantize(raw: np.ndarray, zero: np.float32, scale: np.float32, side: int) -> np.ndarray:
    """The looming template's uint8 zones in real units (LibrEdgeTPU's ``dequantize``: (q - zp) * scale in
    float32), (side, side)."""
    return ((np.asarray(raw).astype(np.float32) - zero) * scale).reshape(side, side)
