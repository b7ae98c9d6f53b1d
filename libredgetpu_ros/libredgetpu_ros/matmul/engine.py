"""MatMulEngine: ``y = W x (+ b)`` on a compiled Dense(N) template whose weights can be swapped at runtime.

New float weights are quantized with the template's per-row scales, laid out as the DarwiNN parameter blob
in NumPy (no compiler), and published through ``reparam.ParameterStore`` (the one re-parameterisation
mechanism, shared with the robotics modules' colour / template swaps): one reference assignment of an
immutable version after the runner uploaded it; readers take one snapshot per call, so every result comes
from exactly one weight version.
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.backends import choose
from libredgetpu_ros.errors import BackendError, ConfigError, InputError, WeightsError
from libredgetpu_ros.matmul import fastpath
from libredgetpu_ros.matmul.blob import build_blob
from libredgetpu_ros.matmul.fastpath import quantize_to_blob
from libredgetpu_ros.matmul.quantize import (
    INT8_MAX,
    INT8_MIN,
    QuantizedWeights,
    as_real_array,
    quantize_rows,
    validate_bias,
    validate_matrix,
)
from libredgetpu_ros.matmul.runners import Runner, open_runner, runner_factory
from libredgetpu_ros.matmul.template import DenseTemplate, load_template
from libredgetpu_ros.matmul.twin import (
    DenseQuantization,
    TwinRunner,
    dequantize,
    exact_float_dtype,
    quantize_input,
)
from libredgetpu_ros.reparam import ParameterStore

log = logging.getLogger(__name__)

# "auto" (resolved by backends.choose: the Edge TPU when one is attached and opens, else "cpu") or a runner
# name of matmul/runners.py: "cpu", "edgetpu", and what the families declare ("tpulang" from sophgo/).
Backend = str
# Output rounding: half an output LSB, plus float32 rounding of acc * M (relative 3 * 2**-24 on at most
# 256 LSB of range, i.e. < 1e-4 LSB), rounded up.
OUTPUT_ROUNDING_LSB = 0.501


@dataclass(frozen=True)
class SwapReport:
    """What one ``set_weights`` call did; errors are raised, so a report always describes valid weights."""

    version: int  # the version now active (unchanged for a dry run)
    accepted: bool  # True when the new weights were published
    dry_run: bool
    clipped_count: int
    max_quantization_error: float  # over entries that were not clipped
    max_clip_error: float
    timings_ms: dict[str, float]  # validate, quantize, blob, swap, total


@dataclass(frozen=True, eq=False)
class _State:
    """What the engine keeps with one parameter version (the ParameterSet's payload)."""

    weights: np.ndarray  # int8 (rows, cols), read-only
    bias: np.ndarray | None  # float32 (rows,), read-only
    row_error: np.ndarray  # float64 (rows,): max |W - dequantized W| per row
    # Float copies of ``weights`` for the CPU twin and the error bound, filled on first use (a race just
    # computes one twice).
    cache: dict[str, np.ndarray] = field(default_factory=dict)

    def dense_float(self, input_zero_point: int) -> np.ndarray:
        """``weights`` as the float type whose BLAS sums them exactly (float32 up to 1024 columns)."""
        dense = self.cache.get("float")
        if dense is None:
            dense = self.weights.astype(exact_float_dtype(self.weights.shape[1], input_zero_point))
            self.cache["float"] = dense
        return dense

    def abs_weights(self, scales: np.ndarray) -> np.ndarray:
        """|dequantized weights| (float64), for :meth:`MatMulEngine.error_bound`."""
        w_abs = self.cache.get("abs")
        if w_abs is None:
            w_abs = np.abs(self.weights.astype(np.float64)) * scales[:, None].astype(np.float64)
            self.cache["abs"] = w_abs
        return w_abs


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _ms(start: float, end: float) -> float:
    return (end - start) * 1e3


class MatMulEngine:
    """Runtime weight-swapping ``y = W x + b`` on a Dense(N) template (Edge TPU or its CPU twin)."""

    def __init__(self, template: DenseTemplate, backend: Backend = "auto", device: Any = None,
                 rate_hz: float = 0.0, stream: str = "") -> None:
        """``backend``: "auto" or a runner name (``matmul/runners.py``), resolved by ``backends.choose`` as
        every accelerator runner is; ``device``: the Edge TPU selector or shared device (what a family's
        runner makes of it is the family's); ``rate_hz``: the engine's weight on an Edge TPU shared with
        other users of the process (``edgetpu/broker.py``; the nodes' ``device_share_hz``; 0: unset,
        ``broker.Stream.weight``) and ``stream`` its stream's name there (its user's, e.g. a node's; "":
        ``matmul dense_N``)."""
        if not isinstance(backend, str):
            raise ConfigError(f"backend must be a runner name, got {backend!r}")
        if backend != "auto":
            runner_factory(backend)  # ConfigError naming the known runners, before any device is opened
        self.template = template
        self.quantization: DenseQuantization = template.quant
        self._multipliers = template.quant.multipliers()
        # numba imported and the kernels compiled or loaded from the cache folder now, when the engine opens:
        # the first set_weights / matmul costs what the next ones cost (once per process).
        fastpath.warm_up()
        # The CPU twin's compiled path (numba, float32 sums exact for this shape: twin.exact_float_dtype).
        self._twin_kernel = fastpath.available() and exact_float_dtype(
            template.cols, template.quant.input_zero_point) is np.float32
        self._scales = template.quant.weight_scales.astype(np.float32)
        blob = _read_only(build_blob(template.weights, template.overhead))
        # The one re-parameterisation mechanism (reparam/): versions of the blob + this engine's payload.
        initial = _State(template.weights, None, np.zeros(template.rows))
        self._store = ParameterStore({"pc": blob}, payload=initial)
        opened: list[str] = []

        def open_named(name: str) -> Runner:
            runner = open_runner(name, template, device, rate_hz, stream)
            opened.append(name)
            return runner

        runner = choose(backend, device, open_named, f"MatMul {template.name}", log)
        self.backend: str = opened[-1]  # the runner that runs: "cpu", "edgetpu", "tpulang", ...
        self._choice: str = runner.choice  # type: ignore[attr-defined]  (set by choose)
        self._fallback: str = runner.fallback  # type: ignore[attr-defined]
        # The runner is a target of the store: it stages (uploads) every version before it is published.
        self._runner: Runner | None = runner
        self._twin = isinstance(runner, TwinRunner)  # the integer twin: matmul may fuse it (fastpath)
        try:
            runner.stage(self._store.current)
            self._store.add_target(runner)
        except BaseException:
            runner.close()
            raise
        # One full-size pass of each hot path, published nowhere: its buffers are the size of the real ones,
        # so the allocator's first large allocations (page faults) happen here, not in the first swap.
        self.set_weights(np.zeros((template.rows, template.cols), np.float32), dry_run=True)
        if self._twin:
            self.matmul(np.zeros(template.cols, np.float32))

    @classmethod
    def from_template(cls, template: int | str | Path, backend: Backend = "auto", device: Any = None,
                      templates_dir: Path | None = None, rate_hz: float = 0.0,
                      stream: str = "") -> MatMulEngine:
        """Load ``dense_N`` (an int N, a name or a path to one of its files) and open the backend."""
        return cls(load_template(template, templates_dir), backend=backend, device=device, rate_hz=rate_hz,
                   stream=stream)

    # -- shape and state ------------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return self.template.rows

    @property
    def cols(self) -> int:
        return self.template.cols

    @property
    def version(self) -> int:
        return self._store.version

    @property
    def choice(self) -> str:
        """Why ``backends.choose`` picked the runner ("auto: no Edge TPU attached ...", "cpu (requested)")."""
        return self._choice

    @property
    def fallback(self) -> str:
        """The same text when ``auto`` settled for the CPU, else ""."""
        return self._fallback

    def shared_status(self) -> dict[str, Any]:
        """The runner's stream on a shared Edge TPU (``edgetpu/broker.py``: name, ``rate_hz``, served,
        latency, faults; the device's users), {} for a runner on no shared device."""
        status = getattr(self._runner, "shared_status", None)
        return status() if callable(status) else {}

    def weight_range(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-row (min, max) representable weights: ``-128 * s_r`` and ``127 * s_r``."""
        return INT8_MIN * self._scales, INT8_MAX * self._scales

    def get_weights(self) -> tuple[np.ndarray, np.ndarray | None, int]:
        """(dequantized float32 W, bias or None, version), all from one snapshot."""
        params = self._store.current
        state = params.payload
        weights = state.weights.astype(np.float32) * self._scales[:, None]
        return weights, None if state.bias is None else state.bias.copy(), params.version

    def current_blob(self) -> tuple[np.ndarray, int]:
        """(read-only parameter blob, version) of the active weights."""
        params = self._store.current
        return params.blob("pc"), params.version

    # -- swapping --------------------------------------------------------------------------------------
    def set_weights(self, weights: object, bias: object | None = None, dry_run: bool = False,
                    guard: AbstractContextManager[Any] | None = None) -> SwapReport:
        """Quantize float ``weights`` (rows, cols) with the template's per-row scales and swap them in.

        Raises WeightsError (and keeps the previous weights active) on a wrong shape or dtype, NaN/inf or a
        bad bias. Entries outside :meth:`weight_range` are clipped and counted in the report. ``guard``:
        entered around the publish alone (the runner's staging), never around validation, quantization or
        the blob, and not at all for a dry run: a caller's lock against its own calls in flight (the control
        node's step lock); what it raises is raised, nothing published.
        """
        t0 = time.perf_counter()
        # One compiled pass for finite, unclipped float32/float64 matrices (bit-identical; its timings
        # show it as "quantize", validation and blob included); None -> the NumPy path below.
        fast = quantize_to_blob(weights, self._scales, self.template.overhead, self.cols)
        if fast is not None:
            t1 = time.perf_counter()
            bias32 = validate_bias(bias, self.rows)
            return self._publish(fast[0], bias32, dry_run, t0, t0, t1, blob=fast[1], guard=guard)
        w32 = validate_matrix(weights, self.rows, self.cols)
        bias32 = validate_bias(bias, self.rows)
        t1 = time.perf_counter()
        quantized = quantize_rows(w32, self._scales)
        t2 = time.perf_counter()
        return self._publish(quantized, bias32, dry_run, t0, t1, t2, guard=guard)

    def set_weights_raw(self, weights: object, bias: object | None = None, dry_run: bool = False,
                        guard: AbstractContextManager[Any] | None = None) -> SwapReport:
        """Swap in int8 weights (rows, cols) as they are (real value ``q * s_r``); no quantization error.
        ``guard``: as for :meth:`set_weights`."""
        t0 = time.perf_counter()
        array = as_real_array(weights, "raw weights")
        if array.shape != (self.rows, self.cols):
            raise WeightsError(f"raw weights have shape {array.shape}, this template needs "
                               f"({self.rows}, {self.cols})")
        if array.dtype != np.int8:
            if array.dtype.kind not in "iu" or array.min() < INT8_MIN or array.max() > INT8_MAX:
                raise WeightsError(f"raw weights must be int8 (or integers within [-128, 127]), got "
                                   f"{array.dtype}")
            array = array.astype(np.int8)
        bias32 = validate_bias(bias, self.rows)
        t1 = time.perf_counter()
        quantized = QuantizedWeights(np.array(array, dtype=np.int8), 0, 0.0, 0.0, np.zeros(self.rows))
        return self._publish(quantized, bias32, dry_run, t0, t1, time.perf_counter(), guard=guard)

    def _publish(self, quantized: QuantizedWeights, bias: np.ndarray | None, dry_run: bool,
                 t0: float, t1: float, t2: float, blob: np.ndarray | None = None,
                 guard: AbstractContextManager[Any] | None = None) -> SwapReport:
        """Publish (inside ``guard`` when given: its wait counts in the "swap" timing); ``blob`` is the
        values' parameter blob when the fused fast path already built it."""
        values = _read_only(quantized.values)
        blob = _read_only(build_blob(values, self.template.overhead) if blob is None else blob)
        t3 = time.perf_counter()
        if dry_run:
            version = self._store.version
        else:  # a failed upload raises inside publish, before the new version is visible
            payload = _State(values, bias, quantized.row_error)
            with nullcontext() if guard is None else guard:
                version = self._store.publish(blobs={"pc": blob}, payload=payload).version
        t4 = time.perf_counter()
        timings = {"validate": _ms(t0, t1), "quantize": _ms(t1, t2), "blob": _ms(t2, t3), "swap": _ms(t3, t4),
                   "total": _ms(t0, t4)}
        return SwapReport(version, not dry_run, dry_run, quantized.clipped_count,
                          quantized.max_quantization_error, quantized.max_clip_error, timings)

    # -- inference -------------------------------------------------------------------------------------
    def _inputs(self, x: object) -> tuple[np.ndarray, bool]:
        array = np.asarray(x)
        if array.dtype.kind not in "fiu":
            raise InputError(f"matmul input has dtype {array.dtype}; expected a real numeric array")
        single = array.ndim == 1
        batch = array[None, :] if single else array
        if batch.ndim != 2 or batch.shape[1] != self.cols:
            raise InputError(f"matmul input has shape {array.shape}; expected ({self.cols},) or "
                             f"(k, {self.cols}) (one input vector per row)")
        if not np.isfinite(batch).all():
            raise InputError("matmul input contains NaN/inf")
        return batch, single

    def matmul_versioned(self, x: object) -> tuple[np.ndarray, int]:
        """``(W x + b, version)`` for x of shape (cols,), or a batch (k, cols) -> (k, rows)."""
        batch, single = self._inputs(x)
        params = self._store.current  # the one snapshot this call uses
        state = params.payload
        quant = self.quantization
        y = None
        if self._twin and self._twin_kernel:  # quantize + Dense + dequantize in one compiled call
            y = fastpath.twin_matmul(batch, state.weights, quant.input_scale, quant.input_zero_point,
                                     self._multipliers, quant.output_zero_point, quant.output_scale)
        if y is None:
            runner = self._runner
            if runner is None:
                raise BackendError(f"MatMulEngine {self.template.name}: matmul after close()")
            yq = runner.run(quantize_input(batch, quant), params)
            y = dequantize(yq, quant.output_scale, quant.output_zero_point)
        if state.bias is not None:
            y += state.bias
        return (y[0] if single else y), params.version

    @property
    def stages_weights(self) -> bool:
        """True when a publish stages the weights on the runner (an accelerator's upload, which on one
        device waits for the call in flight; a family's runner that builds its copy); False for the integer
        twin (``TwinRunner``, compiled kernel or not): its stage is a no-op, a swap never waits for a call."""
        return not self._twin

    def twin_weights(self) -> np.ndarray | None:
        """The active int8 weights when this engine runs the compiled CPU twin (``fastpath.twin_kernel``
        gives the same results as :meth:`matmul` from them), else None. For callers that fuse the twin into
        their own compiled step (``robotics.reservoir``)."""
        if not self._twin or not self._twin_kernel:
            return None
        return self._store.current.payload.weights

    def matmul(self, x: object) -> np.ndarray:
        """``W x + b`` for x of shape (cols,), or a batch (k, cols) -> (k, rows)."""
        return self.matmul_versioned(x)[0]

    def error_bound(self, x: object) -> np.ndarray:
        """Bound on ``|matmul(x) - (W x + b)|`` for the float W last given to ``set_weights``, per output.

        ``e_r * sum|x| + sum_c |Wq[r, c]| * |x_c - xq_c| + 0.501 * s_out``: the weight quantization error
        (e_r = max error of row r, clipping included) times the inputs, the quantized weights times the input
        quantization error (clipping included), and the output rounding. Valid while the output does not
        saturate (|y| within :attr:`quantization` ``.output_range()``).
        """
        batch, single = self._inputs(x)
        state = self._store.current.payload
        quant = self.quantization
        x_hat = dequantize(quantize_input(batch, quant), quant.input_scale, quant.input_zero_point)
        input_error = np.abs(batch.astype(np.float64) - x_hat)
        w_abs = state.abs_weights(self._scales)
        bound = (np.abs(batch).sum(axis=1, dtype=np.float64)[:, None] * state.row_error[None, :]
                 + input_error @ w_abs.T + OUTPUT_ROUNDING_LSB * quant.output_scale)
        return bound[0] if single else bound

    def close(self) -> None:
        """Release the runner (its device stream); the integer twin holds nothing and keeps working."""
        if self._runner is not None and not self._twin:
            self._runner.close()
            self._runner = None

    def __enter__(self) -> MatMulEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
