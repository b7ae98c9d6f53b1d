"""rosbags' storage writers, made safe to kill: real chunk CRCs, data on disk as it is written.

rosbags 0.11 writes every MCAP chunk with a CRC of 0 ("not computed"), so a reader cannot tell a flipped bit
from a pixel, and its sqlite3 writer holds every message in one transaction until ``close()``, so a killed
writer leaves a journal and an empty database. These subclasses change only that:

- :class:`CrcMcapWriter`: after rosbags writes a chunk, its ``uncompressed_crc`` field is filled in (CRC-32 of
  the chunk's records, as the MCAP spec defines it) and the file is flushed, so after SIGKILL every whole
  chunk is on disk and checkable (``bags.salvage`` / ``libredgetpu-ros bag-repair`` recover them). On close,
  the footer's summary CRC is filled in too (rosbags writes 0 there as well).
- :class:`CommittingSqlite3Writer`: commits every ``COMMIT_EVERY`` messages or ``COMMIT_PERIOD_S`` seconds,
  so after SIGKILL the database holds what was committed (sqlite rolls the rest back on the next open); its
  connection may be used by another thread than the one that opened it (one at a time).

:func:`install` puts them into a ``rosbags.rosbag2.Writer`` before ``open()``.
"""

from __future__ import annotations

import sqlite3
import struct
import time
from pathlib import Path
from typing import Any

from rosbags.rosbag2 import CompressionMode, StoragePlugin, WriterError
from rosbags.rosbag2.storage_mcap import McapWriter
from rosbags.rosbag2.storage_sqlite3 import Sqlite3Writer

from libredgetpu_ros.bags.crc import crc32

# Chunk record: opcode (1) + record length (8) + message start, end, uncompressed size (3 x 8) -> the CRC.
CHUNK_CRC_OFFSET = 1 + 8 + 24
# Footer: opcode (1) + length (8) + summary start, summary offset start (2 x 8) -> summary CRC; magic.
FOOTER_SIZE, SUMMARY_CRC_AT = 37, 1 + 8 + 16
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
COMMIT_EVERY = 64  # messages
COMMIT_PERIOD_S = 1.0


class CrcMcapWriter(McapWriter):
    """rosbags' MCAP writer with each chunk's CRC filled in and the file flushed after each chunk."""

    def close_chunk(self) -> None:
        crc = crc32(self.chunk.bio.getbuffer())  # the uncompressed records, before rosbags resets them
        start = self.bio.tell()
        super().close_chunk()
        end = self.bio.tell()
        self.bio.seek(start + CHUNK_CRC_OFFSET)
        self.bio.write(_U32.pack(crc))
        self.bio.seek(end)
        self.bio.flush()

    def close(self, version: int, metadata: str) -> None:
        """rosbags' close (summary and footer), then the footer's summary CRC filled in (rosbags writes 0):
        a changed byte in the summary section is then detected by ``mcap_summary`` at open."""
        super().close(version, metadata)
        with self.path.open("r+b") as f:
            footer_at = f.seek(-FOOTER_SIZE, 2)
            summary_start = _U64.unpack(f.read(FOOTER_SIZE)[9:17])[0]
            if not summary_start:
                return
            f.seek(summary_start)
            crc = crc32(f.read(footer_at + SUMMARY_CRC_AT - summary_start))
            f.write(_U32.pack(crc))  # the file position is now the CRC field


class CommittingSqlite3Writer(Sqlite3Writer):
    """rosbags' sqlite3 writer committing every ``COMMIT_EVERY`` messages or ``COMMIT_PERIOD_S`` s."""

    def __init__(self, path: Path, compression: Any) -> None:
        # Not rosbags' __init__: it opens f"file:{path}" as an SQLite URI, where a '#', '?' or '%' in a folder
        # name cuts or rewrites the path (the database went to another file, silently). Opened here by its
        # plain path, and without the same-thread check: process-bag writes from its writer thread (one
        # thread at a time: ros/bag_writer.py). The attributes are the ones rosbags' __init__ sets (pinned
        # against it by test_sqlite_paths: a rosbags release adding one fails there).
        if compression == CompressionMode.STORAGE:
            raise WriterError("SQLITE3 writer does not support storage-side compression.")
        self.path = path / f"{path.name}.db3"
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        self.conn.executescript(self.SQLITE_SCHEMA)
        self.cursor = self.conn.cursor()
        self._pending = 0
        self._last_commit = time.monotonic()

    def write(self, connection: Any, timestamp: int, data: bytes | memoryview) -> None:
        super().write(connection, timestamp, data)
        self._pending += 1
        if self._pending >= COMMIT_EVERY or time.monotonic() - self._last_commit >= COMMIT_PERIOD_S:
            self.conn.commit()
            self._pending, self._last_commit = 0, time.monotonic()


def install(writer: Any) -> Any:
    """Make an unopened ``rosbags.rosbag2.Writer`` use the writers above; returns it."""
    writer.STORAGE_PLUGINS = {**writer.STORAGE_PLUGINS, StoragePlugin.MCAP: CrcMcapWriter,
                              StoragePlugin.SQLITE3: CommittingSqlite3Writer}
    return writer
