"""ReservoirComputer: the int8 engine path against a float64 reference of the same equations, one-step-ahead
prediction of known systems made here (Mackey-Glass tau=17, a damped driven pendulum), determinism by seed,
ill-posed fits refused with the previous readout kept, readout on a second engine, save/load."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError, InputError
from libredgetpu_ros.matmul import MatMulEngine
from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig, nrmse

from .._helpers import load_helper

bad_files = load_helper(Path(__file__).with_name("_bad_files.py"))


def mackey_glass(n: int, tau: float = 17.0, dt: float = 0.1, sample: float = 3.0,
                 x0: float = 1.2) -> np.ndarray:
    """dx/dt = 0.2 x(t - tau) / (1 + x(t - tau)^10) - 0.1 x, Euler at dt, sampled every ``sample``."""
    every, lag, discard = round(sample / dt), round(tau / dt), 300
    total = (n + discard) * every
    x = np.empty(total + lag + 1)
    x[: lag + 1] = x0
    for i in range(lag, lag + total):
        delayed = x[i - lag]
        x[i + 1] = x[i] + dt * (0.2 * delayed / (1.0 + delayed**10) - 0.1 * x[i])
    return x[lag + discard * every::every][:n]


def driven_pendulum(n: int, dt: float = 0.01, sample: float = 0.5) -> np.ndarray:
    """theta'' = -0.5 theta' - sin(theta) + 1.15 cos(2t/3) (chaotic), RK4; columns sin, cos, omega/2."""
    def deriv(t: float, s: np.ndarray) -> np.ndarray:
        return np.array([s[1], -0.5 * s[1] - np.sin(s[0]) + 1.15 * np.cos(2.0 * t / 3.0)])

    every = round(sample / dt)
    s, t, out = np.array([0.2, 0.0]), 0.0, []
    for i in range(n * every):
        if i % every == 0:
            out.append((np.sin(s[0]), np.cos(s[0]), s[1] / 2.0))
        k1 = deriv(t, s)
        k2 = deriv(t + dt / 2, s + dt / 2 * k1)
        k3 = deriv(t + dt / 2, s + dt / 2 * k2)
        k4 = deriv(t + dt, s + dt * k3)
        s, t = s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), t + dt
    return np.array(out)


