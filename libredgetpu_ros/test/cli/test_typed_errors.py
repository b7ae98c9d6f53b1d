"""Issue 30 items 4 and 5 (CLI and model side): each input that ended in an untyped exception, a wrong exit
code or a multi-GB read, replayed through the real command: one `error:` line and the documented exit code
(2 = bad input, docs/reliability.md), in bounded time and memory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.fixtures import fixture

PATTERN = "pattern_64x64_8x8_1ch"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    return code, err


def _one_error_line(code: int, err: str, words: str, exit_code: int = 2) -> None:
    lines = err.strip().splitlines()
    assert code == exit_code and lines and lines[-1].startswith("error: ") and words in lines[-1], (code, err)
    assert "Traceback" not in err


def _copy_template(name: str, folder: Path) -> Path:
    """The fixture template ``name`` (twin, sidecar, compiled model if any) copied into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for src in fixture("robotics").rglob(f"{name}*"):
        shutil.copy(src, folder / src.name)
    return folder / f"{name}.tflite"


def _patch(folder: Path) -> Path:
    """An 8x8 grey patch (the kernel of pattern_64x64_8x8_1ch)."""
    import cv2
    import numpy as np

    path = folder / "patch.png"
    cv2.imwrite(str(path), (np.arange(64, dtype=np.uint8).reshape(8, 8) * 4))
    return path


