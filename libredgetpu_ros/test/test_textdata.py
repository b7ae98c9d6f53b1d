"""textdata: bounded YAML / JSON reading of user files (issue 21 items 3, 7, 8).

Each refusal is checked for its kind and its bounded message; the hostile inputs (alias bombs, 100,000-deep
nesting that segfaults libyaml's composer) run in a subprocess with a time and address-space limit, so a
regression fails the test instead of taking the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml
from libredgetpu_ros.errors import InputError, TextDataError

from libredgetpu_ros import textdata

from ._helpers import run_limited


def billion_laughs(levels: int = 9, width: int = 10) -> str:
    """The classic YAML alias bomb: ~400 bytes that expand to width**levels nodes."""
    lines = ['a0: &a0 ["lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def run_code(code: str, timeout_s: float = 30.0, memory_mb: int = 1024) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter capped at ``memory_mb`` of address space and ``timeout_s``."""
    return run_limited([sys.executable, "-"], input=textwrap.dedent(code), timeout=timeout_s,
                       memory=memory_mb << 20)


def test_alias_bomb_refused() -> None:
    with pytest.raises(TextDataError, match="aliases expand to more than") as info:
        textdata.load_yaml(billion_laughs(), "bomb.yaml")
    assert info.value.kind == "limit" and isinstance(info.value, InputError)
    assert len(str(info.value)) < 200


def test_aliases_within_budget_load_as_pyyaml_loads_them() -> None:
    text = "q: &q {scale: 0.5, zero_pt: 0}\na: *q\nb: *q\n"
    assert textdata.load_yaml(text) == yaml.safe_load(text)


def test_recursive_alias_refused() -> None:
    with pytest.raises(TextDataError, match="recursive structure"):
        textdata.load_yaml("a: &x [1, *x]\n")


@pytest.mark.parametrize("make_text", ['"a: " + "[" * 100_000 + "]" * 100_000',   # C loader path (> 128 KB)
                                       '"a: " + "[" * 2_000 + "]" * 2_000',       # pure-Python path
                                       '"".join(f"{\' \' * i}k{i}:\\n" for i in range(150))'])  # block style
