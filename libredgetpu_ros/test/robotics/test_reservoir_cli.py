"""`libredgetpu-ros robotics reservoir fit|predict` on CSV and NPZ series; bad files are one error line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from libredgetpu_ros.cli.main import main

from .._helpers import load_helper

bad_files = load_helper(Path(__file__).with_name("_bad_files.py"))


def _pendulum_like(n: int) -> np.ndarray:
    t = np.arange(n) * 0.3
    return np.stack([np.sin(t) * np.exp(-0.002 * t), np.cos(1.7 * t) * 0.5], axis=1)


def test_fit_then_predict_csv_and_npz(tmp_path, capsys):
    series = _pendulum_like(900)
    csv = tmp_path / "train.csv"
    np.savetxt(csv, series[:600], delimiter=",", header="a,b", comments="")
    readout = tmp_path / "readout.npz"
    assert main(["robotics", "reservoir", "fit", str(csv), "--backend", "cpu", "--seed", "3",
                 "--out", str(readout), "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)
    assert fitted["samples"] == 499 and fitted["columns"] == 2 and fitted["train_nrmse"] < 0.1
    held_out = tmp_path / "test.npz"
    np.savez(held_out, series=series[600:])
    predictions = tmp_path / "pred.csv"
    assert main(["robotics", "reservoir", "predict", str(held_out), "--backend", "cpu", "--seed", "3",
                 "--readout", str(readout), "--out", str(predictions), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    print(f"held-out NRMSE {report['nrmse']}")
    assert report["nrmse"] < 0.1
    assert np.loadtxt(predictions, delimiter=",").shape == (299, 2)
    # Another seed is another reservoir: the readout does not fit it.
    assert main(["robotics", "reservoir", "predict", str(held_out), "--backend", "cpu", "--seed", "4",
                 "--readout", str(readout)]) == 2
    assert "seed=3, this reservoir has 4" in capsys.readouterr().err


def test_series_and_readout_with_lying_headers_are_one_error_line(tmp_path, capsys):
    """A series or readout .npz whose header declares a 40 GB array: refused before allocating (npyfile),
    one error line, exit 2."""
    huge_series = bad_files.lying_npz(tmp_path / "series.npz", ("series",))
    assert main(["robotics", "reservoir", "fit", str(huge_series), "--backend", "cpu",
                 "--out", str(tmp_path / "r.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "header declares" in err[0] and "series.npz" in err[0], err
    assert not (tmp_path / "r.npz").exists()
    series = tmp_path / "ok.npz"
    np.savez(series, series=_pendulum_like(400))
    huge_readout = bad_files.lying_npz(tmp_path / "readout.npz", ("weights", "meta"))
    assert main(["robotics", "reservoir", "predict", str(series), "--backend", "cpu",
                 "--readout", str(huge_readout)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "header declares" in err[0] and "readout.npz" in err[0], err


def test_bad_series_are_one_error_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2\n3,x\n")
    short = tmp_path / "short.csv"
    np.savetxt(short, np.ones((50, 1)), delimiter=",")
    nan = tmp_path / "nan.npz"
    series = np.ones((400, 1))
    series[10] = np.nan
    np.savez(nan, series=series)
    for path, message in ((bad, "cannot read a numeric time series"), (short, "at least 258 samples"),
                          (nan, "NaN/inf"), (tmp_path / "missing.csv", "does not exist")):
        assert main(["robotics", "reservoir", "fit", str(path), "--backend", "cpu",
                     "--out", str(tmp_path / "r.npz")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def _crafted_readouts(tmp_path: Path, good: Path) -> dict[str, Path]:
    """Issue 30 item 1: the 7 readouts that gave tracebacks in ``reservoir predict`` (metadata fields of the
    wrong type or value; weights of 5 outputs for a 2-column series), built from a good one."""
    with np.load(good) as data:
        weights, meta = data["weights"], json.loads(str(data["meta"]))
    variants = {"samples_x": ("samples", "x"), "samples_list": ("samples", []),
                "samples_1e400": ("samples", "1e400"), "samples_nan": ("samples", "NaN"),
                "nrmse_x": ("train_nrmse", "x"), "nrmse_dict": ("train_nrmse", {})}
    out = {}
    for name, (key, value) in variants.items():
        text = json.dumps({**meta, key: value})
        if value in ("1e400", "NaN"):  # JSON numbers, not strings: 1e400 reads as inf
            text = text.replace(f'"{value}"', value)
        out[name] = tmp_path / f"{name}.npz"
        np.savez(out[name], weights=weights, meta=np.array(text))
    out["five_outputs"] = tmp_path / "five_outputs.npz"
    np.savez(out["five_outputs"], weights=np.vstack([weights, weights, weights[:1]]), meta=np.array(
        json.dumps(meta)))
    return out


def test_crafted_readouts_and_special_files_are_one_error_line(tmp_path, capsys):
    """Each crafted readout of issue 30 item 1 (a traceback before: ValueError, TypeError, OverflowError)
    and a series or readout that is a FIFO (blocked before) are one error line, exit 2."""
    import os

    series = tmp_path / "series.csv"
    np.savetxt(series, _pendulum_like(400), delimiter=",")
    good = tmp_path / "good.npz"
    assert main(["robotics", "reservoir", "fit", str(series), "--backend", "cpu", "--washout", "20",
                 "--out", str(good)]) == 0
    capsys.readouterr()
    expected = {"samples_x": "samples is 'x'", "samples_list": "samples is []",
                "samples_1e400": "samples is inf", "samples_nan": "samples is nan",
                "nrmse_x": "train_nrmse is 'x'", "nrmse_dict": "train_nrmse is {}",
                "five_outputs": "readout has 5 outputs, 2 expected"}
    for name, path in _crafted_readouts(tmp_path, good).items():
        assert main(["robotics", "reservoir", "predict", str(series), "--backend", "cpu", "--washout", "20",
                     "--readout", str(path)]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected[name] in err[0], (name, err)
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    for args, said in ((["fit", str(fifo), "--out", str(tmp_path / "r.npz")],
                        f"error: time series {fifo} is a FIFO, not a regular file"),
                       (["predict", str(series), "--readout", str(fifo)],
                        f"error: reservoir readout file {fifo} is a FIFO, not a regular file")):
        assert main(["robotics", "reservoir", *args, "--backend", "cpu"]) == 2
        assert capsys.readouterr().err == said + "\n"


def test_readout_weights_far_past_the_outputs_are_refused_before_they_are_read(tmp_path):
    """A readout of 20,000 outputs (41 MB of weights, deflated to ~40 KB) for a 2-input one-step-ahead
    predictor: refused from the array's header (at most a few times the expected outputs), not read."""
    import tracemalloc

    from libredgetpu_ros.errors import InputError
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.reservoir import READOUT_FORMAT, ReservoirComputer, ReservoirConfig

    with MatMulEngine.from_template(256, backend="cpu") as engine:
        rc = ReservoirComputer(engine, ReservoirConfig(input_dim=2, seed=0))
        meta = {"format": READOUT_FORMAT, "samples": 10, "train_nrmse": 0.1, **rc.identity()}
        path = tmp_path / "wide.npz"
        np.savez_compressed(path, weights=np.zeros((20_000, 259)), meta=np.array(json.dumps(meta)))
        tracemalloc.start()
        try:
            try:
                rc.load_readout(path, outputs=2)
            except InputError as exc:
                message = str(exc)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert "member 'weights.npy': 41440000 bytes of array, more than the 132608 accepted" in message, message
    assert peak < 4 << 20, f"{peak} bytes allocated refusing the weights"
