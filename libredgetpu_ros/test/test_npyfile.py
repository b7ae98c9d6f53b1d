"""npyfile: .npy / .npz headers are checked against the bytes present before NumPy allocates."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.errors import InputError, WeightsError
from libredgetpu_ros.npyfile import read_npy, read_npz, read_npz_meta

from ._helpers import CLI, one_error_line, run_limited


def _lying_npy(path: Path, shape: tuple[int, ...], data: bytes = b"\0" * 64) -> Path:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    path.write_bytes(buf.getvalue() + data)
    return path


def test_npy_round_trip_and_refusals(tmp_path: Path) -> None:
    good = tmp_path / "w.npy"
    np.save(good, np.arange(12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_array_equal(read_npy(good), np.arange(12, dtype=np.float32).reshape(3, 4))
    declared = r"header declares \[100000, 100000\] float32 \(40000000000 bytes\), the file holds 64"
    with pytest.raises(WeightsError, match=declared):
        read_npy(_lying_npy(tmp_path / "big.npy", (100000, 100000)), "weights", error=WeightsError)
    with pytest.raises(InputError, match="more than the 16 accepted"):
        read_npy(good, max_bytes=16)
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="pickles"):
        read_npy(tmp_path / "o.npy")
    (tmp_path / "junk.npy").write_bytes(b"\x93NUMPY junk")
    with pytest.raises(InputError, match=r"not a valid \.npy header"):
        read_npy(tmp_path / "junk.npy")
    with pytest.raises(InputError, match="does not exist"):
        read_npy(tmp_path / "none.npy")
    np.savez(tmp_path / "a.npz", w=np.ones(3, np.int8), unused=np.zeros(5))
    assert list(read_npz(tmp_path / "a.npz", names=["w"])) == ["w"]


@pytest.mark.parametrize("reader", [read_npy, read_npz])
def test_a_fifo_folder_or_socket_is_named_by_its_kind_at_once(tmp_path: Path, reader) -> None:
    """Before: "is not a file" for each (and a check then a second open by path). A FIFO with no writer
    is opened without blocking: were the read to wait for a writer, the writer thread below would feed it
    a valid .npy and the read would return an array instead of the error."""
    import os
    import socket
    import threading

    fifo = tmp_path / "w.fifo"
    os.mkfifo(fifo)
    done = threading.Event()

    def late_writer() -> None:  # unblocks a read that waited on the FIFO, so the test ends either way
        if not done.wait(5):
            buf = io.BytesIO()
            np.save(buf, np.ones(3, np.float32))
            with open(fifo, "wb") as out:
                out.write(buf.getvalue())

    writer = threading.Thread(target=late_writer, daemon=True)
    writer.start()
    try:
        with pytest.raises(WeightsError, match=r"weights .*w\.fifo is a FIFO, not a regular file$"):
            reader(fifo, "weights", error=WeightsError)
    finally:
        done.set()
        writer.join(10)
    with pytest.raises(WeightsError, match="is a folder, not a regular file"):
        reader(tmp_path, "weights", error=WeightsError)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s"))
        with pytest.raises(WeightsError, match="is a socket, not a regular file"):
            reader(tmp_path / "s", "weights", error=WeightsError)


@pytest.mark.parametrize("command", [["blob", "--template", "dense_256"],
                                     ["export-tpulang", "dense", "--template", "256"]])
def test_weights_npy_lying_about_its_shape_is_one_error_line(tmp_path: Path, command: list[str]) -> None:
    """A 200-byte .npy declaring 37 GiB given as --weights. Before: np.load asked for 37 GiB (a
    MemoryError traceback under the 2 GiB cap this test sets)."""
    weights = _lying_npy(tmp_path / "w.npy", (100000, 100000))
    out = "--out", str(tmp_path / ("o.bin" if command[0] == "blob" else "o"))

    proc = run_limited([*CLI, *command, "--weights", str(weights), *out], memory=2 << 30, timeout=120)
    one_error_line(proc.returncode, proc.stderr, "header declares")


def test_control_node_initial_weights_lying_header_fails_configure_typed(tmp_path: Path) -> None:
    """The control node's `initial_weights` parameter: a .npy whose header declares 37 GiB is a ConfigError
    at configure (before: np.load's MemoryError out of the configure transition)."""
    from libredgetpu_ros.errors import ConfigError
    from libredgetpu_ros.ros.control.controller import Controller
    from libredgetpu_ros.ros.control.params import PARAMETERS, ControlConfig

    values = {spec.name: spec.default for spec in PARAMETERS}
    values.update(backend="cpu", state_size=5, command_size=3,
                  initial_weights=str(_lying_npy(tmp_path / "w.npy", (100000, 100000))))
    with pytest.raises(ConfigError, match=r"parameter initial_weights: .* header declares"):
        Controller(ControlConfig(**values))
    np.save(tmp_path / "ok.npy", np.zeros((3, 5), np.float32))
    controller = Controller(ControlConfig(**{**values, "initial_weights": str(tmp_path / "ok.npy")}))
    controller.close()


def test_an_unclosed_header_is_typed_not_a_tokenizer_error(tmp_path: Path) -> None:
    """Found by the ``readout`` fuzz target (issue 30): a header dict cut mid-tuple made NumPy's header
    parser raise ``tokenize.TokenError`` (an untyped error in ``~/load_readout``'s path)."""
    import struct

    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (2, \n"
    path = tmp_path / "cut.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(16))
    with pytest.raises(InputError, match=r"not a valid \.npy header"):
        read_npy(path)


def test_npz_with_json_metadata_one_reader_for_readouts_and_databases(tmp_path: Path) -> None:
    """read_npz_meta: the array and the metadata dict, or the caller's error naming the file and what is
    wrong (the reservoir's readouts and the embedding databases both read through it)."""
    import json

    def saved(name: str, **members: object) -> Path:
        path = tmp_path / name
        np.savez(path, **members)
        return path

    def read(path: Path, **kw: object):
        return read_npz_meta(path, "reservoir readout file", "fmt.v1", "weights", max_bytes=1 << 20,
                             array_bytes=1 << 10, meta_bytes=1 << 10, error=WeightsError, **kw)

    meta_text = json.dumps({"format": "fmt.v1", "n": 2})
    good = saved("good.npz", weights=np.ones((2, 3), np.float32), meta=np.array(meta_text))
    values, meta = read(good, dtype=np.float64)
    assert values.dtype == np.float64 and values.shape == (2, 3) and meta == {"format": "fmt.v1", "n": 2}
    refusals = {
        saved("no_meta.npz", weights=np.ones(2)): r"not a reservoir readout file \(no or bad 'meta'\)",
        saved("bad_json.npz", weights=np.ones(2), meta=np.array("{")): r"meta: .*",
        saved("a_list.npz", weights=np.ones(2), meta=np.array("[1]")): r"format is \[1\], expected fmt\.v1",
        saved("old.npz", weights=np.ones(2), meta=np.array('{"format": "fmt.v0"}')):
            r"format is 'fmt\.v0', expected fmt\.v1",
        saved("text.npz", weights=np.array(["x"]), meta=np.array('{"format": "fmt.v1"}')):
            r"not a reservoir readout file \(no or bad could not convert",
        saved("big.npz", weights=np.ones(1000), meta=np.array('{"format": "fmt.v1"}')):
            r"more than the 1024 accepted for it",
    }
    for path, message in refusals.items():
        with pytest.raises(InputError, match=message) as info:
            read(path, dtype=np.float64)
        assert path.name in str(info.value), info.value
    with pytest.raises(InputError, match=r"not an embedding database file \(no or bad 'embeddings'\)"):
        read_npz_meta(good, "embedding database file", "fmt.v1", "embeddings", max_bytes=1 << 20,
                      array_bytes=1 << 10, meta_bytes=1 << 10)
