"""Synthetic .mgk files from the real MIPS toolchain: inspect finds every layer, scale record and the weight
region; extract returns exactly the weights the test put in (CLI and library)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.errors import ConfigError, ModelFormatError
from libredgetpu_ros.ingenic import load_mgk, load_table, parse_table

from .._helpers import one_error_line

builder = sys.modules["_mgk_builder"]   # loaded by this folder's conftest.py
HERE = Path(__file__).resolve().parent


def _expected(layer) -> dict[str, np.ndarray]:
    if layer.layout == "nmhwsoib2" or layer.layout == "raw":
        return {layer.name: layer.weights}
    return {f"{layer.name}.{gate}": value for gate, value in layer.weights.items()}


def test_elf_view_matches_binutils_readelf(synthetic):
    model = load_mgk(synthetic.path)
    names = builder.readelf_sections(synthetic.workdir / "model.so")
    assert [s.name for s in model.elf.sections] == names
    assert {".text", ".rodata", ".data.rel.ro"} <= set(names)
    # ld writes the section header table last: the ELF data ends where the linked file ends.
    assert model.elf.tail_offset == len(synthetic.so_bytes)
    shoff = builder.elf32_field(synthetic.so_bytes, "e_shoff")
    assert model.elf.section_table == (shoff, 40 * len(names))


def test_inspect_finds_every_layer_scale_record_and_the_weight_region(synthetic, tmp_path, capsys):
    table = tmp_path / "table.yaml"
    table.write_text(yaml.safe_dump(synthetic.table))
    assert main(["mgk", "inspect", str(synthetic.path), "--table", str(table), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    region = info["weight_region"]
    assert region["offset"] == len(synthetic.so_bytes) + synthetic.gap
    assert region["gap_after_elf"] == synthetic.gap == 1792
    assert region["offset"] + region["size"] == len(synthetic.data)
    by_name = {layer["name"]: layer for layer in info["layers"]}
    assert set(by_name) == {layer.name for layer in synthetic.layers}
    for k, layer in enumerate(synthetic.layers):
        row = by_name[layer.name]
        assert (row["layer_id"], row["type"], row["layout"]) == (layer.layer_id, layer.type, layer.layout)
        assert row["offset"] == synthetic.offsets[layer.name] and row["size"] == len(layer.packed())
        assert (row["scale_record"], row["scale_source"], row["source"]) == (k, "table", "file+table")
        assert row["stats"]["bytes"] == row["size"]       # byte statistics of each placed layer
    assert [(r["input_scale"], r["weight_scale"], r["input_zero_point"], r["weight_zero_point"],
             tuple(r["ids"])) for r in info["scale_records"]] == [
        (la.scale.input_scale, la.scale.weight_scale, la.scale.input_zero_point, la.scale.weight_zero_point,
         la.scale.ids) for la in synthetic.layers]
    assert info["enum_tables"]["seed"]["verdict"] == "no evidence"


def test_inspect_without_a_table_still_names_layers_records_and_region(synthetic, capsys):
    assert main(["mgk", "inspect", str(synthetic.path)]) == 0
    out = capsys.readouterr().out
    for layer in synthetic.layers:
        assert layer.name in out
    assert "scale records: 6" in out and f"offset {len(synthetic.so_bytes)} " in out
    model = load_mgk(synthetic.data)
    # Random gap bytes are no header prefix: the default region starts right after the ELF data.
    assert model.weights_offset == len(synthetic.so_bytes) and model.prefix.size == 0
    assert all(layer.offset is None and layer.scale_record is None for layer in model.layers)


@pytest.mark.parametrize("layout", ["oihw", "raw"])
def test_extract_returns_exactly_the_weights_put_in(synthetic, tmp_path, capsys, layout):
    table = tmp_path / "table.yaml"
    table.write_text(yaml.safe_dump(synthetic.table))
    out = tmp_path / "weights.npz"
    assert main(["mgk", "extract", str(synthetic.path), str(out), "--table", str(table),
                 "--layout", layout]) == 0
    assert str(out) in capsys.readouterr().out
    with np.load(out, allow_pickle=False) as npz:
        got = dict(npz)
    for layer in synthetic.layers:
        if layout == "raw":
            assert got[layer.name].tobytes() == layer.packed()
        else:
            for key, value in _expected(layer).items():
                assert got[key].dtype == np.int8
                np.testing.assert_array_equal(got[key], value, err_msg=key)
        assert got[f"{layer.name}.weight_scale"] == np.float32(layer.scale.weight_scale)
    np.testing.assert_array_equal(got["__scale_records__"], np.array(
        [(la.scale.input_scale, la.scale.weight_scale) for la in synthetic.layers], np.float32))
    np.testing.assert_array_equal(got["__scale_record_zero_points__"], np.array(
        [(la.scale.input_zero_point, la.scale.weight_zero_point) for la in synthetic.layers], np.int32))
    np.testing.assert_array_equal(got["__scale_record_ids__"], [la.scale.ids for la in synthetic.layers])


def test_extract_without_table_saves_the_region_raw(synthetic, tmp_path, capsys):
    out = tmp_path / "region.npz"
    assert main(["mgk", "extract", str(synthetic.path), str(out)]) == 0
    printed = capsys.readouterr().out
    assert "no layer offsets known" in printed
    assert "6 scale records saved as found; no layer is paired" in printed
    with np.load(out) as npz:
        assert npz["__weights_region__"].tobytes() == synthetic.data[len(synthetic.so_bytes):]
        assert npz["__scale_records__"].shape == (6, 2)
        assert not [key for key in npz.files if key.endswith(".weight_scale")]   # no pairing, no layer scale


def test_dequantized_weights_use_the_layer_scale_record(synthetic):
    model = load_mgk(synthetic.data, parse_table(synthetic.table))
    arrays, _ = model.extract()
    from libredgetpu_ros.ingenic.layouts import dequantize
    conv = synthetic.layers[0]
    w = dequantize(arrays[conv.name], arrays[f"{conv.name}.weight_scale"])
    np.testing.assert_allclose(w, conv.weights.astype(np.float32) * np.float32(conv.scale.weight_scale),
                               rtol=1e-7)


def test_absolute_base_explicit_scale_records_and_enum_fit(synthetic):
    doc = json.loads(json.dumps(synthetic.table))
    doc["weights_base"] = {"offset": len(synthetic.so_bytes) + synthetic.gap}
    doc["layers"][0].update(scale_record=5, format_value=4, dtype_value=7)    # Venus values
    doc["layers"][2].update(format_value=4)
    model = load_mgk(synthetic.data, parse_table(doc))
    assert (model.layers[0].scale_record, model.layers[0].scale_source) == (5, "table")
    assert model.enum_fit["venus"]["verdict"] == "consistent" and model.enum_fit["venus"]["checked"] == 3
    assert model.enum_fit["seed"]["verdict"] == "inconsistent"
    assert "NMHWSOIB2 is 3 in this table, found 4 (NMC32)" in model.enum_fit["seed"]["conflicts"][0]
    doc["layers"][0].update(format_value=3, dtype_value=12)                   # the seed's values
    doc["layers"][2].update(format_value=3)
    fit = load_mgk(synthetic.data, parse_table(doc)).enum_fit
    assert fit["seed"]["verdict"] == "consistent" and fit["venus"]["verdict"] == "inconsistent"


def test_table_layer_missing_from_the_file_and_file_layer_missing_from_the_table(synthetic):
    doc = json.loads(json.dumps(synthetic.table))
    doc["layers"] = [*doc["layers"][:2], {"name": "main_conv_region", "offset": 0, "size": 2048}]
    model = load_mgk(synthetic.data, parse_table(doc))
    rows = {layer.name: layer for layer in model.layers}
    assert rows["main_conv_region"].source == "table" and rows["main_conv_region"].layout == "nmhwsoib2"
    assert "blocks of 32x32" in rows["main_conv_region"].shape_guess
    assert rows[synthetic.layers[5].name].source == "file" and rows[synthetic.layers[5].name].offset is None
    assert len(model.layers) == 7


def test_weight_offsets_past_the_end_are_refused(synthetic, tmp_path, capsys):
    doc = json.loads(json.dumps(synthetic.table))
    doc["layers"][-1]["offset"] = len(synthetic.data)
    with pytest.raises(ModelFormatError, match="end past the end of the file"):
        load_mgk(synthetic.data, parse_table(doc))
    doc = json.loads(json.dumps(synthetic.table))
    doc["weights_base"] = {"after_elf": 10**9}
    with pytest.raises(ModelFormatError, match=r"weight region offset \d+ is past the end"):
        load_mgk(synthetic.data, parse_table(doc))
    # The CLI: one error line, exit 2, and an existing good output left untouched.
    table, out = tmp_path / "t.yaml", tmp_path / "good.npz"
    table.write_text(yaml.safe_dump(doc))
    out.write_bytes(b"previous good file")
    code = main(["mgk", "extract", str(synthetic.path), str(out), "--table", str(table)])
    one_error_line(code, capsys.readouterr().err, "past the end")
    assert out.read_bytes() == b"previous good file"


def test_a_failed_write_leaves_no_partial_file_and_keeps_the_old_one(synthetic, tmp_path, monkeypatch):
    out = tmp_path / "w.npz"
    out.write_bytes(b"previous good file")

    def fail_midway(fh, **arrays):
        fh.write(b"PK partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", fail_midway)
    table = tmp_path / "t.yaml"
    table.write_text(yaml.safe_dump(synthetic.table))
    assert main(["mgk", "extract", str(synthetic.path), str(out), "--table", str(table)]) == 2
    assert out.read_bytes() == b"previous good file"
    assert sorted(os.listdir(tmp_path)) == ["t.yaml", "w.npz"]
    monkeypatch.undo()
    assert main(["mgk", "extract", str(synthetic.path), str(out), "--table", str(table)]) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask    # not mkstemp's 0600


@pytest.mark.parametrize("doc, message", [
    ([1, 2], "mapping with 'layers'"),
    ({"layers": []}, "1..10000 entries"),
    ({"layers": [{"name": "a", "offset": -1, "size": 4}]}, r"a\.offset must be an integer"),
    ({"layers": [{"name": "a", "offset": True, "size": 4}]}, r"a\.offset must be an integer"),
    ({"layers": [{"name": "a", "offset": 0, "layout": "nmhwsoib2", "size": 1000}]}, "not a multiple of 1024"),
    ({"layers": [{"name": "a", "offset": 0, "layout": "gru_bidirectional", "size": 4096}]}, "12864 bytes"),
    ({"layers": [{"name": "a", "offset": 0, "shape": [32, 32, 3, 3], "size": 1024}]}, "9216 bytes"),
    ({"layers": [{"name": "a", "offset": 0, "layout": "raw"}]}, "give size"),
    ({"layers": [{"name": "a", "offset": 0, "layout": "conv"}]}, "layout must be one of"),
    ({"layers": [{"name": "a", "offset": 0, "size": 4, "colour": 1}]}, "unknown keys"),
    ({"layers": [{"name": "../evil", "offset": 0, "size": 4}]}, "name must be 1-128 of"),
    ({"layers": [{"name": "", "offset": 0, "size": 4}]}, "name must be 1-128 of"),
    ({"layers": [{"name": "a", "offset": 0, "size": 4}, {"name": "a", "offset": 8, "size": 4}]}, "repeat"),
    ({"weights_base": {"offset": 1, "after_elf": 2}, "layers": [{"name": "a", "offset": 0, "size": 4}]},
     "weights_base must be"),
])
def test_bad_tables_are_config_errors(doc, message):
    with pytest.raises(ConfigError, match=message):
        parse_table(doc, "t.yaml")


def test_table_files(tmp_path, synthetic):
    with pytest.raises(ConfigError, match="does not exist"):
        load_table(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("layers: [unclosed")
    with pytest.raises(ConfigError, match="cannot read it as YAML"):
        load_table(bad)
    doc = json.loads(json.dumps(synthetic.table))
    doc["layers"].append({**doc["layers"][1], "name": "layer_46_again"})
    with pytest.raises(ConfigError, match="layer_46_again and an earlier entry both match the file's "
                                          "layer_46_QuantizeGRU"):
        load_mgk(synthetic.data, parse_table(doc))
    doc = json.loads(json.dumps(synthetic.table))
    doc["layers"][0]["scale_record"] = 99
    with pytest.raises(ConfigError, match="scale_record 99, the file has 6 scale records"):
        load_mgk(synthetic.data, parse_table(doc))


_TABLE_KEYS = st.sampled_from(["name", "offset", "size", "layout", "shape", "scale_record", "format_value",
                               "dtype_value", "layer_id", "layers", "weights_base", "after_elf", "x"])
_yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**45, 2**45) | st.text(max_size=12)
    | st.sampled_from(["nmhwsoib2", "raw", "auto", "gru_bidirectional", "layer_4_x"]),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TABLE_KEYS, inner, max_size=6),
    max_leaves=25)


_near_valid = st.fixed_dictionaries({"layers": st.lists(st.fixed_dictionaries(
    {"name": st.sampled_from(["layer_4_a", "layer_46_gru", "b"]),
     "offset": st.integers(0, 4096) | st.integers(-2, 1 << 41),
     "size": st.sampled_from([1024, 4096, 12864, 448, 0, True]) | st.integers(-1, 1 << 20)},
    optional={"layout": st.sampled_from(
        ["auto", "nmhwsoib2", "raw", "gru_bidirectional", "gru_unidirectional", "conv"]),
        "shape": st.lists(st.integers(-1, 70), min_size=3, max_size=5), "scale_record": st.integers(-1, 9),
        "format_value": st.integers(-3, 20)}), min_size=1, max_size=3, unique_by=lambda d: d["name"])},
    optional={"weights_base": st.dictionaries(st.sampled_from(["offset", "after_elf", "y"]),
                                              st.integers(-1, 1 << 41), max_size=2)})


@settings(max_examples=600, deadline=1000, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_yaml_values | _near_valid)
def test_fuzzed_tables_parse_or_give_config_errors(doc):
    """Any YAML-shaped document: a table, or a ConfigError naming the field (1 s per case)."""
    try:
        table = parse_table(doc, "fuzz.yaml")
    except ConfigError:
        return
    assert table.layers and all(layer.size > 0 for layer in table.layers)


def test_docs_aec_table_reads_a_file_of_that_shape(mips_toolchain, tmp_path):
    """The seed's AEC offset table, as docs/ingenic.md prints it, parses and drives inspect/extract on a
    toolchain-built file with a 153,644-byte region 1,792 bytes after the ELF data (random weights)."""
    docs = (HERE.parents[2] / "docs" / "ingenic.md").read_text()
    block = docs.split("```yaml\n# The design seed's AEC table", 1)[1].split("```", 1)[0].split("\n", 1)[1]
    table = parse_table(yaml.safe_load(block), "docs/ingenic.md")
    assert len(table.layers) == 23 and table.base_after_elf == 1792
    so = builder.build_shared_object(tmp_path, ["layer_46_QuantizeGRU", "layer_37_QuantizeGRU",
                                                "layer_4_QuantizeFeature"],
                                      [builder.Record(0.02, 0.1, 0, -20, (1, 76, 19, 23))] * 3)
    region = np.random.default_rng(3).integers(-128, 128, 153_644, dtype=np.int8)
    data = so + bytes(1792) + region.tobytes()
    model = load_mgk(data, table)
    assert model.weights_offset == len(so) + 1792 and model.weights_size == 153_644
    rows = {layer.name: layer for layer in model.layers}
    assert rows["layer_46_QuantizeGRU"].layout == "gru_bidirectional"
    assert rows["layer_37_QuantizeGRU"].source == "file+table" and rows["layer_37_QuantizeGRU"].offset == (
        model.weights_offset + 0x220C0)
    assert max(layer.offset + layer.size for layer in model.layers) == len(data)
    arrays, _ = model.extract()
    np.testing.assert_array_equal(arrays["layer_37_QuantizeGRU.weight_hh"],
                                  region[0x220C0 + 2048:0x220C0 + 4096].reshape(64, 32))
    assert arrays["layer_22_feature"].tobytes() == region[0x25140:].tobytes()
