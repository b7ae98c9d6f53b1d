"""Fuzz target of the one image reader (``imagefile.decode``: the header of PNG, JPEG, BMP, TIFF, WebP or PNM
read without decoding, the pixel budget, then OpenCV's decoder). Seeds: a small real file of every format
(lossy and lossless WebP), a 300 x 200 deflate-bomb PNG and the header bombs of issue 30 item 2 (a size field
changed in a real file of each format); 60 % of the mutations fall in the first 200 bytes (the headers). Only
``BadImage`` may come out. ``test_fuzz_image_files.py`` runs a bounded budget in CI; for a long run::

    nice -n 19 .venv/bin/python libredgetpu_ros/test/fuzz/image_targets.py --cases 100000 --seed N
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from ..ros._crafted_images import ENCODINGS, encoded_image, header_bombs, png_bomb
    from .harness import FuzzTarget, long_run
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fuzz.harness import FuzzTarget, long_run
    from ros._crafted_images import ENCODINGS, encoded_image, header_bombs, png_bomb

from libredgetpu_ros.imagefile import BadImage, decode


def consume(data: bytes) -> None:
    bgr = decode(data, "fuzz case")
    if bgr.ndim != 3 or bgr.shape[2] != 3:
        raise AssertionError(f"decoded shape {bgr.shape}")


def targets() -> dict[str, FuzzTarget]:
    small = {name for name, (data, _, _) in header_bombs().items() if len(data) < 100_000}
    seeds = ([encoded_image(name) for name in sorted(ENCODINGS)] + [png_bomb(300, 200)]
             + [header_bombs()[name][0] for name in sorted(small)])
    return {"image_file": FuzzTarget("image_file", seeds, consume, (BadImage,), hot=lambda seed: [(0, 200)])}


def main() -> int:
    return long_run("long fuzz run of the image reader", lambda names: targets(), cases=100_000,
                    time_limit_s=2.0, memory_limit_mb=1024)


if __name__ == "__main__":
    sys.exit(main())
