"""MatMulEngine swaps: reports; bad input keeps the old weights; concurrent readers see one version."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from libredgetpu_ros.errors import InputError, ModelFormatError, WeightsError
from libredgetpu_ros.matmul import MatMulEngine


@pytest.fixture
def engine(fixture_path):
    with MatMulEngine.from_template(fixture_path("matmul/dense_256_edgetpu.tflite"), backend="cpu") as eng:
        yield eng


def _in_range(engine, rng, fraction=0.9):
    lo, hi = engine.weight_range()
    return rng.uniform(lo[:, None] * fraction, hi[:, None] * fraction, size=(engine.rows, engine.cols))


def test_template_quantization_is_per_row(engine, fixture_path):
    scales = engine.quantization.weight_scales
    assert scales.shape == (256,) and np.unique(scales).size > 100  # not the sidecar's single value
    weights, bias, version = engine.get_weights()
    assert version == 0 and bias is None
    assert np.array_equal(np.rint(weights / scales[:, None]).astype(np.int8), engine.template.weights)


def test_set_weights_reports_and_round_trips(engine):
    rng = np.random.default_rng(0)
    weights = _in_range(engine, rng)
    report = engine.set_weights(weights.astype(np.float64), bias=np.arange(256.0))
    assert report.accepted and not report.dry_run and report.version == 1 == engine.version
    assert report.clipped_count == 0 and report.max_clip_error == 0.0
    scales = engine.quantization.weight_scales.astype(np.float64)
    back, bias, version = engine.get_weights()
    err = np.abs(back - weights)
    assert np.all(err <= scales[:, None] / 2 + 1e-7)  # + float32 rounding of the float64 input
    assert report.max_quantization_error == pytest.approx(err.max(), rel=1e-4)
    assert np.array_equal(bias, np.arange(256.0, dtype=np.float32)) and version == 1
    assert set(report.timings_ms) == {"validate", "quantize", "blob", "swap", "total"}


def test_clipping_is_counted_and_measured(engine):
    weights = _in_range(engine, np.random.default_rng(1))
    lo, hi = engine.weight_range()
    weights[3, 5] = hi[3] + 0.25
    weights[7, 9] = lo[7] - 0.5
    report = engine.set_weights(weights)
    assert report.clipped_count == 2
    assert report.max_clip_error == pytest.approx(0.5, rel=1e-4)
    assert report.max_quantization_error <= engine.quantization.weight_scales.max() / 2 * (1 + 1e-5)
    back, _, _ = engine.get_weights()
    assert back[3, 5] == pytest.approx(hi[3]) and back[7, 9] == pytest.approx(lo[7])


def test_dry_run_changes_nothing(engine):
    before = engine.get_weights()
    report = engine.set_weights(_in_range(engine, np.random.default_rng(2)), dry_run=True)
    assert report.dry_run and not report.accepted and report.version == 0 == engine.version
    after = engine.get_weights()
    assert np.array_equal(before[0], after[0])


def test_set_weights_raw(engine):
    q = np.random.default_rng(3).integers(-128, 128, size=(256, 256), dtype=np.int8)
    report = engine.set_weights_raw(q)
    assert report.version == 1 and report.max_quantization_error == 0.0
    assert np.array_equal(engine.template.weights.shape, q.shape)
    blob, version = engine.current_blob()
    from libredgetpu_ros.matmul.blob import parse_blob

    assert version == 1 and np.array_equal(parse_blob(blob, 256, 256)[0], q)
    with pytest.raises(WeightsError, match="int8"):
        engine.set_weights_raw(np.full((256, 256), 300))


BAD_INPUTS = [
    ("wrong shape", lambda e: np.zeros((256, 128)), None, "shape"),
    ("512 weights into the 256 engine", lambda e: np.zeros((512, 512)), None, r"\(256, 256\)"),
    ("NaN", lambda e: np.where(np.eye(256) > 0, np.nan, 0.0), None, "NaN"),
    ("inf", lambda e: np.full((256, 256), np.inf), None, "NaN/inf"),
    ("strings", lambda e: np.full((256, 256), "0.1"), None, "dtype"),
    ("complex", lambda e: np.zeros((256, 256), np.complex64), None, "dtype"),
    ("ragged list", lambda e: [[0.0] * 256, [0.0]], None, "weights"),
    ("bias wrong length", lambda e: np.zeros((256, 256)), np.zeros(255), "bias has shape"),
    ("bias NaN", lambda e: np.zeros((256, 256)), np.full(256, np.nan), "bias contains NaN"),
]


@pytest.mark.parametrize(("weights", "bias", "match"), [b[1:] for b in BAD_INPUTS],
                         ids=[b[0] for b in BAD_INPUTS])
def test_bad_weights_keep_the_old_ones(engine, weights, bias, match):
    engine.set_weights(_in_range(engine, np.random.default_rng(4)), bias=np.ones(256))
    before_w, before_b, before_v = engine.get_weights()
    blob_before = engine.current_blob()[0]
    with pytest.raises(WeightsError, match=match):
        engine.set_weights(weights(engine), bias=bias)
    after_w, after_b, after_v = engine.get_weights()
    assert after_v == before_v == 1
    assert np.array_equal(after_w, before_w) and np.array_equal(after_b, before_b)
    assert engine.current_blob()[0] is blob_before


def test_bad_matmul_input(engine):
    with pytest.raises(InputError, match="shape"):
        engine.matmul(np.zeros(255))
    with pytest.raises(InputError, match="NaN"):
        engine.matmul(np.full(256, np.nan))


def test_mismatched_sidecar_is_refused(tmp_path, fixture_path):
    for name in ("dense_256.tflite", "dense_256_edgetpu.tflite"):
        (tmp_path / name).symlink_to(fixture_path(f"matmul/{name}"))
    sidecar = fixture_path("matmul/dense_512_edgetpu.json").read_text()
    (tmp_path / "dense_256_edgetpu.json").write_text(sidecar)
    with pytest.raises(ModelFormatError, match="matrix_size 512"):
        MatMulEngine.from_template(256, backend="cpu", templates_dir=tmp_path)
    with pytest.raises(ModelFormatError, match="missing"):
        MatMulEngine.from_template(128, backend="cpu", templates_dir=tmp_path)


def test_concurrent_swaps_give_consistent_versions(engine):
    rng = np.random.default_rng(5)
    versions = {0: engine.get_weights()[0]}
    candidates = [_in_range(engine, rng) for _ in range(4)]
    x = rng.uniform(-1, 1, size=256)
    expected = {0: engine.matmul(x)}
    results: list[tuple[np.ndarray, int]] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set() or len(results) < 50:
            results.append(engine.matmul_versioned(x))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(40):
            report = engine.set_weights(candidates[i % 4])
            versions[report.version] = candidates[i % 4]
    finally:
        done.set()
        thread.join(timeout=30)
    # The twin is deterministic, so W_v x for version v is what a single-threaded call returns.
    reference = MatMulEngine(engine.template, backend="cpu")
    for v, weights in versions.items():
        if v:
            reference.set_weights(weights)
            expected[v] = reference.matmul(x)
    seen = {v for _, v in results}
    assert len(seen) > 1 or len(results) >= 50
    for y, v in results:
        assert np.array_equal(y, expected[v]), f"result tagged version {v} is not W_{v} x"
