"""Scale records, per-channel runs, the header prefix, ELF identity and region statistics.

Synthetic files come from the real MIPS toolchain with the scale area laid out as in the public AEC sample
(``_mgk_builder._scale_area``); record offsets are located independently with ``bytes.find`` on the packed
record. The real sample is used when ``LIBREDGETPU_ROS_REAL_MGK`` points at it (never committed).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.ingenic import load_mgk
from libredgetpu_ros.ingenic.regionstats import region_stats
from libredgetpu_ros.ingenic.rodata import find_channel_runs, find_scale_records

builder = sys.modules["_mgk_builder"]   # loaded by this folder's conftest.py

REAL_MGK = os.environ.get("LIBREDGETPU_ROS_REAL_MGK")
REAL_SHA256 = "64f3af7fda4be84718a3ef70218264cf1b077ef9239b1ef25e25f0f1be7a7638"


def _packed(record) -> bytes:
    return struct.pack("<4f12i", record.input_scale, record.input_scale, record.weight_scale,
                       record.weight_scale, *[record.input_zero_point] * 2, *[record.weight_zero_point] * 2,
                       *record.ids, -1, -1, -1, 0)


def _words(words: list[str]) -> bytes:
    return struct.pack(f"<{len(words)}I", *(int(w, 0) for w in words))


def test_records_are_found_exactly_and_nothing_else(synthetic):
    model = load_mgk(synthetic.data)
    expected = [synthetic.so_bytes.find(_packed(layer.scale)) for layer in synthetic.layers]
    assert all(offset > 0 for offset in expected)
    assert [r.offset for r in model.scale_records] == expected     # near-records and seams not taken
    for record, layer in zip(model.scale_records, synthetic.layers, strict=True):
        scale = layer.scale
        assert (record.input_scale, record.weight_scale) == (scale.input_scale, scale.weight_scale)
        assert (record.input_zero_point, record.weight_zero_point, record.ids) == (
            layer.scale.input_zero_point, layer.scale.weight_zero_point, layer.scale.ids)
        assert record.trailer == (-1, -1, -1, 0)


def test_per_channel_runs_are_reported_as_arrays_not_records(synthetic):
    model = load_mgk(synthetic.data)
    runs = model.channel_runs
    assert [(r.count, r.kind, r.value) for r in runs] == [
        run for k in range(6) for run in ((128, "i32", 20 + 7 * k), (128, "f32", 10.0 + 3.5 * k))]
    for run in runs:     # no record overlaps a run, and every float run ends where its record starts
        assert all(not run.offset <= r.offset < run.offset + 4 * run.count for r in model.scale_records)
    float_ends = [r.offset + 4 * r.count for r in runs if r.kind == "f32"]
    assert float_ends == [r.offset for r in model.scale_records]


@pytest.mark.parametrize("name", sorted(builder.NEAR_RECORDS))
def test_each_near_record_is_refused(name):
    """Each near-record breaks one field; the valid control beside it is found."""
    trailer = ["0xffffffff"] * 4
    good = _words(builder._near() + trailer)
    assert [r.offset for r in find_scale_records(good, 0)] == [0]
    assert find_scale_records(_words(builder.NEAR_RECORDS[name] + trailer), 0) == []


def test_seam_between_a_float_run_and_an_int_run_is_not_a_record():
    """Four equal floats then eight equal small ints pass every field test; the run test refuses them."""
    data = _words([builder._f32_word(1.5)] * 20 + ["20"] * 40)
    assert find_scale_records(data, 0) == []
    assert [(r.count, r.kind) for r in find_channel_runs(data, 0)] == [(20, "f32"), (40, "i32")]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(0, 6))
def test_planted_records_among_noise_and_runs_are_found_exactly(seed, count):
    """Records planted at random word offsets in random words and 16..63-word runs: exactly those found."""
    rng = np.random.default_rng(seed)
    words = rng.integers(0, 2**32, 2000, dtype=np.uint32)
    # runs of one float or one small int, apart: two runs laid over each other left a float run and an int run
    # cut below MIN_RUN and meeting (4 equal floats, 8 equal ints: a record by every rule; seed 695, count 0)
    for start in rng.choice(np.arange(0, 1900, 64), 6, replace=False):
        value = np.float32(rng.uniform(1, 30)).view(np.uint32) if rng.random() < 0.5 else rng.integers(1, 200)
        words[start:start + rng.integers(16, 64)] = value
    planted = sorted(rng.choice(np.arange(0, 1984, 20), count, replace=False).tolist())
    for k, at in enumerate(planted):
        in_scale, w_scale = (float(np.float32(v)) for v in rng.uniform(1e-3, 1, 2))
        in_zp, w_zp = (int(v) for v in rng.integers(-255, 1, 2))
        record = builder.Record(in_scale, w_scale, in_zp, w_zp, (2 * k + 1, 70, 19, 23))
        words[at:at + 16] = np.frombuffer(_packed(record), np.uint32)
    assert [r.offset for r in find_scale_records(words.tobytes(), 0)] == [4 * at for at in planted]


def test_unaligned_section_offsets_read_words_aligned_in_the_file():
    record = builder.Record(0.02, 0.05, -6, -20, (3, 72, 17, 25))
    data = b"\x00" * 3 + _packed(record)      # the section starts at file offset 1: record at file offset 4
    assert [r.offset for r in find_scale_records(data, 1)] == [4]


def test_header_prefix_is_shown_apart_and_the_region_starts_after_it(mips_toolchain, tmp_path, capsys):
    layers = builder.random_layers(np.random.default_rng(9))
    synthetic = builder.SyntheticMgk([layers[1], layers[2]], header_blocks=True).build(tmp_path)
    tail = len(synthetic.so_bytes)
    model = load_mgk(synthetic.data)
    assert (model.prefix.offset, model.prefix.size) == (tail, 1792)
    assert [block.words for block in model.prefix.blocks] == list(builder.AEC_PREFIX_WORDS)
    assert (model.weights_offset, model.weights_base_source) == (tail + 1792, "after prefix")
    path = tmp_path / "p.mgk"
    path.write_bytes(synthetic.data)
    assert main(["mgk", "inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"header prefix: offset {tail} (0x{tail:x}), 1792 bytes, 7 sparse 256-byte blocks" in out
    assert f"block at {tail + 3 * 256}: +0: abaaaaaaaaaaaaaa, +8: acaaaaaaaaaaaaaa" in out
    assert f"block at {tail + 6 * 256}: all zero" in out
    assert f"weight region: offset {tail + 1792} " in out and "(start: after prefix)" in out
    assert main(["mgk", "inspect", "--json", str(path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["header_prefix"]["blocks"][4]["words"] == [{"at": 0, "hex": "9c60ffff10edffff"},
                                                           {"at": 128, "hex": "0e8585391d353a3b"}]
    # extract keeps the prefix bytes apart from the region
    arrays, _ = model.extract()
    assert arrays["__header_prefix__"].tobytes() == synthetic.data[tail:tail + 1792]
    assert arrays["__weights_region__"].tobytes() == synthetic.data[tail + 1792:]


def test_a_sparse_first_layer_is_not_taken_for_a_prefix(mips_toolchain, tmp_path):
    """A 3-input-channel convolution right after the ELF data is mostly zero padding; it is weights."""
    layers = builder.random_layers(np.random.default_rng(9))
    assert layers[0].weights.shape[1] == 3
    synthetic = builder.SyntheticMgk([layers[0], layers[1]], gap=0).build(tmp_path)
    model = load_mgk(synthetic.data)
    assert model.prefix.size == 0
    assert (model.weights_offset, model.weights_base_source) == (len(synthetic.so_bytes), "end of ELF data")


def test_elf_identity_in_text_and_json(synthetic, capsys):
    header = subprocess.run([builder.READELF, "-h", str(synthetic.workdir / "model.so")], check=True,
                            capture_output=True, text=True).stdout
    flags = header.split("Flags:", 1)[1].split("\n")[0].split(",")
    assert "mips32r2" in [f.strip() for f in flags]
    assert main(["mgk", "inspect", "--json", str(synthetic.path)]) == 0
    elf = json.loads(capsys.readouterr().out)["elf"]
    assert (elf["class"], elf["endianness"], elf["machine"], elf["arch"]) == (
        "ELF32", "little", "EM_MIPS", "mips32r2")
    assert int(elf["flags"], 16) == int(flags[0].strip(), 16)
    assert main(["mgk", "inspect", str(synthetic.path)]) == 0
    assert f"ELF32 little-endian EM_MIPS ET_DYN (e_flags {elf['flags']}: mips32r2)" in capsys.readouterr().out


def test_region_stats_tell_int8_weights_from_packed_nibbles():
    rng = np.random.default_rng(1)
    int8 = np.clip(np.round(rng.normal(0, 32, 100_000)), -128, 127).astype(np.int8).view(np.uint8)
    nibbles = rng.integers(0, 16, (100_000, 2), dtype=np.uint8)
    packed = (nibbles[:, 0] | (nibbles[:, 1] << 4)).astype(np.uint8)
    a, b = region_stats(int8), region_stats(packed)
    assert a["nibble_tvd"] > 0.3 and a["share_abs_ge_64"] < 0.1
    assert b["nibble_tvd"] < 0.02 and 0.45 < b["share_abs_ge_64"] < 0.55
    assert region_stats(np.zeros(0, np.uint8))["nibble_tvd"] is None
    assert region_stats(np.array([0x40, 0xC0, 0x3F, 0xC1], np.uint8))["share_abs_ge_64"] == 0.5   # 64, -64


@pytest.mark.skipif(not REAL_MGK or not Path(REAL_MGK).is_file(),
                    reason="set LIBREDGETPU_ROS_REAL_MGK to AEC_T41_16K_NS_OUT_UC.mgk (thingino-accel)")
def test_the_real_aec_sample(tmp_path):
    data = Path(REAL_MGK).read_bytes()
    assert hashlib.sha256(data).hexdigest() == REAL_SHA256
    model = load_mgk(data)
    info = model.describe()
    assert {k: info["elf"][k] for k in ("class", "endianness", "machine", "arch")} == {
        "class": "ELF32", "endianness": "little", "machine": "EM_MIPS", "arch": "mips32r2"}
    assert (model.prefix.offset, model.prefix.size) == (494_484, 1792)
    assert (model.weights_offset, model.weights_size) == (0x79294, 153_644)
    records = model.scale_records
    assert [r.offset for r in records] == [0x6D410, 0x6D928, 0x6DDFC, 0x6E2D0, 0x6E7A4]
    assert [(r.input_zero_point, r.weight_zero_point) for r in records] == [
        (0, 0), (-6, -20), (0, -60), (0, -20), (-135, -57)]
    assert [r.ids for r in records] == [(1, 76, 19, 23), (3, 72, 17, 25), (5, 69, 15, 27), (7, 66, 13, 29),
                                        (9, 63, 11, 31)]
    assert np.float32(records[0].weight_scale) == np.float32(0.10354071)
    kinds = [(r.count, r.kind) for r in model.channel_runs]
    assert kinds == [(128, "f32")] + [(128, "i32"), (128, "f32")] * 4
    assert len(model.layer_names) == 24 and all(layer.scale_record is None for layer in model.layers)
    stats = info["weight_region"]["stats"]
    assert stats["nibble_tvd"] < 0.1 and stats["share_abs_ge_64"] > 0.4     # not what int8 weights give
    arrays, notes = model.extract()
    assert arrays["__scale_records__"].shape == (5, 2) and "5 scale records saved as found" in notes[-1]
