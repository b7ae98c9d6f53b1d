"""padding_examples.json: femtorun's padding, word counts, packing; plus our quantize / prepare_input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from libredgetpu_ros.errors import IOSpecError
from libredgetpu_ros.femto import parse_iospec
from libredgetpu_ros.femto.vectors import (
    dequantize,
    femtorun_pad,
    femtorun_unpad,
    pack_words,
    prepare_input,
    quantize,
    unpack_words,
    words_femtodriver,
    words_packed,
)


@pytest.fixture(scope="module")
def examples(fixture_path) -> dict:
    return json.loads(fixture_path("femto/padding_examples.json").read_text())


def _spec(desc: dict):
    """An IOSpec from the examples' compact form (one sequence: all inputs -> all outputs)."""
    def vec(v, kind):
        return {"type": kind, "varname": v["name"], "length": v["length"], "precision": v["precision"],
                "padded_length": v["padded_length"], "quantization": {"scale": 1.0, "zero_pt": 0},
                "comments": {}}
    doc = {"inputs": {v["name"]: vec(v, "input") for v in desc["inputs"]},
           "outputs": {v["name"]: vec(v, "output") for v in desc["outputs"]},
           "simple_sequences": {"s": {"type": "simple_sequence",
                                      "inputs": [v["name"] for v in desc["inputs"]],
                                      "outputs": [v["name"] for v in desc["outputs"]]}}}
    return parse_iospec(yaml.safe_dump(doc), "example")


def test_io_padding_property(examples) -> None:
    for ex in examples["io_padding_property"]:
        spec = _spec(ex["spec"])
        assert {k: [list(a), list(b)] for k, (a, b) in spec.input_padding.items()} == ex["input_padding"]
        assert {k: [list(a), list(b)] for k, (a, b) in spec.output_padding.items()} == ex["output_padding"]


def test_runner_pad_unpad(examples) -> None:
    seen = set()
    for ex in examples["runner_pad_unpad"]:
        spec = _spec(ex["spec"])
        (name, sent), = ex["send"].items()
        values = np.array(sent["values"], dtype=sent["dtype"])
        after = ex["after_send"]
        if ex["runner_kwargs"].get("quantize"):
            # FemtoRunner(quantize=True) raises NotImplementedError; we quantize outside the runner instead.
            assert after["type"] == "NotImplementedError"
            seen.add(ex["name"])
            continue
        if ex["name"] == "not_reset":  # our engine is reset when made: there is no un-reset state
            assert after["type"] == "RuntimeError"
            seen.add(ex["name"])
            continue
        if name not in spec.input_padding:
            with pytest.raises(IOSpecError) as err:
                spec.input_by_name(name)
            assert err.value.kind == after["type"] == "KeyError"
            seen.add(ex["name"])
            continue
        (length,), (padded,) = spec.input_padding[name]
        if not ex["runner_kwargs"].get("pad", True):
            got = values  # pad=False: passed through
        elif after["outcome"] == "error":
            with pytest.raises(IOSpecError) as err:
                femtorun_pad(values, length, padded)
            assert (err.value.kind, err.value.femtorun_message) == (after["type"], after["message"])
            seen.add(ex["name"])
            continue
        else:
            got = femtorun_pad(values, length, padded)
        want = after["runner_received"][name]
        assert got.tolist() == want["values"] and str(got.dtype) == want["dtype"], ex["name"]
        (out, reply), = ex["replies_from_runner"].items()
        reply_values = np.array(reply["values"], dtype=reply["dtype"])
        (out_length,), _ = spec.output_padding[out]
        if ex["after_recv"]["outcome"] == "error":
            with pytest.raises(IOSpecError) as err:
                femtorun_unpad(reply_values, out_length)
            assert (err.value.kind, err.value.femtorun_message) == (
                ex["after_recv"]["type"], ex["after_recv"]["message"])
        else:
            unpadded = reply_values if not ex["runner_kwargs"].get("pad", True) else femtorun_unpad(
                reply_values, out_length)
            assert unpadded.tolist() == ex["after_recv"]["returned"][out]["values"], ex["name"]
        seen.add(ex["name"])
    assert len(seen) == len(examples["runner_pad_unpad"]) == 11


def test_length_64b_words(examples) -> None:
    for ex in examples["length_64b_words"]:
        n, p = ex["padded_length"], ex["precision"]
        assert words_femtodriver(n) == ex["femtodriver_length_64b_words"]
        assert words_femtodriver(n) == ex["formula_ceil_padded_length_div_4"]
        assert words_packed(n, p) == ex["formula_ceil_padded_length_times_precision_div_64"]
        packed = ex["pack_V_words_native_dtype"]
        if isinstance(packed, int):
            assert pack_words(np.arange(n, dtype=np.int16), p).shape == (packed,)
            assert (words_femtodriver(n) == packed) == ex["length_64b_words_matches_pack_V"]
        else:  # femtodriver's pack_V fails when n is not a multiple of 64 / precision; so do we, typed
            with pytest.raises(IOSpecError, match="multiple of"):
                pack_words(np.arange(n), p)


def test_pack_v(examples) -> None:
    for ex in examples["pack_V"]:
        words = pack_words(np.array(ex["elements"]), ex["precision"])
        assert [hex(int(w)) for w in words] == ex["packed_words_hex"]
        assert unpack_words(words, ex["precision"]).tolist() == ex["unpack_V_of_words"]


def test_femtofile_export_errors_are_warnings(examples) -> None:
    ex = examples["femtofile_export_errors"][0]
    spec = _spec({"inputs": [{"name": "a", "length": ex["length"], "precision": 16,
                              "padded_length": ex["padded_length"]}], "outputs": [], "latched": []})
    assert any("padded_length 8 is below length 10" in w for w in spec.warnings)


def test_quantize_round_trip_saturation_and_nan() -> None:
    spec = _spec({"inputs": [{"name": "a", "length": 3, "precision": 8, "padded_length": 8}],
                  "outputs": [], "latched": []})
    vec = spec.inputs["a"]
    vec = type(vec)(**{**vec.__dict__, "scale": 0.5})
    q = prepare_input(np.array([1.0, -300.0, 0.74]), vec)
    assert q.dtype == np.int8 and q.tolist() == [2, -128, 1, 0, 0, 0, 0, 0]
    assert dequantize(quantize(np.array([1.5]), vec), vec).tolist() == [1.5]
    with pytest.raises(IOSpecError, match="element 1 is nan"):
        prepare_input(np.array([0.0, np.nan, 1.0]), vec)
    with pytest.raises(IOSpecError, match="expected 3 values"):
        prepare_input(np.zeros(4), vec)
