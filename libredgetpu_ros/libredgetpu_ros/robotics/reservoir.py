"""ReservoirComputer: an echo state network whose recurrent product ``W_res x`` runs on the MatMul engine.

Per step, with state ``x`` (N), input ``u`` (M) and leak rate ``a``::

    h  = g * engine(x)            # W_res x on the Dense(N) template (Edge TPU or its CPU twin)
    x' = (1 - a) x + a act(h + W_in u + b)           act: tanh | relu | identity
    y  = W_out [1; u; x']         # ridge readout fitted on the CPU, optionally on a second engine

``W_res`` (seeded, uniform, ``density`` of entries kept, scaled to ``spectral_radius``) is stored on the
engine as ``W_res / g`` with ``g`` the smallest power of two that brings every entry inside the template's
per-row int8 range (``g`` = 1 for dense reservoirs on the shipped templates), so no entry is clipped and ``/
g``, ``* g`` are exact. The engine's error model then bounds one step: from the same ``x``, the quantized step
differs from the float64 step of the same equations by at most ``a * g * engine.error_bound(x)`` per unit
(tanh, relu and identity are 1-Lipschitz): :meth:`ReservoirComputer.step_bound`.

``passes`` > 1 (``reservoir_precision.DitheredProduct``) sends each step's state as ``passes`` rows of one
engine call: a low part that carries the state below the input grid, and dithered copies of the high part
whose known offsets let the CPU intersect the output roundings. It brings the one-step NRMSE near the float64
network's at ``passes`` times the engine work (docs/robotics.md, Reservoir precision).

Series are checked before use: NaN/inf, magnitudes above ``MAX_MAGNITUDE`` and constant targets (their
NRMSE is undefined) are refused with the column and step named.

LibrEdgeTPU's ``reservoir.py`` (public) was read for the facts; the readout here also sees ``[1; u]``, has a
washout, refuses ill-posed fits (keeping the previous readout) and can be saved and loaded.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros import jit
from libredgetpu_ros.atomicio import atomic_open
from libredgetpu_ros.errors import ConfigError, InputError
from libredgetpu_ros.matmul import MatMulEngine, fastpath
from libredgetpu_ros.matmul.twin import DenseQuantization
from libredgetpu_ros.npyfile import read_npz_meta
from libredgetpu_ros.robotics.reservoir_precision import DitheredProduct
from libredgetpu_ros.robotics.ridge import check_spread, nrmse, ridge_fit
from libredgetpu_ros.textdata import clip_repr

ACTIVATIONS = ("tanh", "relu", "identity")
READOUT_FORMAT = "libredgetpu_ros.reservoir_readout.v1"
MAX_READOUT_BYTES = 256 << 20
MAX_MAGNITUDE = 1e6  # inputs, targets and states beyond this are a sensor fault, not a signal
MAX_PASSES = 64
MAX_META_BYTES = 1 << 20  # the metadata JSON (a few hundred characters) as a NumPy string
CHECK_STEPS = 256  # drive steps between a fit's cancel checks


@dataclass(frozen=True)
class ReservoirConfig:
    """The reservoir's hyper-parameters; with the template size they fix ``W_res``, ``W_in`` and ``b``."""

    input_dim: int
    spectral_radius: float = 0.9
    input_scaling: float = 0.5
    bias_scaling: float = 0.1
    leak_rate: float = 1.0
    activation: str = "tanh"
    density: float = 1.0
    seed: int = 0
    ridge: float = 1e-6
    washout: int = 100
    passes: int = 1  # engine rows per step: 1 = one int8 pass; >= 3 = DitheredProduct (near float64)

    def __post_init__(self) -> None:
        checks = (
            ("input_dim", self.input_dim >= 1, "an integer >= 1"),
            ("spectral_radius", 0.0 < self.spectral_radius <= 10.0, "in (0, 10]"),
            ("input_scaling", 0.0 <= self.input_scaling <= 100.0, "in [0, 100]"),
            ("bias_scaling", 0.0 <= self.bias_scaling <= 100.0, "in [0, 100]"),
            ("leak_rate", 0.0 < self.leak_rate <= 1.0, "in (0, 1]"),
            ("activation", self.activation in ACTIVATIONS, f"one of {ACTIVATIONS}"),
            ("density", 0.0 < self.density <= 1.0, "in (0, 1]"),
            ("ridge", 0.0 <= self.ridge <= 1e6, "in [0, 1e6]"),
            ("washout", self.washout >= 0, "an integer >= 0"),
            ("passes", self.passes == 1 or 3 <= self.passes <= MAX_PASSES, f"1 or in [3, {MAX_PASSES}]"),
        )
        for name, ok, expected in checks:
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                ok = False
            if not ok:
                raise ConfigError(f"reservoir {name} must be {expected}, got {value!r}")


