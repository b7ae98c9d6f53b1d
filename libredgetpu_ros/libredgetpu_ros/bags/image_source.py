"""Camera frames from still images (files or folders) and video files, as BGR uint8 arrays.

Stills are listed up front (sorted by name inside a folder) so the frame count is known; videos are read
frame by frame with ``cv2.VideoCapture`` and never held in memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from libredgetpu_ros.errors import InputError
from libredgetpu_ros.imagefile import read_image

IMAGE_SUFFIXES = frozenset({".bmp", ".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".tif", ".tiff", ".webp"})
VIDEO_SUFFIXES = frozenset({".avi", ".mp4", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg"})


@dataclass(frozen=True)
class Source:
    path: Path
    is_video: bool


class FrameSource:
    """The frames of ``inputs`` in order; ``count`` (None when a video does not tell) and ``fps`` (the first
    video's frame rate, None for stills)."""

    def __init__(self, inputs: Sequence[str | Path]) -> None:
        self.sources = _expand(inputs)
        self.fps: float | None = None
        self.count: int | None = 0
        for src in self.sources:
            if not src.is_video:
                self.count = None if self.count is None else self.count + 1
                continue
            fps, frames = _video_info(src.path)
            if self.fps is None and fps > 0:
                self.fps = fps
            self.count = None if self.count is None or frames <= 0 else self.count + frames

    def __iter__(self) -> Iterator[np.ndarray]:
        import cv2

        for src in self.sources:
            if not src.is_video:
                yield read_image(src.path)
                continue
            cap = cv2.VideoCapture(str(src.path))
            try:
                if not cap.isOpened():
                    raise InputError(f"video {src.path} cannot be opened")
                while True:
                    ok, bgr = cap.read()
                    if not ok:
                        break
                    yield bgr
            finally:
                cap.release()


def _expand(inputs: Sequence[str | Path]) -> list[Source]:
    if not inputs:
        raise InputError("no input images or videos given")
    out: list[Source] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES | VIDEO_SUFFIXES)
            if not files:
                raise InputError(f"folder {path} holds no images or videos "
                                 f"({', '.join(sorted(IMAGE_SUFFIXES | VIDEO_SUFFIXES))})")
            out.extend(Source(p, p.suffix.lower() in VIDEO_SUFFIXES) for p in files)
        elif path.is_file():
            out.append(Source(path, path.suffix.lower() in VIDEO_SUFFIXES))
        else:
            raise InputError(f"input {path} does not exist")
    return out


def _video_info(path: Path) -> tuple[float, int]:
    """(frames per second, frame count) as the container states them (0 when unknown)."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    try:
        if not cap.isOpened():
            raise InputError(f"video {path} cannot be opened")
        return float(cap.get(cv2.CAP_PROP_FPS) or 0.0), int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
    finally:
        cap.release()
