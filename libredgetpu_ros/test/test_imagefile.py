"""The one image reader (``imagefile``; issue 30 item 2): every format's size read from its header and checked
against the pixel budget before OpenCV decodes; the bombs of the issue refused by every CLI command that
takes an image, in a worker capped at 200 MiB of address space above its start (before: 2.1-2.6 GB RSS, cv2
tracebacks; under the cap, OpenCV's "Insufficient memory" traceback)."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.errors import ImageError
from libredgetpu_ros.imagefile import DEFAULT_MAX_PIXELS, BadImage, decode, header_size, read_image

from .fuzz.harness import run_guarded
from .ros._crafted_images import ENCODINGS, encoded_image, header_bombs, png_header_bomb


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_each_format_header_and_the_budget_boundary(name: str) -> None:
    data = encoded_image(name)
    assert header_size(data, name) == (ENCODINGS[name][2], 64, 48)
    assert decode(data, name, max_pixels=64 * 48).shape == (48, 64, 3)  # exactly the budget: decoded
    with pytest.raises(BadImage, match="64x48 = 3072 pixels, over the budget of 3071") as info:
        decode(data, name, max_pixels=64 * 48 - 1)
    assert info.value.cause == "too_large"


@pytest.mark.parametrize("name", sorted(header_bombs()))
def test_bombs_are_refused_from_the_header_within_200_mib(name: str) -> None:
    data, width, height = header_bombs()[name]
    assert header_size(data, name)[1:] == (width, height)

    def read(data: bytes) -> None:
        decode(data, name)

    outcome = run_guarded(read, data, (BadImage,), time_limit_s=5.0, memory_limit_mb=200)
    assert outcome.kind == "refused", outcome
    assert f"{width}x{height} = {width * height} pixels" in outcome.message, outcome


def test_other_formats_never_reach_opencv(tmp_path: Path) -> None:
    for data in (b"#?RADIANCE\n" + bytes(64), b"v/1\x01" + bytes(64), b"GIF89a" + bytes(64), b""):
        with pytest.raises(BadImage) as info:
            decode(data, "x")
        assert info.value.cause in ("format", "empty")


def test_files_that_are_not_regular_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "x.png"
    os.mkfifo(fifo)
    with pytest.raises(ImageError, match=r"x\.png is a FIFO"):
        read_image(fifo)  # a FIFO with no writer: open(2) without O_NONBLOCK would wait forever
    with pytest.raises(ImageError, match="is a folder"):
        read_image(tmp_path)
    with pytest.raises(ImageError, match="does not exist"):
        read_image(tmp_path / "missing.png")
    big = tmp_path / "big.png"
    with big.open("wb") as handle:
        handle.truncate(1536 * 1024 * 1024)  # a 1.5 GiB sparse file: refused from its size, never read
    with pytest.raises(BadImage, match=r"big\.png: 1610612736 bytes is larger than the 268435456 accepted"):
        read_image(big)


def test_default_budget_is_the_documented_one() -> None:
    assert DEFAULT_MAX_PIXELS == 4096 * 4096  # docs/reliability.md section 6


def _commands(image: str, out: Path) -> dict[str, list[str]]:
    return {
        "infer": ["infer", "--model", "ssd_mobilenet_v1_coco", "--image", image],
        "retarget --template": ["retarget", "pattern_64x64_8x8_1ch", "--template", image, "-o",
                                str(out / "o_edgetpu.tflite")],
        "robotics spot": ["robotics", "spot", "--model", "color_red_64x64", "--backend", "cpu", image],
        "robotics pattern --template": ["robotics", "pattern", "--model", "pattern_64x64_8x8_1ch",
                                        "--backend", "cpu", "--template", image, image],
        "make-bag --images": ["make-bag", "--images", image, "--out", str(out / "bag")],
    }


@pytest.mark.parametrize("command", sorted(_commands("", Path())))
def test_every_cli_image_input_refuses_the_70_byte_bomb(command: str, tmp_path: Path) -> None:
    """The issue's 70-byte PNG claiming 2^31 pixels, given to each command: one `error:` line naming the
    file and the size, exit 2, inside 200 MiB (before: 2.1 GB RSS; under the cap a cv2 traceback)."""
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_header_bomb(46341))
    argv = _commands(str(bomb), tmp_path)[command]

    def run(_: bytes) -> None:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        lines = err.getvalue().strip().splitlines()
        if code != 2 or len(lines) != 1 or "bomb.png" not in lines[0] or "46341x46341" not in lines[0]:
            raise AssertionError(f"exit {code}: {err.getvalue()[:2000]}")

    outcome = run_guarded(run, b"", (), time_limit_s=60.0, memory_limit_mb=200)
    assert outcome.kind == "accepted", outcome
    assert not (tmp_path / "o_edgetpu.tflite").exists() and not (tmp_path / "bag").exists()
