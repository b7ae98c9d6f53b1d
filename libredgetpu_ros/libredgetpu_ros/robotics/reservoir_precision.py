"""``W x`` past the int8 engine's output resolution: dithered passes intersected, plus a low-part pass.

One pass of a Dense(N) template rounds ``W x`` to its uint8 output grid (``s_out`` ~ 0.02 on the shipped
templates, about 1/100 of the typical ``|W x|``) and the state ``x`` to its uint8 input grid (``s_in`` ~
1/128). In an echo state network both roundings act as noise injected at every step; measured on Mackey-Glass
and Lorenz-x, the output rounding alone makes the one-step NRMSE 6-12x that of a float64 network with the same
weights, the input rounding 2.5x (docs/robotics.md, Reservoir precision).

Input: the state, scaled by ``sigma`` to leave head-room, is split into ``hi`` = its input-grid value and
``lo`` = the remainder times 128, each an input the engine takes whole; ``W hi + W lo / 128`` then carries
the state to 1/128 of an input step, and the low pass's output rounding shrinks by 128 with it.

Output: ``W hi`` is sent ``K`` times, pass ``k`` as ``hi + d_k`` with ``d_k`` a fixed vector of whole input
steps (``d_0`` = 0). The engine's accumulator is exact, so pass ``k``'s offset ``W_q d_k`` is known exactly
(computed once from the int8 weights), and each pass says ``W_q hi`` lies within half an output step of
``out_k - W_q d_k``. The offsets fall at different fractions of an output step, so the ``K`` intervals'
intersection is much narrower than one step (expected width ~ 2 / (K + 1) steps); its midpoint is the
estimate and its half-width a bound. A pass whose input or output would clip is left out.

Every pass is one row of one batched engine call (one device invoke of ``K + 1`` inputs); nothing here
multiplies by ``W`` on the CPU.
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.matmul import MatMulEngine

LOW_GAIN = 128.0  # the low part is sent times this (2^7: exact in floating point)
DITHER_STEPS = 2  # dither entries in {-2..2} input steps: offsets spread over several output steps


class DitheredProduct:
    """``W x`` for states ``|x| <= state_bound`` from ``passes - 1`` dithered high passes and one low pass
    (module docstring). ``passes`` >= 3."""

    def __init__(self, engine: MatMulEngine, passes: int, seed: int, reference: np.ndarray,
                 state_bound: float = 1.0) -> None:
        """``reference``: the float matrix the engine's weights were quantized from (for the bound)."""
        if passes < 3:
            raise ConfigError(f"dithered product needs at least 3 passes (2 high, 1 low), got {passes}")
        self.engine = engine
        self.passes = int(passes)
        quant = engine.quantization
        self._s_in, self._s_out = float(quant.input_scale), float(quant.output_scale)
        lo_in, hi_in = quant.input_range()
        lo_out, hi_out = quant.output_range()
        self._in_steps = (round(lo_in / self._s_in), round(hi_in / self._s_in))  # grid ends, in steps
        self._out_ends = (lo_out + 0.5 * self._s_out, hi_out - 0.5 * self._s_out)  # clipped beyond
        limit = min(-lo_in, hi_in) - (DITHER_STEPS + 1) * self._s_in
        if limit <= 0:
            raise ConfigError("template input range too small for dithering")
        self.sigma = limit / float(state_bound)  # states scaled into the range with the dither's head-room
        weights, _, version = engine.get_weights()
        _, hi = engine.weight_range()
        scales = hi.astype(np.float64) / 127.0
        w_int = np.rint(weights.astype(np.float64) / scales[:, None])  # the engine's exact int8 weights
        rng = np.random.default_rng([seed, 0x5EED])
        k = self.passes - 1
        dither = rng.integers(-DITHER_STEPS, DITHER_STEPS + 1, size=(k, engine.cols)).astype(np.float64)
        dither[0] = 0.0
        self._dither_steps = dither
        # Exact accumulator offsets (integers < 2^31 in float64) times s_in * s_r: the output-unit offsets.
        self._offsets = (dither @ w_int.T) * (self._s_in * scales)[None, :]
        self._w_abs_rows = np.abs(w_int).sum(axis=1) * scales  # sum_c |W_q[r, c]| (for the bound)
        self._row_error = np.abs(np.asarray(reference, np.float64) - w_int * scales[:, None]).max(axis=1)
        self._version = version

    @property
    def rows_per_step(self) -> int:
        return self.passes

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(estimate of ``W x``, per-row bound on its error: the passes' and the weights' quantization) for a
        state ``x`` (N,)."""
        if self.engine.version != self._version:
            raise ConfigError("the engine's weights changed since the dither offsets were computed")
        s_in, s_out, sigma = self._s_in, self._s_out, self.sigma
        v = np.asarray(x, dtype=np.float64) * sigma
        lo_step, hi_step = self._in_steps
        hi_part = np.clip(np.rint(v / s_in), lo_step, hi_step)
        low = (v - hi_part * s_in) * LOW_GAIN
        steps = hi_part[None, :] + self._dither_steps
        usable = ((steps >= lo_step) & (steps <= hi_step)).all(axis=1)  # no input of the pass clipped
        batch = np.vstack([steps * s_in, low[None, :]])
        out = self.engine.matmul(batch).astype(np.float64)
        high, low_out = out[:-1], out[-1]
        centre = high - self._offsets
        lo_end, hi_end = self._out_ends
        lower = np.where(usable[:, None] & (high > lo_end), centre - 0.5 * s_out, -np.inf).max(axis=0)
        upper = np.where(usable[:, None] & (high < hi_end), centre + 0.5 * s_out, np.inf).min(axis=0)
        ok = np.isfinite(lower) & np.isfinite(upper) & (lower <= upper)
        estimate = np.where(ok, 0.5 * (lower + upper), high[0])
        half = np.where(ok, 0.5 * (upper - lower), 0.5 * s_out)
        # low pass: its input rounding (1/2 step of the scaled remainder) and output rounding, both / 128
        low_bound = (self._w_abs_rows * 0.5 * s_in + 0.5 * s_out) / LOW_GAIN
        estimate = (estimate + low_out / LOW_GAIN) / sigma
        weight_bound = self._row_error * float(np.abs(x).sum())
        return estimate, (half + low_bound) / sigma + weight_bound
