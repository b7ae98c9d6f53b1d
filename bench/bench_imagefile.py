"""What reading an image's size from its header costs (``imagefile.header_size``: the pixel budget's check
before any decode) against decoding the same bytes, for an ordinary 640×480 photo in every file format the
package reads.

The fixture photo ``images/test_couple.jpg`` resized to 640×480 and encoded by OpenCV (JPEG quality 95, PNG
level 3, BMP, TIFF, WebP quality 95, PPM). Thread CPU time (``_timing.spread_us``): median and p10-p90 of
``REPEATS`` calls after one untimed call. Baseline, same run: ``cv2.imdecode`` of the same bytes (what the
header check guards). OpenCV on one thread, so thread CPU time sees all of its work. The machine is shared
(2 cores, ~8 jobs): the load average is recorded.

    .venv/bin/python bench/bench_imagefile.py     # writes bench/results/imagefile.md (a few s of CPU)
"""

from __future__ import annotations

import _common

_common.single_threaded_blas()  # before NumPy loads BLAS: thread CPU time must see all the work

import os  # noqa: E402
import platform  # noqa: E402

import cv2  # noqa: E402
from _timing import spread_us, write_report  # noqa: E402
from libredgetpu_ros.fixtures import fixture  # noqa: E402

from libredgetpu_ros import imagefile  # noqa: E402

OUT = _common.RESULTS / "imagefile.md"
REPEATS = 41
SIZE = (640, 480)
ENCODINGS = {"JPEG": (".jpg", [cv2.IMWRITE_JPEG_QUALITY, 95]),
             "PNG": (".png", [cv2.IMWRITE_PNG_COMPRESSION, 3]),
             "BMP": (".bmp", []), "TIFF": (".tiff", []),
             "WEBP": (".webp", [cv2.IMWRITE_WEBP_QUALITY, 95]), "PPM": (".ppm", [])}


def main() -> None:
    cv2.setNumThreads(1)
    load_start = os.getloadavg()[0]
    photo = cv2.resize(cv2.imread(str(fixture("images/test_couple.jpg"))), SIZE, interpolation=cv2.INTER_AREA)
    rows = []
    for fmt, (ext, params) in ENCODINGS.items():
        ok, encoded = cv2.imencode(ext, photo, params)
        assert ok, fmt
        data = encoded.tobytes()
        assert imagefile.header_size(data, "bench") == (fmt, *SIZE), fmt
        header = spread_us(lambda d: imagefile.header_size(d, "bench"), [data], REPEATS)
        decode = spread_us(lambda e: cv2.imdecode(e, cv2.IMREAD_COLOR), [encoded], REPEATS)
        rows.append(f"| {fmt} | {len(data):,} | {header[0]:.0f} ({header[1]:.0f}–{header[2]:.0f}) | "
                    f"{decode[0]:,.0f} ({decode[1]:,.0f}–{decode[2]:,.0f}) | {header[0] / decode[0]:.1%} |")
    lines = ["# Image header check: CPU against a decode", "",
             f"{platform.machine()}, Python {platform.python_version()}, OpenCV {cv2.__version__} "
             "(1 thread); `.venv/bin/python bench/bench_imagefile.py`. The fixture photo `test_couple.jpg` "
             f"at {SIZE[0]}×{SIZE[1]}, encoded by OpenCV; thread CPU µs, median (p10–p90) of {REPEATS} "
             "calls. "
             "Baseline: `cv2.imdecode` of the same bytes, same run. Shared machine (2 cores, ~8 jobs): load "
             f"average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.", "",
             "| format | bytes | `imagefile.header_size` µs | `cv2.imdecode` µs | header / decode |",
             "|---|---:|---:|---:|---:|", *rows, "",
             "`header_size` reads the size with Pillow's header readers (WebP: its own parser), no pixel "
             "decoded; for PNG it also walks the chunks, checking each chunk's length against the bytes "
             "present."]
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
