"""Fuzz targets of the bag readers: what ``process-bag`` and ``bag-repair`` do with a hostile bag file.

- ``mcap_bag``: small MCAP camera bags (3-frame chunks so there are several chunk indexes; uncompressed
  with our CRCs, the same with the summary CRC zeroed as rosbags writes it, zstd-compressed, and that one
  with a footer pointing at no summary, which rosbags reads by scanning the data section) -> the file
  checked and opened (``storage.open_reader``: ``mcap_summary``, then rosbags), every frame read and decoded
  as ``process-bag`` reads it (``bag_reader.FrameReader``: ``mcap_view`` zero-copy or compressed, the
  node's decoders), then the salvage walk ``bag-repair`` uses. Hot ranges: the summary section and the
  first chunk's header.
- ``compressed_bag``: bag folders in rosbag2's ``message`` and ``file`` compression modes (zstd per message,
  or the whole file): the seed's metadata.yaml with the case as its data file -> the same reading (rosbags'
  decompression replaced or preceded by our bounded one) and ``bag-repair``'s reading.
- ``sqlite_bag``: small sqlite3 camera bags (as written, and with rows of TEXT/INTEGER data and a TEXT
  timestamp) -> the same reading, then ``bag-repair``'s sqlite scan. Hot ranges: the first pages (schema,
  the topics table) and the last (the messages' rows).

Only ``InputError`` may escape (frames that fail are counted causes, not exceptions). Each case is written
to a file (the readers take paths) in a temporary folder, in /dev/shm when there is one.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import tempfile
from pathlib import Path

import numpy as np
from libredgetpu_ros.errors import InputError

try:
    from .harness import FuzzTarget
except ImportError:  # imported by targets.py run as a script
    from harness import FuzzTarget  # type: ignore[no-redef]

START_NS = 1_700_000_000_000_000_000
_TOPIC = "/image_raw"
_FRAMES_PER_CHUNK = 3


def _case_dir() -> Path:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="bagfuzz-", dir=base))


def _read(path: Path) -> int:
    """The frames process-bag would get, then bag-repair's scan; returns the number of frames."""
    from libredgetpu_ros.bags.salvage import scan
    from libredgetpu_ros.ros.bag_reader import FrameReader

    frames = 0
    try:
        with FrameReader(path, [_TOPIC]) as reader:
            for frame in reader:
                frames += 1
                assert (frame.rgb is None) != (not frame.cause), frame
    finally:
        _report, _channels, messages = scan(path)
        for _ in messages:
            pass
    return frames


def consume_file(data: bytes, suffix: str) -> int:
    folder = _case_dir()
    path = folder / f"case{suffix}"
    try:
        path.write_bytes(data)
        return _read(path)
    finally:
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()


_FOLDER_BAGS: dict[int, tuple[str, str]] = {}  # mode byte -> (data file name, metadata.yaml text)


def consume_compressed(data: bytes) -> int:
    """A bag folder in rosbag2's ``message`` (first byte even) or ``file`` (odd) compression mode: the
    seed's metadata.yaml and, as its data file, the case's bytes after the first."""
    name, metadata = _FOLDER_BAGS[data[0] % 2] if data else _FOLDER_BAGS[0]
    folder = _case_dir()
    try:
        (folder / "metadata.yaml").write_text(metadata)
        (folder / name).write_bytes(data[1:])
        from libredgetpu_ros.bags.salvage import data_files, scan
        from libredgetpu_ros.ros.bag_reader import FrameReader

        frames = 0
        try:
            with FrameReader(folder, [_TOPIC]) as reader:
                frames = sum(1 for _ in reader)
        finally:
            if name.endswith(".mcap"):  # bag-repair's reading (it refuses file-compressed bags)
                for path in data_files(folder):
                    for _ in scan(path)[2]:
                        pass
        return frames
    finally:
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()


def compressed_seeds(tmp: Path) -> list[bytes]:
    seeds = []
    for mode_byte, mode in ((0, "message"), (1, "file")):
        data_file = _frames(tmp, f"{mode}_mode", "mcap", 6, mode=mode)
        _FOLDER_BAGS[mode_byte] = (data_file.name, (data_file.parent / "metadata.yaml").read_text())
        data = bytearray(data_file.read_bytes())
        if mode == "message":  # summary CRC 0, as rosbags writes it: changes there reach the checks
            data[len(data) - 37 + 25:len(data) - 37 + 29] = bytes(4)
        seeds.append(bytes([mode_byte]) + bytes(data))
    return seeds