def test_deep_nesting_refused(make_text: str) -> None:
    # In a subprocess: on libyaml's composer this nesting is a segfault, not an exception.
    proc = run_code(f"""
        from libredgetpu_ros import textdata
        from libredgetpu_ros.errors import TextDataError
        try:
            textdata.load_yaml({make_text}, "deep.yaml")
        except TextDataError as exc:
            print(exc.kind, exc)
        """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("limit deep.yaml: nested deeper than 100 levels"), proc.stdout


def test_nesting_at_the_budget_loads() -> None:
    assert textdata.load_yaml("[" * 100 + "]" * 100, max_depth=100) is not None
    with pytest.raises(TextDataError, match="deeper than 100"):
        textdata.load_yaml("[" * 101 + "]" * 101, max_depth=100)


@pytest.mark.parametrize(("data", "offset"), [("a: 1\n".encode("utf-16"), 0),   # UTF-16 with its BOM
                                              (b"a: caf\xe9\n", 6)])             # a Latin-1 byte
def test_text_must_be_utf8(data: bytes, offset: int) -> None:
    with pytest.raises(TextDataError, match=f"not UTF-8 text: byte 0x.. at offset {offset}") as info:
        textdata.load_yaml(data, "t.yaml")
    assert info.value.kind == "UnicodeDecodeError"


def test_utf8_bom_is_accepted() -> None:
    assert textdata.load_yaml("\ufeffa: 1\n".encode()) == {"a": 1}


@pytest.mark.parametrize(("text", "kind"), [("a: [1, 2", "ParserError"), ("a: 0000-01-01", "ValueError"),
                                             ("a: " + "1" * 5000, "ValueError"), ("a: 1\n---\nb: 2\n",
                                                                                 "ComposerError")])
def test_yaml_errors_are_typed_and_bounded(text: str, kind: str) -> None:
    with pytest.raises(TextDataError) as info:
        textdata.load_yaml(text, "x.yaml")
    assert info.value.kind == kind and len(str(info.value)) < 600


@pytest.mark.parametrize(("content", "kind"), [("a:\t1\n", "ScannerError"),  # libyaml takes it
                                               ("bad: {\t\n", "ScannerError"),  # libyaml: ParserError
                                               ("x: {a: [1, 2.5, null, true, 2024-01-01, 'q']}\n", None)])
def test_the_same_content_gets_the_same_verdict_at_any_size(content: str, kind: str | None) -> None:
    """Before: texts over 128 KB were loaded by libyaml's C loader, which accepts `a:<tab>1` (PyYAML, femtorun
    and launch refuse it) and names some errors by another class: the same file was valid when large and
    invalid when small. Now PyYAML's verdict and values at both sizes (the padding is comments: cheap to
    scan in pure Python)."""
    small = "k: 0\n" + content
    large = "k: 0\n" + ("# " + "-" * 76 + "\n") * 1_700 + content
    assert len(small) < 128 * 1024 < len(large)
    if kind is None:
        assert textdata.load_yaml(small) == textdata.load_yaml(large) == yaml.safe_load(small)
        return
    with pytest.raises(yaml.YAMLError) as pyyaml:
        yaml.safe_load(small)
    for text in (small, large):
        with pytest.raises(TextDataError) as ours:
            textdata.load_yaml(text)
        assert ours.value.kind == type(pyyaml.value).__name__ == kind, (len(text), ours.value)


def test_yaml_default_budget_bounds_the_pure_python_load() -> None:
    """PyYAML's pure-Python loader reads every YAML text: one over the YAML default (4 MiB, ~14 s of CPU
    here) is refused before parsing; a reader that expects more passes its own max_bytes."""
    text = "a: 1\n" + "#" * textdata.MAX_YAML_BYTES
    with pytest.raises(TextDataError, match=f"larger than the {textdata.MAX_YAML_BYTES} accepted") as info:
        textdata.load_yaml(text)
    assert info.value.kind == "limit"


def test_size_budget(tmp_path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: 1\n" * 1000)
    with pytest.raises(TextDataError, match="larger than the 100 accepted"):
        textdata.load_yaml_file(big, "table", max_bytes=100)
    with pytest.raises(TextDataError, match="does not exist") as info:
        textdata.load_yaml_file(tmp_path / "absent.yaml", "table")
    assert info.value.kind == "FileNotFoundError"
    # a folder with a name longer than the message clip: tested as given, shown clipped
    folder = tmp_path / ("d" * 200)
    folder.mkdir()
    with pytest.raises(TextDataError, match=r"d\.\.\. \(\d+ characters\) is a folder, not a regular file"):
        textdata.load_yaml_file(folder, "table")


@pytest.mark.timeout(30)  # a regression blocks on the FIFO: the timeout names it
@pytest.mark.parametrize("reader", [textdata.load_yaml_file, textdata.load_json_file])
def test_a_fifo_device_or_socket_is_named_by_its_kind_without_blocking(tmp_path, reader) -> None:
    """Before: "is not a file" for each (every other reader names the kind: paths.open_regular)."""
    import os
    import socket

    fifo = tmp_path / "in.yaml"
    os.mkfifo(fifo)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s.yaml"))
        for path, kind in ((fifo, "a FIFO"), (tmp_path / "s.yaml", "a socket"), ("/dev/zero", "a device")):
            with pytest.raises(TextDataError, match=f"^config {path} is {kind}, not a regular file$") as info:
                reader(path, "config")
            assert info.value.kind == "OSError" and info.value.origin == str(path)


def test_json_depth_is_measured_outside_strings() -> None:
    assert textdata.json_depth(b'{"a": "[[[[{{", "b": [1, [2, "\\\\"], "]]"]}') == 3
    assert textdata.json_depth(b'["\\"[[[", [[]]]') == 3
    doc = {"traces": [{"events": [{"send": ["a", "[b"]}] * 3}]}
    assert textdata.json_depth(json.dumps(doc).encode()) == 6


def test_json_deep_nesting_refused_without_recursion() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(TextDataError, match="nested 200000 levels deep") as info:
        textdata.load_json(deep, "t.json")
    assert info.value.kind == "limit"
    with pytest.raises(TextDataError) as info:
        textdata.load_json(b'{"a": 1', "t.json")
    assert info.value.kind == "JSONDecodeError"
    with pytest.raises(TextDataError, match="not UTF-8"):
        textdata.load_json(b'{"a": "\xff"}', "t.json")


def test_clip_and_clip_repr_stay_bounded() -> None:
    shared: list = ["lol"]
    for _ in range(30):  # 10**30 elements if expanded: a full repr would never finish
        shared = [shared] * 10
    assert len(textdata.clip_repr(shared)) <= textdata.CLIP + 40
    assert textdata.clip("x" * 60_000_000, 50).endswith("... (60000000 characters)")
    assert textdata.clip_repr("y" * 10_000).startswith("'yyy")


def test_file_larger_than_it_says_is_read_within_budget() -> None:
    # /proc files report size 0 and can hold more than the budget: the read stops one byte past it.
    with pytest.raises(TextDataError, match="larger than the 64 bytes accepted"):
        textdata.read_file("/proc/self/maps", "maps", max_bytes=64)