def test_a_sparse_1_5_gib_twin_is_refused_from_its_size(tmp_path: Path, capsys) -> None:
    """Before: read whole (1.6 GB, 12-15 s), then refused. Run under a 512 MiB address-space cap."""
    twin = _copy_template(PATTERN, tmp_path / "t")
    with twin.open("r+b") as handle:
        handle.truncate(1536 * 1024 * 1024)
    code = (f"import resource,sys\nresource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))\n"
            f"from libredgetpu_ros.cli.main import main\n"
            f"code = main(['retarget', {str(twin)!r}, '--template', {str(_patch(tmp_path))!r}, '-o', "
            f"{str(tmp_path / 'o_edgetpu.tflite')!r}])\n"
            f"print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\nsys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    _one_error_line(done.returncode, done.stderr, "1610612736 bytes is larger than the 67108864 accepted")
    # Peak RSS of this process image in KiB (VmHWM: ru_maxrss would carry pytest's from before exec).
    assert int(done.stdout.split()[-1]) < 400 * 1024, done.stdout  # the 1.5 GiB were never read


def test_load_model_has_a_size_cap(tmp_path: Path) -> None:
    from libredgetpu_ros.errors import ModelFormatError
    from libredgetpu_ros.formats import load_model

    big = tmp_path / "big.tflite"
    with big.open("wb") as handle:
        handle.truncate(1536 * 1024 * 1024)
    with pytest.raises(ModelFormatError, match="1610612736 bytes is larger than the 536870912 accepted"):
        load_model(big)
    os.mkfifo(tmp_path / "fifo.tflite")
    with pytest.raises(ModelFormatError, match="is a FIFO"):
        load_model(tmp_path / "fifo.tflite")


def test_conv_weight_offsets_of_2_63_are_a_format_error(tmp_path: Path, capsys) -> None:
    """Before: OverflowError from np.array(dtype=intp)."""
    twin = _copy_template(PATTERN, tmp_path / "t")
    sidecar = twin.with_name(f"{PATTERN}_edgetpu.json")
    data = json.loads(sidecar.read_text())
    data["conv_weight_offsets"][0] = 2**63
    sidecar.write_text(json.dumps(data))
    code, err = _cli(capsys, "retarget", str(twin), "--template", str(_patch(tmp_path)), "-o",
                     str(tmp_path / "o_edgetpu.tflite"))
    _one_error_line(code, err, "conv_weight_offsets")


@pytest.fixture
def deep_tree(tmp_path: Path):
    """A chain of 1,100 nested one-letter folders (made relative, under PATH_MAX per call), removed
    iteratively afterwards: pytest's own cleanup (shutil.rmtree) recurses and would fail on it."""
    root = tmp_path / "deep"
    root.mkdir()
    cwd = os.getcwd()
    made = 0
    try:
        os.chdir(root)
        for _ in range(1100):
            os.mkdir("d")
            os.chdir("d")
            made += 1
        os.chdir(cwd)
        yield root
    finally:
        os.chdir(root)
        for _ in range(made - 1):
            os.chdir("d")
        for _ in range(made):
            os.rmdir("d")
            os.chdir("..")
        os.chdir(cwd)


def test_1100_deep_folders_are_typed_errors(tmp_path: Path, capsys, monkeypatch, deep_tree: Path) -> None:
    """Before: RecursionError tracebacks in `models import` and the template search."""
    deep = deep_tree
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("LIBREDGETPU_ROS_MODELS", raising=False)
    code, err = _cli(capsys, "models", "import", str(deep))
    _one_error_line(code, err, "more than 32 folders deep")
    monkeypatch.setenv("LIBREDGETPU_ROS_TEMPLATES", str(deep))
    code, err = _cli(capsys, "retarget", "no_such_template", "--color", "1", "0", "0", "-o",
                     str(tmp_path / "o_edgetpu.tflite"))
    _one_error_line(code, err, "more than 32 folders deep")


def test_templates_variable_naming_proc_is_a_typed_error(tmp_path: Path, capsys, monkeypatch) -> None:
    """Before: FileNotFoundError (a process gone while /proc was globbed) as a traceback."""
    monkeypatch.setenv("LIBREDGETPU_ROS_TEMPLATES", "/proc")
    code, err = _cli(capsys, "retarget", "no_such_template", "--color", "1", "0", "0", "-o",
                     str(tmp_path / "o_edgetpu.tflite"))
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err


def test_templates_variable_that_is_a_file_is_said(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("LIBREDGETPU_ROS_TEMPLATES", str(tmp_path / "file"))
    code, err = _cli(capsys, "retarget", "no_such_template", "--color", "1", "0", "0", "-o",
                     str(tmp_path / "o_edgetpu.tflite"))
    _one_error_line(code, err, "is not a folder and was not searched")


def test_a_corrupt_twin_litert_rejects_is_bad_input(tmp_path: Path, capsys) -> None:
    """Before: BackendError, exit 1 (the docs say bad input is 2). The twin parses but LiteRT refuses it:
    its first CONV_2D's filter buffer is cut to nothing (our reader accepts an absent buffer)."""
    from libredgetpu_ros.formats import load_model

    model = "classify/mobilenet_v1_0.25_128_quant"
    work = tmp_path / "m"
    work.mkdir()
    for suffix in ("_edgetpu.tflite", ".tflite"):
        shutil.copy(fixture(f"{model}{suffix}"), work / Path(model + suffix).name)
    twin = work / Path(model + ".tflite").name
    data = bytearray(twin.read_bytes())
    ops = load_model(bytes(data)).operators
    assert ops
    del data[len(data) // 2:]  # LiteRT: "The model is not a valid Flatbuffer buffer"
    twin.write_bytes(bytes(data) + bytes(16))
    compiled = work / Path(model + "_edgetpu.tflite").name
    code, err = _cli(capsys, "infer", "--model", str(compiled), "--backend", "cpu", "--image",
                     str(fixture("images/grace_hopper.bmp")))
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: "), err


def test_a_full_disk_under_sqlite3_is_one_error_line(tmp_path: Path) -> None:
    """`make-bag --storage sqlite3` with the file size capped (RLIMIT_FSIZE: EFBIG, as a full disk).
    Before: sqlite3.OperationalError traceback, exit 1."""
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(4):
        shutil.copy(fixture("images/grace_hopper.bmp"), frames / f"{i}.bmp")
    code = ("import resource,signal,sys\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (600_000, 600_000))\n"
            "from libredgetpu_ros.cli.main import main\n"
            f"sys.exit(main(['make-bag', '--images', {str(frames)!r}, '--out', {str(tmp_path / 'bag')!r}, "
            "'--storage', 'sqlite3', '--no-progress']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    _one_error_line(done.returncode, done.stderr, "sqlite3")
    assert not (tmp_path / "bag").exists()


def test_negative_exponent_values_can_be_typed(tmp_path: Path, capsys) -> None:
    """`--color -1e30 1 0`: argparse took -1e30 for an option ("expected 3 arguments"); now it is a value
    (and the colour is checked as any other)."""
    code, err = _cli(capsys, "retarget", "color_red_64x64", "--color", "-1e30", "1", "0.5", "-o",
                     str(tmp_path / "x_edgetpu.tflite"))
    assert code == 0, err
    code, err = _cli(capsys, "retarget", "color_red_64x64", "--color", "-inf", "1", "0", "-o",
                     str(tmp_path / "y_edgetpu.tflite"))
    _one_error_line(code, err, "must be finite")