def reference_step(rc: ReservoirComputer, x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The same equations in float64 with the exact W_res (no quantization anywhere)."""
    cfg = rc.config
    pre = rc.reservoir_weights @ x + rc.input_weights @ u + rc.input_bias
    act = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0.0), "identity": lambda v: v}[cfg.activation]
    return (1.0 - cfg.leak_rate) * x + cfg.leak_rate * act(pre)


@pytest.fixture(scope="module")
def engine256():
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        yield engine


def _standardised(series: np.ndarray) -> np.ndarray:
    return (series - series.mean(axis=0)) / series.std(axis=0)


@pytest.mark.parametrize("activation,leak,density", [("tanh", 1.0, 1.0), ("tanh", 0.3, 0.2),
                                                     ("relu", 0.5, 1.0), ("identity", 1.0, 1.0)])
def test_engine_step_within_int8_error_bound_of_float64(engine256, activation, leak, density):
    cfg = ReservoirConfig(input_dim=1, activation=activation, leak_rate=leak, density=density, seed=3,
                          spectral_radius=0.8)
    rc = ReservoirComputer(engine256, cfg)
    if density < 1.0:
        assert rc.gain > 1.0  # sparse entries are larger than the template's range: scaled by a power of 2
    u = _standardised(mackey_glass(250))[:, None] * 0.5
    worst_ratio, free_ref, deviations = 0.0, np.zeros(256), []
    for t in range(len(u)):
        x = rc.state
        bound = rc.step_bound(x)
        stepped = rc.step(u[t])
        ref = reference_step(rc, x, u[t])
        assert np.all(np.abs(stepped - ref) <= bound + 1e-12), f"step {t} breaks the bound"
        worst_ratio = max(worst_ratio, float(np.max(np.abs(stepped - ref) / bound)))
        free_ref = reference_step(rc, free_ref, u[t])
        deviations.append(np.sqrt(np.mean((stepped - free_ref) ** 2)))
    print(f"{activation} leak {leak}: worst |step - ref| / bound {worst_ratio:.3f}, free-run RMS "
          f"{np.mean(deviations[100:]):.4f}")
    assert 0.05 < worst_ratio <= 1.0  # the bound is met and not vacuous
    # Free-running trajectories (no common state): the echo state property keeps them together.
    assert np.mean(deviations[100:]) < 0.05, np.mean(deviations[100:])


@pytest.mark.parametrize("system", ["mackey_glass", "pendulum"])
def test_one_step_ahead_prediction_of_known_systems(engine256, system):
    if system == "mackey_glass":
        series = _standardised(mackey_glass(2600))[:, None]
        cfg = ReservoirConfig(input_dim=1, input_scaling=1.0, seed=1)
    else:
        series = driven_pendulum(2600)
        cfg = ReservoirConfig(input_dim=3, input_scaling=0.5, seed=2)
    inputs, targets = series[:-1], series[1:]
    train = 2000
    rc = ReservoirComputer(engine256, cfg)
    report = rc.fit(inputs[:train], targets[:train])
    predicted = rc.predict(inputs)  # driven from zero through training into the held-out part
    held_out = nrmse(predicted[train:], targets[train:])
    # A ridge readout on [1, u] alone (no reservoir) for comparison: the reservoir is what predicts.
    design = np.hstack([np.ones((len(inputs), 1)), inputs])
    linear = np.linalg.lstsq(design[:train], targets[:train], rcond=None)[0]
    baseline = nrmse(design[train:] @ linear, targets[train:])
    print(f"{system}: held-out NRMSE {held_out:.4f} (train {report.train_nrmse:.4f}, linear {baseline:.3f})")
    assert held_out <= 0.1
    assert held_out < baseline / 5


def test_determinism_by_seed(engine256):
    series = _standardised(mackey_glass(600))[:, None]
    first = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=5))
    first.fit(series[:-1], series[1:])
    a = first.predict(series[:-1])
    second = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=5))
    second.fit(series[:-1], series[1:])
    assert np.array_equal(first.reservoir_weights, second.reservoir_weights)
    assert np.array_equal(a, second.predict(series[:-1]))
    other = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=6))
    assert not np.array_equal(other.reservoir_weights, first.reservoir_weights)


def test_ill_posed_fit_is_refused_and_previous_readout_kept(engine256):
    series = _standardised(mackey_glass(700))[:, None]
    rc = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=1))
    rc.fit(series[:-1], series[1:])
    kept = rc.readout
    before = rc.predict(series[:50])
    bad_nan = series.copy()
    bad_nan[123, 0] = np.nan
    cases = {
        "too few": (series[:300], series[1:301], "at least 258 samples after the washout of 100"),
        "nan input": (bad_nan[:-1], series[1:], "inputs contains NaN/inf \\(first at step 123\\)"),
        "inf target": (series[:-1], np.where(np.arange(699)[:, None] == 9, np.inf, series[1:]), "targets"),
        "length": (series[:-1], series[1:-5], "inputs have 699 steps but targets 694"),
        "width": (np.hstack([series, series])[:-1], series[1:], "expected \\(T, 1\\)"),
    }
    for name, (inputs, targets, message) in cases.items():
        with pytest.raises(InputError, match=message):
            rc.fit(inputs, targets)
        assert rc.readout is kept, name
    assert np.array_equal(rc.predict(series[:50]), before)


def test_a_fit_checks_its_cancel_through_the_drive_and_the_normal_equations(engine256):
    """``fit(check=)`` is called every CHECK_STEPS steps of the drive, before each row block of the normal
    equations, before the solve and before each block of the prediction; what it raises leaves the previous
    readout, and a check that never raises changes nothing in the result. Before, nothing in ``fit`` could
    stop it (a node's cancel waited for the drive and the solve whole)."""
    from libredgetpu_ros.robotics.reservoir import CHECK_STEPS
    from libredgetpu_ros.robotics.ridge import BLOCK_ROWS

    series = _standardised(mackey_glass(5000))[:, None]
    steps = len(series) - 1
    rc = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=2))
    rc.fit(series[:-1], series[1:])
    kept = rc.readout
    drive_checks = -(-steps // CHECK_STEPS)
    blocks = -(-(steps - 100) // BLOCK_ROWS)

    class Stop(Exception):
        pass

    for stop_at in (drive_checks // 2, drive_checks + 1, drive_checks + blocks + 1,  # drive, sums, solve
                    drive_checks + blocks + 2):  # the prediction's first block
        calls: list[int] = []

        def check(stop_at: int = stop_at, calls: list[int] = calls) -> None:
            calls.append(1)
            if len(calls) == stop_at:
                raise Stop

        with pytest.raises(Stop):
            rc.fit(series[:-1], series[1:], check=check)
        assert len(calls) == stop_at and rc.readout is kept
    calls = []
    rc.fit(series[:-1], series[1:], check=lambda: calls.append(1))
    assert len(calls) == drive_checks + 2 * blocks + 1 and rc.readout is not kept
    assert np.array_equal(rc.readout.weights, kept.weights)


def test_step_refuses_bad_input_and_keeps_state(engine256):
    rc = ReservoirComputer(engine256, ReservoirConfig(input_dim=2, seed=1))
    rc.step([0.1, 0.2])
    state = rc.state
    for bad, message in (([np.nan, 0.0], "NaN"), ([0.0, np.inf], "NaN"), ([0.0], "shape")):
        with pytest.raises(InputError, match=message):
            rc.step(bad)
        assert np.array_equal(rc.state, state)
    with pytest.raises(ConfigError, match="no readout"):
        rc.step_predict([0.0, 0.0])


def test_state_save_restore_replays_exactly(engine256):
    series = _standardised(mackey_glass(800))[:, None]
    rc = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=1))
    rc.fit(series[:600], series[1:601])
    rc.run(series[:20])
    saved = rc.state
    first = [rc.step_predict(u) for u in series[20:40]]
    rc.set_state(saved)
    assert np.array_equal(np.array(first), np.array([rc.step_predict(u) for u in series[20:40]]))
    with pytest.raises(InputError):
        rc.set_state(np.zeros(3))


