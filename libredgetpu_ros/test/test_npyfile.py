"""npyfile: .npy / .npz headers are checked against the bytes present before NumPy allocates."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.errors import InputError, WeightsError
from libredgetpu_ros.npyfile import read_npy, read_npz

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
