"""Camera-stream bags from stills or videos: ``sensor_msgs/msg/Image`` at a fixed rate.

Each frame's header stamp equals its bag timestamp (``start + i / rate``), so results computed from the bag
can be matched to their input by stamp, live or offline.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from libredgetpu_ros.bags.image_source import FrameSource
from libredgetpu_ros.bags.storage import new_bag, sensor_data_qos
from libredgetpu_ros.bags.typestore import typestore
from libredgetpu_ros.errors import InputError

ENCODINGS = ("rgb8", "bgr8")
DEFAULT_RATE_HZ = 10.0
IMAGE_TYPE = "sensor_msgs/msg/Image"


@dataclass(frozen=True)
class MakeBagOptions:
    topic: str = "/image_raw"
    frame_id: str = "camera_optical_frame"
    rate: float | None = None  # None: the video's own rate, else DEFAULT_RATE_HZ
    storage: str = "mcap"
    loop: int = 1
    encoding: str = "rgb8"
    start_ns: int | None = None  # None: now

    def check(self) -> MakeBagOptions:
        if self.rate is not None and not self.rate > 0:
            raise InputError(f"rate must be > 0 Hz, got {self.rate}")
        if self.loop < 1:
            raise InputError(f"loop must be >= 1, got {self.loop}")
        if self.encoding not in ENCODINGS:
            raise InputError(f"encoding {self.encoding!r} is not one of {', '.join(ENCODINGS)}")
        if not self.topic or not self.topic.startswith("/"):
            raise InputError(f"topic {self.topic!r} must be an absolute name (start with '/')")
        return self


@dataclass(frozen=True)
class MakeBagSummary:
    path: Path
    frames: int
    rate: float
    first_ns: int
    last_ns: int


def image_cdr(bgr: np.ndarray, stamp_ns: int, frame_id: str, encoding: str) -> bytes:
    """One ``sensor_msgs/msg/Image`` in CDR from a BGR frame (grayscale inputs are expanded)."""
    import cv2

    store = typestore()
    image_t = store.types[IMAGE_TYPE]
    header_t = store.types["std_msgs/msg/Header"]
    time_t = store.types["builtin_interfaces/msg/Time"]
    if bgr.ndim == 2:
        bgr = cv2.cvtColor(bgr, cv2.COLOR_GRAY2BGR)
    pixels = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB) if encoding == "rgb8" else np.ascontiguousarray(bgr)
    height, width = pixels.shape[:2]
    header = header_t(stamp=time_t(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000),
                      frame_id=frame_id)
    msg = image_t(header=header, height=height, width=width, encoding=encoding, is_bigendian=0,
                  step=width * 3, data=pixels.reshape(-1))
    return bytes(store.serialize_cdr(msg, IMAGE_TYPE))


def make_bag(inputs: Sequence[str | Path], out: str | Path, options: MakeBagOptions = MakeBagOptions(),
             progress: bool | None = None) -> MakeBagSummary:
    """Write the frames of ``inputs`` (``loop`` times) to a new bag at ``out``; see the module docstring.

    ``progress``: a tqdm bar on stderr (None: only when stderr is a terminal). The bag appears at ``out``
    only when complete (``storage.new_bag``); a failure leaves nothing there.
    """
    from tqdm import tqdm

    opts = options.check()
    source = FrameSource(inputs)
    rate = opts.rate or source.fps or DEFAULT_RATE_HZ
    start_ns = opts.start_ns if opts.start_ns is not None else time.time_ns()
    period_ns = 1e9 / rate
    total = source.count * opts.loop if source.count is not None else None
    frames, stamp = 0, start_ns
    with new_bag(out, opts.storage) as writer:
        conn = writer.add_connection(opts.topic, IMAGE_TYPE, typestore=typestore(),
                                     offered_qos_profiles=[sensor_data_qos()])
        with tqdm(total=total, unit="frame", desc="make-bag", file=sys.stderr,
                  disable=None if progress is None else not progress) as bar:
            for _ in range(opts.loop):
                for bgr in source:
                    stamp = start_ns + round(frames * period_ns)
                    writer.write(conn, stamp, image_cdr(bgr, stamp, opts.frame_id, opts.encoding))
                    frames += 1
                    bar.update(1)
        if frames == 0:  # raised inside: the empty bag is removed, never published
            raise InputError(f"no frames could be read from {', '.join(str(i) for i in inputs)}")
    return MakeBagSummary(Path(out), frames, rate, start_ns, stamp)