def test_readout_on_a_second_engine_matches_cpu_readout(engine256):
    series = driven_pendulum(1200)
    with MatMulEngine.from_template(256, backend="cpu") as readout_engine:
        cpu = ReservoirComputer(engine256, ReservoirConfig(input_dim=3, seed=2))
        cpu.fit(series[:900], series[1:901])
        on_engine = ReservoirComputer(engine256, ReservoirConfig(input_dim=3, seed=2), readout_engine)
        report = on_engine.fit(series[:900], series[1:901])
        assert report.readout_on_engine
        a, b = cpu.predict(series[:-1]), on_engine.predict(series[:-1])
        # The state part runs in int8: a small extra error against the CPU readout, same prediction quality.
        assert nrmse(b[900:], series[901:]) <= 0.1
        assert np.max(np.abs(a - b)) < 0.25


def test_readout_save_load_round_trip_and_mismatch(engine256, tmp_path):
    series = _standardised(mackey_glass(700))[:, None]
    rc = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=1))
    rc.fit(series[:-1], series[1:])
    path = tmp_path / "readout.npz"
    rc.save_readout(path)
    twin = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=1))
    twin.load_readout(path)
    assert np.array_equal(twin.predict(series[:-1]), rc.predict(series[:-1]))
    other = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=2))
    with pytest.raises(InputError, match="seed=1, this reservoir has 2"):
        other.load_readout(path)
    assert other.readout is None
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip")
    with pytest.raises(InputError, match=r"reservoir readout file .* not a readable \.npz"):
        twin.load_readout(garbage)
    meta = '{"format": "libredgetpu_ros.reservoir_readout.v1", "size": 256, "input_dim": 1, "seed": 1}'
    np.savez(garbage, weights=np.zeros((1, 3)), meta=np.array(meta))
    with pytest.raises(InputError):
        twin.load_readout(garbage)
    assert twin.readout is not None and np.array_equal(twin.readout.weights, rc.readout.weights)


def test_readout_with_a_lying_header_is_refused_before_allocating(engine256, tmp_path):
    """A readout file of a few hundred bytes whose header declares a 40 GB array: a typed InputError naming
    the file, nothing of that size allocated, the previous readout kept."""
    series = _standardised(mackey_glass(400))[:, None]
    rc = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=1, washout=50))
    rc.fit(series[:-1], series[1:])
    kept = rc.readout.weights.copy()
    huge = bad_files.lying_npz(tmp_path / "huge.npz", ("weights", "meta"))
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"reservoir readout file .*huge\.npz.*header declares"):
            rc.load_readout(huge)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak} bytes allocated reading a lying header"
    assert np.array_equal(rc.readout.weights, kept)