@dataclass(frozen=True)
class Readout:
    """``y = weights @ [1; u; x]``: weights (K, 1 + M + N) float64, fitted on ``samples`` steps."""

    weights: np.ndarray
    samples: int
    train_nrmse: float


@dataclass(frozen=True)
class FitReport:
    samples: int  # steps used after the washout
    washout: int
    train_nrmse: float  # RMSE / std of the targets, averaged over outputs
    readout_on_engine: bool


def _fused_step(x, u, w_in, bias, gain, leak, act, weights, in_scale, zp_in, multipliers, zp_out,
                out_scale, y, out):  # pragma: no cover - compiled
    """One step on the compiled CPU twin: the engine's quantize + Dense + dequantize
    (``fastpath.twin_kernel``, bit-identical to ``engine.matmul``) then ``(1 - a) x + a act(g y + b + W_in
    u)``: the NumPy step's arithmetic up to the rounding order of ``b + W_in u`` and libm's vs NumPy's tanh
    (a few ulp)."""
    twin_kernel(x.reshape((1, x.shape[0])), weights, in_scale, zp_in, multipliers, zp_out, out_scale, y)
    for r in range(x.shape[0]):
        drive = bias[r]
        for m in range(u.shape[0]):
            drive += w_in[r, m] * u[m]
        pre = gain * np.float64(y[0, r]) + drive
        if act == 0:
            pre = np.tanh(pre)
        elif act == 1:
            pre = pre if pre > 0.0 else 0.0
        out[r] = (1.0 - leak) * x[r] + leak * pre


_fused: Any = None
twin_kernel: Any = None  # fastpath's compiled twin, the global _fused_step calls once compiled


def _fused_kernel() -> Any:
    """The compiled step (numba imported and the kernel compiled or loaded now), or None without numba."""
    global _fused, twin_kernel
    if _fused is None and fastpath.available():
        kernel = fastpath.twin_kernel()
        if kernel is not None:
            twin_kernel = kernel
            _fused = jit.njit(cache=True, nogil=True, boundscheck=False)(_fused_step)
    return _fused


def _fused_call(x: np.ndarray, u: np.ndarray, w_in: np.ndarray, bias: np.ndarray, gain: float,
                leak: float, act: int, weights: np.ndarray, quant: DenseQuantization,
                multipliers: np.ndarray) -> np.ndarray:
    """One step through the compiled kernel, every scalar as the type :func:`warm_up` compiled (a leak rate
    given as ``1`` must not compile an int specialization on a robot's first state)."""
    out, y = np.empty(x.shape[0]), np.empty((1, x.shape[0]), dtype=np.float32)  # per call: fit may run too
    _fused(x, u, w_in, bias, float(gain), float(leak), int(act), weights, float(quant.input_scale),
           float(quant.input_zero_point), multipliers, int(quant.output_zero_point),
           float(quant.output_scale), y, out)
    return out


def warm_up() -> bool:
    """Compile (or load) the fused step (``jit.FAMILIES``' ``reservoir``) for the arrays a ReservoirComputer
    passes: inputs writable or read-only (the node's np.frombuffer views), read-only active weights."""
    if _fused_kernel() is None:
        return False
    n = 2
    quant = DenseQuantization(1.0, 128, 1.0, 128, np.ones(n, np.float32))
    weights = jit.read_only(np.zeros((n, n), np.int8))
    for u in (np.zeros(1), jit.read_only(np.zeros(1))):
        _fused_call(np.zeros(n), u, np.zeros((n, 1)), np.zeros(n), 1.0, 0.5, 0, weights, quant,
                    quant.multipliers())
    return True


