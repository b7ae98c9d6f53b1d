"""The reservoir near float accuracy (``passes`` > 1: dithered high passes + a low pass, one engine call per
step) against a float64 network with the same weights, on Mackey-Glass tau=17 and Lorenz-x made here; and
series the NRMSE or the network cannot take (constant targets, absurd magnitudes) refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError, InputError
from libredgetpu_ros.matmul import MatMulEngine
from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig, nrmse

from .test_reservoir import _standardised, mackey_glass, reference_step

TRAIN, WASHOUT = 2000, 100


def lorenz_x(n: int, dt: float = 0.01, sample: float = 0.02) -> np.ndarray:
    """x of the Lorenz system (10, 28, 8/3) from (1, 1, 1), RK4 at dt, sampled every ``sample``, the first
    500 samples dropped."""
    def f(s: np.ndarray) -> np.ndarray:
        return np.array([10.0 * (s[1] - s[0]), s[0] * (28.0 - s[2]) - s[1], s[0] * s[1] - 8.0 / 3.0 * s[2]])

    every, s, out = round(sample / dt), np.ones(3), []
    for i in range((n + 500) * every):
        if i % every == 0:
            out.append(s[0])
        k1 = f(s)
        k2 = f(s + dt / 2 * k1)
        k3 = f(s + dt / 2 * k2)
        k4 = f(s + dt * k3)
        s = s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return np.array(out[500:])


def series_of(system: str) -> np.ndarray:
    raw = mackey_glass(2600) if system == "mackey_glass" else lorenz_x(2600)
    return _standardised(raw)[:, None]


def held_out_nrmse(features: np.ndarray, targets: np.ndarray, ridge: float) -> float:
    """Ridge readout on [1, u, x] fitted on steps WASHOUT..TRAIN (as ``fit`` does), NRMSE after TRAIN."""
    x, y = features[WASHOUT:TRAIN], targets[WASHOUT:TRAIN]
    gram = x.T @ x
    gram[np.diag_indices_from(gram)] += ridge * len(x)
    weights = np.linalg.solve(gram, x.T @ y)
    return nrmse(features[TRAIN:] @ weights, targets[TRAIN:])


def compare(n: int, system: str, passes: tuple[int, ...]) -> dict[str, float]:
    """Held-out one-step NRMSE of the float64 network and of the engine with each number of passes, all
    with the same W_res, W_in, b."""
    series = series_of(system)
    inputs, targets = series[:-1], series[1:]
    result: dict[str, float] = {}
    with MatMulEngine.from_template(n, backend="cpu") as engine:
        for p in passes:
            rc = ReservoirComputer(engine, ReservoirConfig(input_dim=1, input_scaling=1.0, seed=1, passes=p))
            if "float64" not in result:
                x, states = np.zeros(n), []
                for u in inputs:
                    x = reference_step(rc, x, u)
                    states.append(x)
                result["float64"] = held_out_nrmse(rc.features(inputs, np.array(states)), targets,
                                                   rc.config.ridge)
            result[f"passes={p}"] = held_out_nrmse(rc.features(inputs, rc.run(inputs)), targets,
                                                   rc.config.ridge)
    print(f"N={n} {system}: " + ", ".join(f"{k} {v:.5f} ({v / result['float64']:.2f}x)"
                                           for k, v in result.items()))
    return result


@pytest.mark.slow
@pytest.mark.parametrize("system", ["mackey_glass", "lorenz_x"])
@pytest.mark.parametrize("n,passes", [(256, 17), (1024, 33)])
def test_nrmse_within_twice_the_float64_network(n, passes, system):
    result = compare(n, system, (1, passes))
    assert result["passes=1"] > 4 * result["float64"]  # one int8 pass: the 2.5-12x
    assert result[f"passes={passes}"] <= 2 * result["float64"]


def dithered_step_errors(passes: int = 9, steps: int = 150) -> dict[str, float]:
    """From the same states (a Mackey-Glass drive, N = 256, seed 3), the mean RMS error of the dithered step
    (``passes``) and of one int8 pass against the float64 step with the engine's int8 weights (what the
    passes' roundings perturb), and the dithered step's worst excess over its own bound of the float64 step
    (<= 0: within it). bench_reservoir_precision.py reports these."""
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        cfg = ReservoirConfig(input_dim=1, seed=3, spectral_radius=0.8)
        single = ReservoirComputer(engine, cfg)
        precise = ReservoirComputer(engine, ReservoirConfig(**{**cfg.__dict__, "passes": passes}))
        weights, _, _ = engine.get_weights()
        scales = engine.weight_range()[1].astype(np.float64) / 127.0
        w_q = np.rint(weights / scales[:, None]) * scales[:, None] * precise.gain
        u = _standardised(mackey_glass(steps))[:, None] * 0.5
        dithered, one_pass, excess = [], [], -np.inf
        for t in range(len(u)):
            x = precise.state
            bound = precise.step_bound(x)
            stepped = precise.step(u[t])
            excess = max(excess, float(np.max(np.abs(stepped - reference_step(precise, x, u[t])) - bound)))
            exact = np.tanh(w_q @ x + precise.input_weights @ u[t] + precise.input_bias)
            dithered.append(np.sqrt(np.mean((stepped - exact) ** 2)))
            single.set_state(x)
            one_pass.append(np.sqrt(np.mean((single.step(u[t]) - exact) ** 2)))
    return {"dithered": float(np.mean(dithered)), "one_pass": float(np.mean(one_pass)),
            "bound_excess": excess}


def test_dithered_step_stays_within_its_bound_and_far_below_one_pass():
    """From the same state, the dithered step is within its own bound of the float64 step; against the
    float64 step with the engine's int8 weights (what the passes' roundings perturb) its error is several
    times smaller than one pass's."""
    errors = dithered_step_errors()
    print(f"RMS step error against the int8-weight float64 step: dithered (9 passes) "
          f"{errors['dithered']:.6f}, one pass {errors['one_pass']:.6f}")
    assert errors["bound_excess"] <= 1e-12, errors
    assert errors["dithered"] < errors["one_pass"] / 3


