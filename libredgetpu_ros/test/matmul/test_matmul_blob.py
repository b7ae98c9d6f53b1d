"""Parameter blob layout: byte-exact against edgetpu_compiler's output, and build/parse round trips."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libredgetpu_ros.errors import ModelFormatError, WeightsError
from libredgetpu_ros.matmul.blob import blob_size, build_blob, overhead_size, parse_blob
from libredgetpu_ros.matmul.template import load_template

SIZES = (256, 512, 1024)


@pytest.mark.parametrize("n", SIZES)
def test_blob_from_template_weights_equals_compiled_parameters(n, fixture_path):
    template = load_template(fixture_path(f"matmul/dense_{n}_edgetpu.tflite"))
    compiled = template.compiled_parameters()  # PARAMETER_CACHING executable's parameters
    rebuilt = build_blob(template.weights, template.overhead)
    assert rebuilt.size == compiled.size == blob_size(n, n) == template.sidecar["param_size"]
    assert np.array_equal(rebuilt, compiled)


@pytest.mark.parametrize("n", SIZES)
def test_parse_compiled_parameters_gives_uncompiled_weights(n, fixture_path):
    template = load_template(fixture_path(f"matmul/dense_{n}_edgetpu.tflite"))
    weights, overhead = parse_blob(template.compiled_parameters(), n, n)
    assert np.array_equal(weights, template.weights)
    assert np.array_equal(overhead, template.overhead)


def test_blob_offsets_follow_the_documented_formula():
    rows, cols = 128, 8
    weights = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols) % 251 - 125
    weights = weights.astype(np.int8)
    blob = build_blob(weights, np.zeros(overhead_size(rows), np.uint8))
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    offsets = (r // 64) * (64 * 8 + 64 * cols) + 64 * 8 + (c // 4) * (64 * 4) + (r % 64) * 4 + (c % 4)
    assert np.array_equal(blob[offsets], weights.view(np.uint8) ^ 0x80)


@settings(max_examples=25, deadline=None)
@given(groups=st.integers(1, 3), tiles=st.integers(1, 20), seed=st.integers(0, 2**32 - 1))
def test_build_then_parse_round_trips(groups, tiles, seed):
    rng = np.random.default_rng(seed)
    rows, cols = 64 * groups, 4 * tiles
    weights = rng.integers(-128, 128, size=(rows, cols), dtype=np.int8)
    overhead = rng.integers(0, 256, size=overhead_size(rows), dtype=np.uint8)
    blob = build_blob(weights, overhead)
    assert blob.size == blob_size(rows, cols)
    back, back_overhead = parse_blob(blob.tobytes(), rows, cols)
    assert np.array_equal(back, weights)
    assert np.array_equal(back_overhead, overhead)


def test_bad_shapes_and_sizes_are_refused():
    with pytest.raises(WeightsError, match="multiple of 64"):
        build_blob(np.zeros((100, 64), np.int8), np.zeros(512, np.uint8))
    with pytest.raises(WeightsError, match="int8"):
        build_blob(np.zeros((64, 64), np.float32), np.zeros(512, np.uint8))
    with pytest.raises(ModelFormatError, match="overhead has 100 bytes"):
        build_blob(np.zeros((64, 64), np.int8), np.zeros(100, np.uint8))
    with pytest.raises(ModelFormatError, match="blob has 10 bytes"):
        parse_blob(b"\0" * 10, 64, 64)