def _activation(name: str):
    if name == "tanh":
        return np.tanh
    if name == "relu":
        return lambda v: np.maximum(v, 0.0)
    return lambda v: v


def _power_of_two_at_least(value: float) -> float:
    return 1.0 if value <= 1.0 else float(2.0 ** math.ceil(math.log2(value)))


class ReservoirComputer:
    """Echo state network on a MatMul engine (module docstring); ``step`` is for one caller at a time."""

    def __init__(self, engine: MatMulEngine, config: ReservoirConfig,
                 readout_engine: MatMulEngine | None = None) -> None:
        self.engine = engine
        self.config = config
        self.readout_engine = readout_engine
        n, m = engine.rows, config.input_dim
        if engine.rows != engine.cols:
            raise ConfigError(f"the reservoir needs a square template, got ({engine.rows}, {engine.cols})")
        rng = np.random.default_rng(config.seed)
        w = rng.uniform(-1.0, 1.0, size=(n, n))
        if config.density < 1.0:
            w *= rng.random((n, n)) < config.density
        radius = float(np.max(np.abs(np.linalg.eigvals(w))))
        if radius == 0.0:
            raise ConfigError(f"reservoir density {config.density} left W_res without eigenvalues; raise it")
        # The reservoir IS this float32 matrix (so the float64 reference and the engine share it exactly).
        self._w_res32 = (w * (config.spectral_radius / radius)).astype(np.float32)
        self.input_weights = rng.uniform(-config.input_scaling, config.input_scaling, size=(n, m))
        self.input_bias = rng.uniform(-config.bias_scaling, config.bias_scaling, size=n)
        _, hi = engine.weight_range()
        limit = hi.astype(np.float64)  # 127 * s_r, the smaller side of the symmetric range
        self.gain = _power_of_two_at_least(float(np.max(np.abs(self._w_res32) / limit[:, None])))
        engine.set_weights(self._w_res32 / np.float32(self.gain))  # exact: gain is a power of two
        self._act = _activation(config.activation)
        self._multipliers = engine.quantization.multipliers()
        self._act_code = ACTIVATIONS.index(config.activation)
        self._precise = None
        if config.passes > 1:
            # tanh states are within 1; relu/identity states beyond it clip a pass, which is then left out
            self._precise = DitheredProduct(engine, config.passes, config.seed, self._w_res32 / self.gain)
        # Compile (or load from numba's cache) the step now: the first state of a live stream must not wait.
        warm_up()
        self._advance(np.zeros(n), np.zeros(m))
        self._advance(np.zeros(n), jit.read_only(np.zeros(m)))  # the node's inputs: np.frombuffer views
        self._lock = threading.Lock()
        self._state = np.zeros(n)
        self._readout: Readout | None = None
        self._readout_gain = 1.0

    # -- shapes and state ------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.engine.rows

    @property
    def reservoir_weights(self) -> np.ndarray:
        """``W_res`` as float64 (the exact values the engine's weights are quantized from, times ``gain``)."""
        return self._w_res32.astype(np.float64)

    @property
    def readout(self) -> Readout | None:
        return self._readout

    @property
    def state(self) -> np.ndarray:
        return self._state.copy()

    def set_state(self, state: object) -> None:
        """Restore a state saved with :attr:`state` (shape (N,), finite)."""
        array = np.asarray(state, dtype=np.float64)
        if array.shape != (self.size,) or not np.isfinite(array).all():
            raise InputError(f"reservoir state must be {self.size} finite values, got shape {array.shape}")
        if np.abs(array).max() > MAX_MAGNITUDE:
            raise InputError(f"reservoir state has |value| {np.abs(array).max():.3g} > {MAX_MAGNITUDE:g}")
        self._state = array.copy()

    # -- dynamics --------------------------------------------------------------------------------------
    def _check_input(self, u: object) -> np.ndarray:
        array = np.asarray(u, dtype=np.float64)
        if array.shape != (self.config.input_dim,):
            raise InputError(f"reservoir input has shape {array.shape}; expected ({self.config.input_dim},)")
        if not np.isfinite(array).all():
            raise InputError("reservoir input contains NaN/inf")
        if np.abs(array).max(initial=0.0) > MAX_MAGNITUDE:
            raise InputError(f"reservoir input has |value| {np.abs(array).max():.3g} > {MAX_MAGNITUDE:g} "
                             f"(a sensor fault or wrong units; scale the series)")
        return array

    def _advance(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        a = self.config.leak_rate
        if self._precise is not None:
            h, _ = self._precise(x)
            pre = self.gain * h + self.input_bias + self.input_weights @ u
            return (1.0 - a) * x + a * self._act(pre)
        weights = self.engine.twin_weights() if _fused is not None else None
        if weights is not None:  # CPU twin: the whole step in one compiled call (same arithmetic)
            return _fused_call(x, u, self.input_weights, self.input_bias, self.gain, a, self._act_code,
                               weights, self.engine.quantization, self._multipliers)
        drive = self.input_bias + self.input_weights @ u
        pre = self.gain * self.engine.matmul(x).astype(np.float64) + drive
        return (1.0 - a) * x + a * self._act(pre)

    def step(self, u: object) -> np.ndarray:
        """Advance one step with input ``u`` (M,); returns the new state (N,). Bad input: InputError."""
        u = self._check_input(u)
        self._state = self._advance(self._state, u)
        return self._state.copy()

    def run(self, inputs: object, reset: bool = True) -> np.ndarray:
        """States (T, N) for inputs (T, M), from zero (``reset``) or from the current state."""
        sequence = self._check_sequence(inputs, "inputs", self.config.input_dim)
        states = self._drive(sequence, np.zeros(self.size) if reset else self._state)
        if len(states):
            self._state = states[-1].copy()
        return states

    def _drive(self, sequence: np.ndarray, x: np.ndarray,
               check: Callable[[], None] | None = None) -> np.ndarray:
        """States (T, N) from ``x`` over checked inputs, without touching the live state (``fit`` runs this
        on another thread than ``step``); ``check()`` every :data:`CHECK_STEPS` steps (it raises to stop)."""
        states = np.empty((len(sequence), self.size))
        for t, u in enumerate(sequence):
            if check is not None and t % CHECK_STEPS == 0:
                check()
            x = self._advance(x, u)
            states[t] = x
        return states

    def step_bound(self, state: object) -> np.ndarray:
        """Per-unit bound on |quantized step - float64 step| from the same ``state`` (int8 error model)."""
        x = np.asarray(state, dtype=np.float64)
        if self._precise is not None:
            return self.config.leak_rate * self.gain * self._precise(x)[1]
        return self.config.leak_rate * self.gain * self.engine.error_bound(x).astype(np.float64)

    # -- readout ---------------------------------------------------------------------------------------
    def _check_sequence(self, values: object, name: str, width: int | None) -> np.ndarray:
        try:
            array = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{name} is not a numeric array: {exc}") from exc
        if array.ndim == 1 and width in (None, 1):
            array = array[:, None]
        if array.ndim != 2 or (width is not None and array.shape[1] != width):
            want = f"(T, {width})" if width is not None else "(T, K)"
            raise InputError(f"{name} has shape {array.shape}; expected {want}")
        if not np.isfinite(array).all():
            row = int(np.argwhere(~np.isfinite(array))[0][0])
            raise InputError(f"{name} contains NaN/inf (first at step {row})")
        if array.size and np.abs(array).max() > MAX_MAGNITUDE:
            row = int(np.argwhere(np.abs(array) > MAX_MAGNITUDE)[0][0])
            raise InputError(f"{name} has |value| {np.abs(array[row]).max():.3g} > {MAX_MAGNITUDE:g} at step "
                             f"{row} (a sensor fault or wrong units; scale the series)")
        return array

    def features(self, inputs: np.ndarray, states: np.ndarray) -> np.ndarray:
        """Readout features ``[1, u, x]`` per step, (T, 1 + M + N)."""
        return np.hstack([np.ones((len(states), 1)), inputs, states])

    def fit(self, inputs: object, targets: object, washout: int | None = None,
            check: Callable[[], None] | None = None) -> FitReport:
        """Drive from zero with ``inputs`` (T, M), drop ``washout`` steps, ridge-fit ``targets`` (T, K).

        Refuses (InputError, previous readout kept) NaN/inf, mismatched lengths, or fewer samples after the
        washout than features (1 + M + N): the readout would only memorise them. ``check`` (a caller's
        cancel: it raises) is called every :data:`CHECK_STEPS` steps of the drive, between the row blocks of
        the normal equations and before the solve; whatever it raises leaves the previous readout.
        """
        u = self._check_sequence(inputs, "inputs", self.config.input_dim)
        y = self._check_sequence(targets, "targets", None)
        washout = self.config.washout if washout is None else int(washout)
        if len(y) != len(u):
            raise InputError(f"inputs have {len(u)} steps but targets {len(y)}")
        features = 1 + self.config.input_dim + self.size
        samples = len(u) - max(washout, 0)
        if washout < 0 or samples < features:
            raise InputError(f"fit needs at least {features} samples after the washout of {washout} "
                             f"(1 + inputs + reservoir units), got {max(samples, 0)} of {len(u)} steps")
        check_spread(y[washout:], "targets")
        states = self._drive(u, np.zeros(self.size), check)  # from zero; the live state is not disturbed
        target = y[washout:]
        weights, prediction = ridge_fit(
            lambda a, b: self.features(u[washout + a:washout + b], states[washout + a:washout + b]), target,
            self.config.ridge, check)
        train_error = nrmse(prediction, target)
        self._install(Readout(weights, len(target), train_error), states[washout:])
        return FitReport(len(target), washout, train_error, self.readout_engine is not None)

    def _install(self, readout: Readout, states: np.ndarray | None = None) -> None:
        """Make ``readout`` current (and upload its state part to the readout engine) in one assignment."""
        k = readout.weights.shape[0]
        gain, padded = 1.0, None
        if self.readout_engine is not None:
            engine = self.readout_engine
            if engine.rows < k or engine.cols < self.size:
                raise ConfigError(f"readout engine ({engine.rows}, {engine.cols}) is smaller than the "
                                  f"readout ({k} outputs, {self.size} units)")
            w_state = readout.weights[:, 1 + self.config.input_dim:]
            _, hi = engine.weight_range()
            need = float(np.max(np.abs(w_state) / hi[:k, None].astype(np.float64)))
            if states is not None:  # keep W x inside the engine's output range on the data it was fitted on
                need = max(need, float(np.max(np.abs(states @ w_state.T))) / (0.9 * engine.quantization
                                                                               .output_range()[1]))
            gain = _power_of_two_at_least(need)
            padded = np.zeros((engine.rows, engine.cols), dtype=np.float32)
            padded[:k, : self.size] = w_state / gain
        # The engine's weights, the readout and its gain change together: an output() running on another
        # thread (the node's data path) sees all old or all new, never the new state weights scaled by the
        # old gain beside the old direct terms.
        with self._lock:
            if padded is not None:
                self.readout_engine.set_weights(padded)
            self._readout, self._readout_gain = readout, gain

    def output(self, u: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The readout of state(s) ``x`` with input(s) ``u``: (K,) or (T, K)."""
        with self._lock:  # the readout and the engine's weights as one version (see _install)
            readout, gain = self._readout, self._readout_gain
            if readout is None:
                raise ConfigError("the reservoir has no readout yet: fit or load one first")
            on_engine = None if self.readout_engine is None else self.readout_engine.matmul(x)
        m = self.config.input_dim
        w = readout.weights
        direct = w[:, 0] + u @ w[:, 1:1 + m].T
        if on_engine is None:
            return direct + x @ w[:, 1 + m:].T
        k = w.shape[0]
        return direct + gain * (on_engine.astype(np.float64)[..., :k])

    def predict(self, inputs: object, reset: bool = True) -> np.ndarray:
        """Readout (T, K) over a sequence of inputs (T, M) (from zero when ``reset``)."""
        u = self._check_sequence(inputs, "inputs", self.config.input_dim)
        return self.output(u, self.run(u, reset=reset))

    def step_predict(self, u: object) -> np.ndarray:
        """One online step and its readout (K,)."""
        u = self._check_input(u)
        x = self._advance(self._state, u)
        self._state = x
        return self.output(u, x)

    # -- persistence -----------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """What a saved readout must match: the template size and the whole configuration."""
        return {"size": self.size, **asdict(self.config)}

    def save_readout(self, path: str | Path) -> None:
        """Write the readout and what it was fitted for to ``path`` (.npz, no pickles), atomically."""
        readout = self._readout
        if readout is None:
            raise ConfigError("no readout to save: fit or load one first")
        meta = {"format": READOUT_FORMAT, "samples": readout.samples, "train_nrmse": readout.train_nrmse,
                **self.identity()}
        with atomic_open(path) as handle:  # a failed write (disk full) leaves the old file whole
            np.savez(handle, weights=readout.weights, meta=np.array(json.dumps(meta)))

    def load_readout(self, path: str | Path, outputs: int | None = None) -> Readout:
        """Load a readout saved by :meth:`save_readout` for the same reservoir (and with ``outputs`` outputs
        when given: a one-step-ahead predictor has one per input); InputError, old one kept."""
        path = Path(path)
        # npyfile: every array's size checked against the file before NumPy allocates it; no pickles. The
        # weights at most (K, 1 + M + N) float64 with K <= 65536, or a few times ``outputs`` when it is known
        # (a wrong K within that reaches the check below, which names it)
        columns = 1 + self.config.input_dim + self.size
        weight_bytes = (65536 if outputs is None else max(64, 4 * outputs)) * columns * 8
        weights, meta = read_npz_meta(path, "reservoir readout file", READOUT_FORMAT, "weights",
                                      max_bytes=MAX_READOUT_BYTES, array_bytes=weight_bytes,
                                      meta_bytes=MAX_META_BYTES, dtype=np.float64)
        for key, value in self.identity().items():
            if key in ("ridge", "washout"):
                continue  # fitting choices: the reservoir itself is the same
            if meta.get(key, 1 if key == "passes" else None) != value:  # files before passes: one pass
                raise InputError(f"{path}: readout was fitted for {key}={clip_repr(meta.get(key))}, this "
                                 f"reservoir has {value!r}")
        expected = 1 + self.config.input_dim + self.size
        if weights.ndim != 2 or weights.shape[1] != expected or not 1 <= weights.shape[0] <= 65536:
            raise InputError(f"{path}: readout weights have shape {weights.shape}; expected (K, {expected})")
        if outputs is not None and weights.shape[0] != outputs:
            raise InputError(f"{path}: readout has {weights.shape[0]} outputs, {outputs} expected here "
                             f"(one per input of the series it predicts)")
        if not np.isfinite(weights).all():
            raise InputError(f"{path}: readout weights contain NaN/inf")
        readout = Readout(weights, _meta_samples(meta, path), _meta_nrmse(meta, path))
        self._install(readout)
        return readout


def _meta_samples(meta: dict[str, Any], path: Path) -> int:
    """The readout metadata's ``samples``: an integer in 0..2^53 (a string, a list, NaN or 1e400 is refused
    by name: ``int()`` of them raised ValueError / TypeError / OverflowError in a service handler)."""
    value = meta.get("samples", 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 53:
        raise InputError(f"{path}: metadata samples is {clip_repr(value)}, expected an integer in 0..2^53")
    return value


def _meta_nrmse(meta: dict[str, Any], path: Path) -> float:
    """The readout metadata's ``train_nrmse``: a number >= 0, or NaN (not known)."""
    value = meta.get("train_nrmse", float("nan"))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isnan(value) or 0 <= value < math.inf):
        raise InputError(f"{path}: metadata train_nrmse is {clip_repr(value)}, expected a number >= 0 or NaN")
    return float(value)
