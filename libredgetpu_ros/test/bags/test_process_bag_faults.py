"""``process-bag`` under SIGTERM, SIGKILL and bit flips (issue 18 item 3), in real processes.

- SIGTERM: exit 130 like Ctrl-C, the output bag closed (metadata.yaml, summary) and readable.
- SIGKILL: the output has no metadata.yaml; ``bag-repair`` gives back its whole chunks, readable.
- 64 flipped bits in the input: frames of damaged chunks are counted failures (``corrupt_chunk``), the
  others processed (the issue saw "20 processed, 0 failed" with 4 wrong results).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]

CLASSIFY = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


def _config(tmp: Path, fixture_path: Any, annotated: bool = False) -> Path:
    import yaml

    params = {"model": str(fixture_path(CLASSIFY)), "backend": "cpu", "task": "classify", "top_k": 3,
              "publish_annotated": annotated}
    path = tmp / "classify.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    return path


def _input(tmp: Path, fixture_path: Any, loop: int, name: str = "in") -> Path:
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag

    make_bag([fixture_path("images/cat.bmp"), fixture_path("images/grace_hopper.bmp")], tmp / name,
             MakeBagOptions(loop=loop, start_ns=1_700_000_000_000_000_000), progress=False)
    return tmp / name


def _long_input(tmp: Path, frames: int = 20_000) -> Path:
    """A long bag of tiny frames: minutes of work for process-bag, a few MB on disk."""
    import cv2
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag

    image = tmp / "tiny.png"
    cv2.imwrite(str(image), np.random.default_rng(1).integers(0, 256, (24, 32, 3), dtype=np.uint8))
    make_bag([image], tmp / "long", MakeBagOptions(loop=frames, start_ns=1_700_000_000_000_000_000),
             progress=False)
    return tmp / "long"


def _started(ros_env, tmp: Path, fixture_path: Any) -> tuple[subprocess.Popen, Path]:
    """process-bag running on a long input, once its output holds a whole chunk (> 1 MiB) of results."""
    bag, out = _long_input(tmp), tmp / "out"
    proc = ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.cli.main", "process-bag", str(bag), str(out),
                          "--config", str(_config(tmp, fixture_path, annotated=True))], "process_bag",
                         expect_exit=True)
    deadline = time.monotonic() + 60
    while not any(out.glob("*.mcap")) or next(out.glob("*.mcap")).stat().st_size < 1_200_000:
        assert proc.poll() is None, "process-bag ended before it could be interrupted"
        assert time.monotonic() < deadline, "process-bag wrote no whole chunk in 60 s"
        time.sleep(0.05)
    return proc, out


def _count(bag: Path) -> int:
    from libredgetpu_ros.bags.storage import open_reader

    reader = open_reader(bag)
    try:
        return sum(1 for _ in reader.messages())
    finally:
        reader.close()


def test_sigterm_closes_the_output_like_ctrl_c(ros_env, tmp_path: Path, fixture_path) -> None:
    proc, out = _started(ros_env, tmp_path, fixture_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    assert (out / "metadata.yaml").exists()
    assert _count(out) > 0


def test_after_sigkill_bag_repair_recovers_the_output(ros_env, tmp_path: Path, fixture_path) -> None:
    from libredgetpu_ros.bags.repair import repair_bag
    from libredgetpu_ros.bags.storage import open_reader
    from libredgetpu_ros.errors import InputError

    proc, out = _started(ros_env, tmp_path, fixture_path)
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    with pytest.raises(InputError):
        open_reader(out)
    summary = repair_bag(out, tmp_path / "fixed")
    assert summary.messages > 0 and summary.files[0].corrupt_chunks == 0
    assert _count(tmp_path / "fixed") == summary.messages


def test_flipped_bits_fail_their_frames_instead_of_giving_wrong_results(ros_env, tmp_path: Path,
                                                                         fixture_path) -> None:
    from libredgetpu_ros.ros.bag_processing import process_bag

    bag = _input(tmp_path, fixture_path, loop=10)
    mcap = next(bag.glob("*.mcap"))
    data = bytearray(mcap.read_bytes())
    rng = np.random.default_rng(64)
    header_end = 4096  # keep the magic, header and first schema/channel records intact
    for _ in range(64):
        at = int(rng.integers(header_end, len(data) - 4096))  # into the chunks, not the summary
        data[at] ^= 1 << int(rng.integers(8))
    mcap.write_bytes(bytes(data))
    summary = process_bag(bag, tmp_path / "out", _config(tmp_path, fixture_path))
    assert summary.frames == 20
    assert summary.failures["corrupt_chunk"] > 0
    assert summary.processed + sum(summary.failures.values()) == 20
