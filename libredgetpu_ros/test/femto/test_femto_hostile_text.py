"""Hostile IOSpec and trace files (issue 21 items 3, 7, 8): alias bombs, deep nesting, encodings, huge
numbers, YAML dates, huge names. Verdicts are compared with the real femtorun 4.1.2 where it has one; the
bombs run through the real CLI in a subprocess with a time and address-space cap (before the fix: 48 s and
1.78 GB for ``iospec check``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.errors import IOSpecError
from libredgetpu_ros.femto import load_iospec

from .._helpers import CLI, one_error_line, run_limited

femtorun = pytest.importorskip("femtorun")


def _femtorun_verdict(path: Path) -> str:
    try:
        femtorun.IOSpec(str(path))
    except Exception as exc:
        return type(exc).__name__
    return "accepted"


def _ours(path: Path) -> str:
    try:
        load_iospec(path)
    except IOSpecError as exc:
        return exc.kind
    return "accepted"


def _bomb_iospec(fixture_path, levels: int = 9) -> str:
    """A valid fixture IOSpec with a billion-laughs block in a comment femtorun never checks (~1.2 KB)."""
    doc = Path(fixture_path("femto/add_bc_api.yaml")).read_text()
    lol = ['    l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lol += [f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    name = next(iter(yaml.safe_load(doc)["inputs"]))
    return doc.replace(f"  {name}:\n", f"  {name}:\n    comments:\n" + "\n".join(
        " " * 2 + line for line in lol) + "\n", 1).replace("    comments: {}\n", "", 1)


def test_alias_bomb_iospec_refused_quickly(fixture_path, tmp_path) -> None:
    spec = tmp_path / "bomb.iospec.yaml"
    spec.write_text(_bomb_iospec(fixture_path))
    assert len(spec.read_bytes()) < 2000
    with pytest.raises(IOSpecError, match="aliases expand to more than") as info:
        load_iospec(spec)
    assert info.value.kind == "limit"
    proc = run_limited([*CLI, "iospec", "check", str(spec)], memory=1536 << 20, timeout=30)  # before: 48 s
    one_error_line(proc.returncode, proc.stderr, "alias")


def test_small_aliases_keep_femtorun_verdict(fixture_path, tmp_path) -> None:
    # The fixtures use one anchor for shared comments; a 3-level bomb (1,000 nodes) is within budget.
    spec = tmp_path / "small.iospec.yaml"
    spec.write_text(_bomb_iospec(fixture_path, levels=3))
    assert _ours(spec) == _femtorun_verdict(spec) == "accepted"


@pytest.mark.parametrize("encode", [lambda t: t.encode("utf-16"),                 # UTF-16 with BOM
                                    lambda t: t.replace("varname: B", "varname: B\xe9").encode("latin-1"),
                                    lambda t: t.encode("utf-8-sig")])             # UTF-8 BOM: accepted
def test_encodings_get_femtorun_verdict(fixture_path, tmp_path, encode) -> None:
    spec = tmp_path / "enc.yaml"
    spec.write_bytes(encode(Path(fixture_path("femto/add_bc_api.yaml")).read_text()))
    assert _ours(spec) == _femtorun_verdict(spec)


def test_latin1_byte_message_names_the_offset(fixture_path, tmp_path) -> None:
    spec = tmp_path / "latin1.yaml"
    spec.write_bytes(b"inputs:\n  B: {varname: caf\xe9}\n")
    with pytest.raises(IOSpecError, match=r"byte 0xe9 at offset 26") as info:
        load_iospec(spec)
    assert info.value.kind == "UnicodeDecodeError"


def test_huge_scale_accepted_like_femtorun(fixture_path, tmp_path) -> None:
    text = Path(fixture_path("femto/add_bc_api.yaml")).read_text()
    doc = yaml.safe_load(text)
    for vec in doc["inputs"].values():
        vec["quantization"] = {"scale": 10**400, "zero_pt": 10**400}
    spec = tmp_path / "huge.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert _ours(spec) == _femtorun_verdict(spec) == "accepted"
    loaded = load_iospec(spec)
    assert all(v.scale is None for v in loaded.inputs.values())
    assert any("quantization.scale" in w and "not a positive number" in w for w in loaded.warnings)
    assert all(len(w) < 400 for w in loaded.warnings)  # the 401-digit values are clipped


def test_check_json_on_a_yaml_date(fixture_path, tmp_path, capsys) -> None:
    doc = yaml.safe_load(Path(fixture_path("femto/add_bc_api.yaml")).read_text())
    for vec in doc["inputs"].values():
        vec["length_64b_words"] = "DATE"
    spec = tmp_path / "date.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False).replace("DATE", "2024-01-01"))
    assert _femtorun_verdict(spec) == "accepted"
    assert main(["iospec", "check", str(spec), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["inputs"][0]["length_64b_words"] == "2024-01-01"


def test_huge_key_message_is_bounded(tmp_path) -> None:
    spec = tmp_path / "key.yaml"
    spec.write_text("? " + "x" * 200_000 + "\n: {}\n")  # an explicit key: no 1024-character limit
    with pytest.raises(IOSpecError, match="undefined IOSpec section header") as info:
        load_iospec(spec)
    assert info.value.kind == _femtorun_verdict(spec) == "ValueError"
    assert len(str(info.value)) < 800


def test_deep_yaml_iospec_refused(tmp_path) -> None:
    spec = tmp_path / "deep.yaml"
    spec.write_text("inputs:\n  B:\n    comments: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(IOSpecError, match="nested deeper than") as info:
        load_iospec(spec)
    assert info.value.kind == "limit"


def test_missing_or_oversized_iospec_names_the_field(fixture_path, tmp_path, monkeypatch) -> None:
    with pytest.raises(IOSpecError, match="does not exist") as info:
        load_iospec(tmp_path / "absent.yaml")
    assert (info.value.kind, info.value.key) == ("FileNotFoundError", "path")
    with pytest.raises(IOSpecError, match="is a folder, not a regular file") as info:
        load_iospec(tmp_path)
    assert (info.value.kind, info.value.key) == ("IsADirectoryError", "path")
    monkeypatch.setattr("libredgetpu_ros.femto.iospec.MAX_TEXT_BYTES", 100)
    with pytest.raises(IOSpecError, match="larger than the 100") as info:
        load_iospec(fixture_path("femto/single_io_fmot16.yaml"))
    assert (info.value.kind, info.value.key) == ("limit", "size")


def test_trace_json_deep_nesting_and_long_names(fixture_path, tmp_path, capsys) -> None:
    spec = str(fixture_path("femto/add_bc_api.yaml"))
    deep = tmp_path / "deep.json"
    deep.write_text('{"traces": ' + "[" * 100_000 + "]" * 100_000 + "}")  # before: RecursionError
    assert main(["iospec", "run", spec, "--trace", str(deep)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "nested" in err[0]
    long = tmp_path / "long.json"
    long.write_text(json.dumps([{"name": "n" * 10_000, "mode": "m" * 10_000, "events": []}]))
    assert main(["iospec", "run", spec, "--trace", str(long)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and len(err[0]) < 600
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"traces": [{"name": "\xff", "events": []}]}')
    assert main(["iospec", "run", spec, "--trace", str(bad)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_yaml_syntax_error_is_one_cli_line(tmp_path, capsys) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("inputs:\n  B: {type: input\n  C: [1,\n")
    assert main(["iospec", "check", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "not valid YAML" in err


@pytest.mark.parametrize("damage", ["", "  bad: [1,\n  - 2\n", "\t"])
def test_large_iospec_on_the_c_loader_gets_femtorun_verdict(tmp_path, damage: str) -> None:
    """A large IOSpec (over 128 KB, where libyaml's C loader once read it) gets femtorun's verdict and kind,
    valid or not."""
    vec = ("  in{i}:\n    type: input\n    varname: in{i}\n    length: 4\n    precision: 16\n"
           "    padded_length: 4\n    comments: {{}}\n")
    text = "inputs:\n" + "".join(vec.format(i=i) for i in range(1500)) + damage + (
        "outputs:\n  A: {type: output, varname: A, length: 4, precision: 16, padded_length: 4}\n"
        "simple_sequences:\n  s: {type: simple_sequence, inputs: [in0], outputs: [A]}\n")
    assert len(text) > 128 * 1024
    spec = tmp_path / "big.yaml"
    spec.write_text(text)
    assert _ours(spec) == _femtorun_verdict(spec)


@pytest.mark.parametrize(("lookup", "key"), [("input_by_name", "inputs"), ("output_by_name", "outputs")])
def test_an_unknown_vector_name_is_refused_naming_section_and_name(fixture_path, lookup, key) -> None:
    spec = load_iospec(fixture_path("femto/single_io_fmot16.yaml"))
    first = next(iter(getattr(spec, key).values()))
    assert getattr(spec, lookup)(first.name) is first
    with pytest.raises(IOSpecError, match=f"no {key[:-1]} named 'n+[.]{{3}}n+'") as info:
        getattr(spec, lookup)("n" * 500)
    assert (info.value.kind, info.value.key, info.value.value) == ("KeyError", key, "n" * 500)
    assert len(str(info.value)) < 300  # the name is clipped in the message
