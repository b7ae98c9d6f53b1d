"""Zero-copy reading of uncompressed, indexed MCAP bags: messages as memoryviews into a read-only mmap.

rosbags' MCAP reader copies every message three times (the chunk from the file, the record out of the chunk,
the payload out of the record): ~0.65 ms per 640x480 rgb8 frame, all of it holding the GIL, which a
``process-bag`` reader thread then takes away from inference. Here the file is mapped once and a message is
a slice of the map: the pixels are read straight from the page cache by whoever uses them.

The walk is rosbags' own (``storage_mcap.msgsrc`` + ``McapReader.messages``, rosbags 0.11): the chunk index
rosbags already parsed, the same filtering, the same order (by log time within a chunk, chunks merged by
time then file offset) and the same checks (record bounds, chunk CRC), raising rosbags' ``ReaderError``.
Anything else (compressed chunks, per-message compression, unindexed files, sqlite3) is left to rosbags:
``message_views`` returns None and the caller uses ``reader.messages``.
"""

from __future__ import annotations

import heapq
import mmap
import struct
import zlib
from collections.abc import Collection, Iterator
from typing import Any

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_MESSAGE_HEADER = struct.Struct("<HIQQ")  # channel id, sequence, log time, publish time
_OP_MESSAGE = 0x05
# Chunk record: opcode (1) + length (8) + start, end, uncompressed size (3 x 8) -> CRC (4), then the
# compression string (4 + n) and the records' length (8) -> the records.
_CRC_AT = 9 + 24
_RECORDS_AT = 9 + 40


def message_views(reader: Any, connections: Collection[Any]) -> Iterator[tuple[Any, int, memoryview]] | None:
    """``reader.messages(connections)`` of an opened ``rosbags.rosbag2.Reader`` with memoryviews instead of
    bytes, or None when the bag is not uncompressed indexed MCAP (then use ``reader.messages``)."""
    from rosbags.rosbag2.reader import DirectoryReader
    from rosbags.rosbag2.storage_mcap import McapReader

    storage = reader.storage
    if isinstance(storage, McapReader):
        storages, directory = [storage], False
    elif isinstance(storage, DirectoryReader) and storage.metadata.compression_mode != "message":
        storages, directory = list(storage.storages), True
    else:
        return None
    if not connections or not all(isinstance(s, McapReader) and s.chunks for s in storages):
        return None
    if any(c.compression or c.compressed_size != c.uncompressed_size for s in storages for c in s.chunks):
        return None
    return _views(storages, list(connections), directory)


def _match(storage_conn: Any, connections: list[Any]) -> Any:
    """The requested connection a file's connection stands for (``DirectoryReader.messages``' rule)."""
    x = storage_conn
    return next((y for y in connections if y.topic == x.topic and y.msgtype == x.msgtype and y.ext == x.ext
                 and (not x.digest or not y.digest or y.digest == x.digest)), None)


def _views(storages: list[Any], connections: list[Any],
           directory: bool) -> Iterator[tuple[Any, int, memoryview]]:
    for storage in storages:
        if directory:
            channel_map = {x.id: conn for x in storage.connections
                           if (conn := _match(x, connections)) is not None}
        else:
            channel_map = {conn.id: conn for conn in connections}
        if not channel_map:
            continue
        with storage.path.open("rb") as file:
            data = memoryview(mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ))
        chunks = [_chunk_messages(data, chunk, channel_map) for chunk in storage.chunks
                  if any(chunk.channel_count.get(cid, 0) for cid in channel_map)]
        for timestamp, offset, connection, start, end in heapq.merge(*chunks):
            if offset:  # not a chunk's start marker
                yield connection, timestamp, data[start:end]


def _truncated(pos: int, expected: int, got: int) -> Exception:
    from rosbags.rosbag2 import ReaderError

    return ReaderError(f"Truncated record at offset {pos}: expected {expected} bytes, got {got}.")


def _chunk_messages(data: memoryview, chunk: Any, channel_map: dict[int, Any]) -> Iterator[tuple[Any, ...]]:
    """One chunk's messages in log-time order, after a start marker (so ``heapq.merge`` opens chunks only
    when their time comes, as rosbags does)."""
    from rosbags.rosbag2 import ReaderError

    yield chunk.message_start_time, 0, None, 0, 0
    base = chunk.chunk_start_offset
    start = base + _RECORDS_AT + len(chunk.compression)
    end = start + chunk.uncompressed_size
    if base + _CRC_AT + 4 > len(data) or end > len(data):
        raise _truncated(start, chunk.uncompressed_size, max(0, len(data) - start))
    crc = _U32.unpack_from(data, base + _CRC_AT)[0]
    if crc and zlib.crc32(data[start:end]) != crc:
        raise ReaderError("Chunk checksum mismatch.")
    messages: list[tuple[int, int, Any, int, int]] = []  # (log time, chunk offset, connection, start, end)
    pos = start
    while pos < end:
        if pos + 9 > end:
            raise _truncated(pos, 9, end - pos)
        op, size = data[pos], _U64.unpack_from(data, pos + 1)[0]
        record, pos = pos + 9, pos + 9 + size
        if pos > end:
            raise _truncated(record, size, end - record)
        if op != _OP_MESSAGE:
            continue
        if size < _MESSAGE_HEADER.size:
            raise _truncated(record, _MESSAGE_HEADER.size, size)
        channel_id, _, log_time, _ = _MESSAGE_HEADER.unpack_from(data, record)
        # rosbags keeps only messages inside the chunk's declared time range
        if channel_id in channel_map and chunk.message_start_time <= log_time <= chunk.message_end_time:
            messages.append((log_time, base, channel_map[channel_id], record + _MESSAGE_HEADER.size, pos))
    messages.sort(key=lambda m: m[0])
    yield from messages