def test_passes_are_checked():
    for value in (0, 2, 65):
        with pytest.raises(ConfigError, match="passes"):
            ReservoirConfig(input_dim=1, passes=value)


def test_constant_and_absurd_series_are_refused_and_the_readout_kept():
    series = _standardised(mackey_glass(700))[:, None]
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        rc = ReservoirComputer(engine, ReservoirConfig(input_dim=1, seed=1))
        rc.fit(series[:-1], series[1:])
        kept = rc.readout
        constant = np.full((699, 1), 0.25)
        with pytest.raises(InputError, match=r"targets column 0 is constant .*NRMSE is undefined"):
            rc.fit(series[:-1], constant)
        two = np.hstack([series[1:], constant])  # one good column, one constant
        with pytest.raises(InputError, match="column 1 is constant"):
            rc.fit(series[:-1], two)
        with pytest.raises(InputError, match="NRMSE is undefined"):
            nrmse(np.zeros(10), np.ones(10))
        huge = series.copy()
        huge[77, 0] = 1e308
        with pytest.raises(InputError, match="inputs has \\|value\\| 1e\\+308 > 1e\\+06 at step 77"):
            rc.fit(huge[:-1], series[1:])
        with pytest.raises(InputError, match="targets has \\|value\\|"):
            rc.fit(series[:-1], huge[1:] * 1.0)
        assert rc.readout is kept
        state = rc.state
        for bad in ([1e308], [-2e6]):
            with pytest.raises(InputError, match="> 1e\\+06"):
                rc.step_predict(bad)
            with pytest.raises(InputError, match="> 1e\\+06"):
                rc.step(bad)
        with pytest.raises(InputError, match="> 1e\\+06"):
            rc.set_state(np.full(256, 1e308))
        assert np.array_equal(rc.state, state)
