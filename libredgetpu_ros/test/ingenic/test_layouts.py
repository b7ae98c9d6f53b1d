"""NMHWSOIB2 and GRU layouts: exact round trips for random shapes (channel counts off the 32 grid), agreement
with a per-element reference packer and with the seed's own unpacking recipe, dequantization."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libredgetpu_ros.errors import ModelFormatError, WeightsError
from libredgetpu_ros.ingenic import layouts

builder = sys.modules["_mgk_builder"]   # loaded by this folder's conftest.py

shapes = st.tuples(st.integers(1, 80), st.integers(1, 80), st.integers(1, 5), st.integers(1, 5))


def _random_int8(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)


@settings(max_examples=150, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_oihw_nmhwsoib2_round_trip_is_exact(shape, seed):
    w = _random_int8(shape, seed)
    packed = layouts.oihw_to_nmhwsoib2(w)
    assert packed.size == layouts.nmhwsoib2_size(*shape)
    back = layouts.nmhwsoib2_to_oihw(packed, *shape, strict_padding=True)
    assert back.dtype == np.int8 and back.shape == shape
    np.testing.assert_array_equal(back, w)


@settings(max_examples=150, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_nmhwsoib2_oihw_round_trip_from_bytes(shape, seed):
    """Bytes -> OIHW -> bytes is exact too when the padding bytes are zero (as packing writes them)."""
    packed = layouts.oihw_to_nmhwsoib2(_random_int8(shape, seed))
    again = layouts.oihw_to_nmhwsoib2(layouts.nmhwsoib2_to_oihw(packed.tobytes(), *shape))
    np.testing.assert_array_equal(again, packed)


@pytest.mark.parametrize("shape", [(40, 3, 3, 3), (1, 1, 1, 1), (33, 65, 1, 2), (64, 32, 1, 1),
                                   (17, 70, 5, 5)])
def test_packing_matches_the_per_element_reference_and_the_seed_recipe(shape):
    w = _random_int8(shape, 7)
    packed = layouts.oihw_to_nmhwsoib2(w)
    assert packed.tobytes() == builder.reference_pack_nmhwsoib2(w)
    # The seed's own unpacking (reshape to [N, M, KH, KW, 32, 32], transpose (0, 4, 1, 5, 2, 3)) gives the
    # padded OIHW kernel; ours is the same with the padding cut.
    n, m = -(-shape[0] // 32), -(-shape[1] // 32)
    seed_way = packed.reshape(n, m, shape[2], shape[3], 32, 32).transpose(0, 4, 1, 5, 2, 3).reshape(
        n * 32, m * 32, shape[2], shape[3])
    np.testing.assert_array_equal(seed_way[:shape[0], :shape[1]], w)
    assert not seed_way[shape[0]:].any() and not seed_way[:, shape[1]:].any()


def test_sizes_of_the_seed_table():
    assert layouts.nmhwsoib2_size(32, 32, 1, 1) == 1024
    assert layouts.nmhwsoib2_size(32, 32, 3, 3) == 9216
    assert layouts.nmhwsoib2_size(32, 32, 5, 5) == 25600
    assert layouts.GRU_BIDIR_BYTES == 12864 and layouts.GRU_UNIDIR_BYTES == 4096


def test_strict_padding_catches_a_wrong_shape():
    packed = layouts.oihw_to_nmhwsoib2(np.ones((32, 32, 1, 1), np.int8))
    with pytest.raises(ModelFormatError, match="padding"):
        layouts.nmhwsoib2_to_oihw(packed, 30, 32, 1, 1, strict_padding=True)
    assert layouts.nmhwsoib2_to_oihw(packed, 30, 32, 1, 1).shape == (30, 32, 1, 1)


def test_wrong_sizes_and_dtypes_are_typed_errors():
    with pytest.raises(ModelFormatError, match="must be 1024 bytes"):
        layouts.nmhwsoib2_to_oihw(b"\0" * 1000, 32, 32, 1, 1)
    with pytest.raises(WeightsError, match="int8"):
        layouts.oihw_to_nmhwsoib2(np.zeros((2, 2, 1, 1), np.float32))
    with pytest.raises(WeightsError, match="4 dimensions"):
        layouts.oihw_to_nmhwsoib2(np.zeros((2, 2), np.int8))
    with pytest.raises(WeightsError, match="positive"):
        layouts.nmhwsoib2_to_oihw(b"", 0, 1, 1, 1)
    with pytest.raises(ModelFormatError, match="12 blocks"):
        layouts.gru_blocks_to_gates(b"\0" * 12288, bidirectional=True)
    with pytest.raises(WeightsError, match="missing: weight_hh"):
        layouts.gates_to_gru_blocks({"weight_ih": np.zeros((64, 32), np.int8)}, bidirectional=False)
    with pytest.raises(WeightsError, match="weight_hh must be int8 of shape"):
        layouts.gates_to_gru_blocks({"weight_ih": np.zeros((64, 32), np.int8),
                                     "weight_hh": np.zeros((32, 32), np.int8)}, bidirectional=False)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), bidirectional=st.booleans())
def test_gru_gates_blocks_gates_round_trip_is_exact(seed, bidirectional):
    rng = np.random.default_rng(seed)
    if bidirectional:
        names = list(builder.GATES) + [f"{g}_reverse" for g in builder.GATES]
        gates = {g: rng.integers(-128, 128, (32, 32), dtype=np.int8) for g in names}
        gates["bias_raw"] = rng.integers(-128, 128, 576, dtype=np.int8)
    else:
        gates = {g: rng.integers(-128, 128, (64, 32), dtype=np.int8) for g in ("weight_ih", "weight_hh")}
    blocks = layouts.gates_to_gru_blocks(gates, bidirectional)
    assert blocks.tobytes() == builder.reference_pack_gru(gates, bidirectional)
    back = layouts.gru_blocks_to_gates(blocks, bidirectional)
    assert set(back) == set(gates)
    for name, value in gates.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)
    np.testing.assert_array_equal(layouts.gates_to_gru_blocks(back, bidirectional), blocks)


def test_gru_block_order_is_the_seeds():
    """Block k of a bidirectional GRU is gate k in (ir, iz, in, hr, hz, hn) forward then reverse."""
    data = np.repeat(np.arange(12, dtype=np.int8), 1024)
    data = np.concatenate([data, np.full(576, -1, np.int8)])
    gates = layouts.gru_blocks_to_gates(data, bidirectional=True)
    assert gates["weight_iz"].min() == gates["weight_iz"].max() == 1
    assert gates["weight_hn_reverse"].min() == 11
    assert (gates["bias_raw"] == -1).all()
    uni = layouts.gru_blocks_to_gates(np.repeat(np.arange(4, dtype=np.int8), 1024), bidirectional=False)
    assert set(np.unique(uni["weight_ih"])) == {0, 1} and set(np.unique(uni["weight_hh"])) == {2, 3}


def test_dequantize_and_quantize():
    q = np.array([[-128, 0, 127]], np.int8)
    np.testing.assert_allclose(layouts.dequantize(q, 0.5), [[-64.0, 0.0, 63.5]])
    per_row = layouts.dequantize(np.ones((2, 3), np.int8), np.array([0.1, 0.2], np.float32), axis=0)
    np.testing.assert_allclose(per_row, [[0.1] * 3, [0.2] * 3], rtol=1e-7)
    w = np.random.default_rng(0).uniform(-1, 1, (8, 4, 3, 3)).astype(np.float32)
    scale = np.abs(w).reshape(8, -1).max(axis=1) / 127
    q = layouts.quantize(w, scale)
    # Round trip within half a quantization step per output channel.
    assert (np.abs(layouts.dequantize(q, scale) - w) <= scale[:, None, None, None] / 2 + 1e-7).all()
    with pytest.raises(WeightsError, match="per-channel"):
        layouts.dequantize(q, np.ones(3, np.float32))
    with pytest.raises(WeightsError, match="positive"):
        layouts.quantize(w, 0.0)