def test_a_failed_save_leaves_the_old_readout_file_whole(engine256, tmp_path, monkeypatch):
    """save_readout writes through atomicio: a write failing half-way keeps the previous file and leaves no
    temporary; an unwritable place is a typed OutputError."""
    from libredgetpu_ros.errors import OutputError

    series = _standardised(mackey_glass(400))[:, None]
    rc = ReservoirComputer(engine256, ReservoirConfig(input_dim=1, seed=1, washout=50))
    rc.fit(series[:-1], series[1:])
    path = tmp_path / "readout.npz"
    rc.save_readout(path)
    before = path.read_bytes()

    monkeypatch.setattr(np, "savez", bad_files.disk_full_savez)
    with pytest.raises(OutputError, match="No space left on device"):
        rc.save_readout(path)
    monkeypatch.undo()
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["readout.npz"]
    with pytest.raises(OutputError):
        rc.save_readout(tmp_path / "missing" / "readout.npz")


def test_config_is_checked():
    for field, value in (("leak_rate", 0.0), ("activation", "sigmoid"), ("density", 1.5),
                         ("spectral_radius", float("nan")), ("input_dim", 0)):
        kwargs = {"input_dim": 1, field: value}
        with pytest.raises(ConfigError, match=field):
            ReservoirConfig(**kwargs)


@pytest.mark.parametrize("activation", ["tanh", "relu", "identity"])
def test_fused_cpu_step_equals_the_engine_step(engine256, activation):
    # On the CPU twin a step is one compiled call; it must equal the step through engine.matmul (the path an
    # Edge TPU takes) up to float64 rounding order and libm's vs NumPy's tanh (a few ulp).
    rc = ReservoirComputer(engine256, ReservoirConfig(input_dim=2, activation=activation, leak_rate=0.7,
                                                      seed=9))
    assert engine256.twin_weights() is not None  # the fused path is really taken
    u = np.random.default_rng(0).uniform(-1, 1, (60, 2))
    act = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0.0), "identity": lambda v: v}[activation]
    for t in range(len(u)):
        x = rc.state
        stepped = rc.step(u[t])
        drive = rc.input_bias + rc.input_weights @ u[t]
        generic = 0.3 * x + 0.7 * act(rc.gain * engine256.matmul(x).astype(np.float64) + drive)
        assert np.allclose(stepped, generic, rtol=0, atol=1e-14), t


def test_a_readout_swap_is_one_version_for_a_concurrent_prediction(engine256, monkeypatch):
    """The node predicts on its data path while ~/fit or ~/load_readout installs a readout on the main thread:
    a prediction made while the readout engine takes its new weights is wholly the old readout's or wholly the
    new one's (it mixed the new state weights with the old gain and direct terms)."""
    import threading

    series = driven_pendulum(1200)
    with MatMulEngine.from_template(256, backend="cpu") as readout_engine:
        rc = ReservoirComputer(engine256, ReservoirConfig(input_dim=3, seed=2), readout_engine)
        rc.fit(series[:900], series[1:901])
        x = rc.run(series[:50])[-1]
        u = series[50]
        before = rc.output(u, x)
        seen: list[np.ndarray] = []
        swap = readout_engine.set_weights

        def set_weights_then_predict(weights, *args, **kwargs):
            result = swap(weights, *args, **kwargs)
            reader = threading.Thread(target=lambda: seen.append(rc.output(u, x)))
            reader.start()
            reader.join(0.5)  # returns at once only if output() does not wait for the whole install
            readers.append(reader)
            return result

        readers: list[threading.Thread] = []
        monkeypatch.setattr(readout_engine, "set_weights", set_weights_then_predict)
        rc.fit(series[:900], -3.0 * series[1:901])  # a very different readout, on the engine too
        for reader in readers:
            reader.join(10)
        after = rc.output(u, x)
        assert readers and len(seen) == len(readers)
        assert not np.allclose(before, after, atol=0.1)
        for prediction in seen:
            assert np.allclose(prediction, before) or np.allclose(prediction, after), (prediction, after)