def _compressed_hot(seed: bytes) -> list[tuple[int, int]]:
    if seed[0] % 2:  # a zstd file: its frame header
        return [(1, 64)]
    return [(a + 1, b + 1) for a, b in mcap_hot(seed[1:])]


def consume_mcap(data: bytes) -> int:
    return consume_file(data, ".mcap")


def consume_sqlite(data: bytes) -> int:
    return consume_file(data, ".db3")


def _frames(tmp: Path, name: str, storage: str, count: int, compressed: bool = False,
            mode: str = "") -> Path:
    """A camera bag of ``count`` 32x24 frames, in chunks of 3 frames (MCAP); ``compressed``: zstd chunks;
    ``mode``: rosbag2's ``message`` or ``file`` compression instead."""
    from libredgetpu_ros.bags.make import image_cdr
    from libredgetpu_ros.bags.storage import sensor_data_qos
    from libredgetpu_ros.bags.typestore import typestore
    from libredgetpu_ros.bags.writers import CrcMcapWriter, install
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

    class SmallChunks(CrcMcapWriter):  # rosbags closes a chunk at 1 MiB: tiny frames would make one
        def write(self, connection, timestamp, data) -> None:  # type: ignore[no-untyped-def]
            super().write(connection, timestamp, data)
            if sum(len(v) for v in self.chunk.msgs.values()) >= _FRAMES_PER_CHUNK:
                self.close_chunk()

    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    writer = install(Writer(tmp / name, version=9, storage_plugin=plugin))
    writer.STORAGE_PLUGINS = {**writer.STORAGE_PLUGINS, StoragePlugin.MCAP: SmallChunks}
    if compressed or mode:
        writer.set_compression(CompressionMode[mode.upper() or "STORAGE"], CompressionFormat.ZSTD)
    writer.open()
    conn = writer.add_connection(_TOPIC, "sensor_msgs/msg/Image", typestore=typestore(),
                                 offered_qos_profiles=[sensor_data_qos()])
    rng = np.random.default_rng(5)
    for i in range(count):
        bgr = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
        stamp = START_NS + i * 100_000_000
        writer.write(conn, stamp, image_cdr(bgr, stamp, "camera", "rgb8"))
    writer.close()
    return next((tmp / name).glob("*.mcap*" if storage == "mcap" else "*.db3"))


def mcap_seeds(tmp: Path) -> list[bytes]:
    plain = _frames(tmp, "plain", "mcap", 8).read_bytes()
    no_crc = bytearray(plain)
    no_crc[len(no_crc) - 37 + 25:len(no_crc) - 37 + 29] = bytes(4)  # summary CRC 0, as rosbags writes it
    compressed = _frames(tmp, "zstd", "mcap", 8, compressed=True).read_bytes()
    unindexed = bytearray(compressed)  # footer without a summary: rosbags scans the data section itself
    unindexed[len(unindexed) - 37 + 9:len(unindexed) - 37 + 29] = bytes(20)
    return [plain, bytes(no_crc), compressed, bytes(unindexed)]


def mcap_hot(data: bytes) -> list[tuple[int, int]]:
    if len(data) < 45:
        return []
    summary_start = struct.unpack_from("<Q", data, len(data) - 37 + 9)[0]
    return [(summary_start, len(data)), (0, 200)]  # the summary, the header and first chunk's header


def sqlite_seeds(tmp: Path) -> list[bytes]:
    db = _frames(tmp, "sqlite", "sqlite3", 6)
    plain = db.read_bytes()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE messages SET data = 'text' WHERE id = 2")
    conn.execute("UPDATE messages SET data = 12345 WHERE id = 3")
    conn.execute("UPDATE messages SET timestamp = 'noon' WHERE id = 4")
    conn.commit()
    conn.close()
    return [plain, db.read_bytes()]


def sqlite_hot(data: bytes) -> list[tuple[int, int]]:
    page = 4096
    return [(0, 3 * page), (max(0, len(data) - 2 * page), len(data))]


def targets(tmp: Path) -> dict[str, FuzzTarget]:
    """The bag targets, their seeds written under ``tmp``."""
    typed = (InputError,)
    return {
        "mcap_bag": FuzzTarget("mcap_bag", mcap_seeds(tmp), consume_mcap, typed, mcap_hot),
        "sqlite_bag": FuzzTarget("sqlite_bag", sqlite_seeds(tmp), consume_sqlite, typed, sqlite_hot),
        "compressed_bag": FuzzTarget("compressed_bag", compressed_seeds(tmp), consume_compressed, typed,
                                     _compressed_hot),
    }
