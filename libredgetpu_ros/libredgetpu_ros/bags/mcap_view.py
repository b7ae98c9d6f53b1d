"""Zero-copy reading of uncompressed, indexed MCAP bags: messages as memoryviews into a read-only mmap.

rosbags' MCAP reader copies every message three times (the chunk from the file, the record out of the chunk,
the payload out of the record): ~0.65 ms per 640x480 rgb8 frame, all of it holding the GIL, which a
``process-bag`` reader thread then takes away from inference. Here the file is mapped once and a message is
a slice of the map: the pixels are read straight from the page cache by whoever uses them.

The walk is rosbags' own (``storage_mcap.msgsrc`` + ``McapReader.messages``, rosbags 0.11): the chunk index
rosbags already parsed, the same filtering, the same order (by log time within a chunk, chunks merged by
time then file offset) and the same checks (record bounds, chunk CRC). Where rosbags raises ``ReaderError``
and ends the whole read, a chunk that fails them (CRC mismatch, cut short, records overrunning it) is
reported and skipped here: each of its messages on the wanted channels comes out as ``None`` instead of a
view (never decoded), and the walk goes on with the next chunk.
With ``compressed=True``, zstd and lz4 chunks (``ros2 bag record`` / rosbags storage compression) are walked
the same way: decompressed and checked by ``decompress.chunk_records`` (size budget before decompressing,
exact size, CRC), the messages then views into the decompressed records; a chunk failing is skipped as above.
Anything else (per-message compression, unindexed files, sqlite3) is left to rosbags:
``message_views`` returns None and the caller uses ``reader.messages``.

The CRC of an uncompressed chunk is verified by the walking thread just before the chunk's messages are
parsed: no other thread, and the pixels the consumer reads next are then in the cache of the core that read
them (measured on process-bag's classify bag: the pipeline's resize back to its speed on in-memory frames,
bench/results/process_bag.md). A worker verifying chunks ahead of the walk was measured and dropped
(docs/replay_testing.md): it only moved the first read from memory to another core and added a thread to
wake (process-bag's reader thread already overlaps the walk with inference).
"""

from __future__ import annotations

import heapq
import itertools
import mmap
import struct
from collections.abc import Collection, Iterator
from typing import Any

from libredgetpu_ros.bags.crc import crc32
from libredgetpu_ros.bags.decompress import COMPRESSIONS, BadRecord, chunk_records

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_MESSAGE_HEADER = struct.Struct("<HIQQ")  # channel id, sequence, log time, publish time
_OP_MESSAGE = 0x05
# Chunk record: opcode (1) + length (8) + start, end, uncompressed size (3 x 8) -> CRC (4), then the
# compression string (4 + n) and the records' length (8) -> the records.
_CRC_AT = 9 + 24
_RECORDS_AT = 9 + 40


def message_views(reader: Any, connections: Collection[Any], compressed: bool = False,
                  per_message: bool = False) -> Iterator[tuple[Any, int, memoryview]] | None:
    """``reader.messages(connections)`` of an opened ``rosbags.rosbag2.Reader`` with memoryviews instead of
    bytes (``None`` for a message of a corrupt chunk, skipped), or None when the bag is not indexed MCAP
    with uncompressed chunks (or, with ``compressed``, zstd/lz4 chunks): then use ``reader.messages``.
    With ``per_message``, a bag in rosbag2's per-message compression mode is walked too: its views are the
    compressed payloads (``storage.decompressed`` decompresses them)."""
    from rosbags.rosbag2.reader import DirectoryReader
    from rosbags.rosbag2.storage_mcap import McapReader

    storage = reader.storage
    if isinstance(storage, McapReader):
        storages, directory = [storage], False
    elif isinstance(storage, DirectoryReader) and (per_message
                                                   or storage.metadata.compression_mode != "message"):
        storages, directory = list(storage.storages), True
    else:
        return None
    if not connections or not all(isinstance(s, McapReader) and s.chunks for s in storages):
        return None
    allowed = COMPRESSIONS if compressed else ("",)
    if any(c.compression not in allowed or (not c.compression and c.compressed_size != c.uncompressed_size)
           for s in storages for c in s.chunks):
        return None
    return _views(storages, list(connections), directory)


def match_connection(storage_conn: Any, connections: list[Any]) -> Any:
    """The requested connection a file's connection stands for (``DirectoryReader.messages``' rule)."""
    x = storage_conn
    return next((y for y in connections if y.topic == x.topic and y.msgtype == x.msgtype and y.ext == x.ext
                 and (not x.digest or not y.digest or y.digest == x.digest)), None)


def _views(storages: list[Any], connections: list[Any],
           directory: bool) -> Iterator[tuple[Any, int, memoryview]]:
    for storage in storages:
        if directory:
            channel_map = {x.id: conn for x in storage.connections
                           if (conn := match_connection(x, connections)) is not None}
        else:
            channel_map = {conn.id: conn for conn in connections}
        if not channel_map:
            continue
        with storage.path.open("rb") as file:
            data = memoryview(mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ))
        wanted = [chunk for chunk in storage.chunks
                  if any(chunk.channel_count.get(cid, 0) for cid in channel_map)]
        chunks = [_chunk_messages(data, chunk, channel_map) for chunk in wanted]
        for timestamp, offset, connection, view in heapq.merge(*chunks):
            if offset:  # not a chunk's start marker
                yield connection, timestamp, view


def _chunk_messages(data: memoryview, chunk: Any, channel_map: dict[int, Any]) -> Iterator[tuple[Any, ...]]:
    """One chunk's messages in log-time order, after a start marker (so ``heapq.merge`` opens chunks only
    when their time comes, as rosbags does). A corrupt chunk gives one ``start = -1`` entry per message the
    chunk index counts on a wanted channel (at the chunk's start time): reported, never decoded.
    Entries are (log time, chunk offset, connection, view); chunks have distinct offsets, so the merge
    never compares further."""
    yield chunk.message_start_time, 0, None, None
    base = chunk.chunk_start_offset
    try:
        messages = _checked_messages(data, chunk, channel_map)
    except BadRecord:
        # counts checked against the chunk's message index records when the bag was opened
        # (mcap_summary), and generated one by one: never a list as long as a count says
        for cid, conn in channel_map.items():
            yield from itertools.repeat((chunk.message_start_time, base, conn, None),
                                        chunk.channel_count.get(cid, 0))
        return
    yield from messages


def _checked_messages(data: memoryview, chunk: Any, channel_map: dict[int, Any]) -> list[tuple[Any, ...]]:
    base = chunk.chunk_start_offset
    start = base + _RECORDS_AT + len(chunk.compression)
    end = start + chunk.compressed_size  # == uncompressed_size for an uncompressed chunk (message_views)
    if base + _CRC_AT + 4 > len(data) or end > len(data):
        raise BadRecord(f"chunk at offset {base} runs past the end of the file")
    crc = _U32.unpack_from(data, base + _CRC_AT)[0]
    if chunk.compression:  # records in a new buffer, checked before and after decompressing
        data = chunk_records(data[start:end], chunk.compression, chunk.uncompressed_size, crc, base)
        start, end = 0, len(data)
    elif crc and crc32(data[start:end]) != crc:  # 0: no CRC recorded
        raise BadRecord(f"chunk at offset {base}: CRC mismatch")
    messages: list[tuple[int, int, Any, memoryview]] = []  # (log time, chunk offset, connection, view)
    pos = start
    while pos < end:
        if pos + 9 > end:
            raise BadRecord(f"record header at {pos} overruns the chunk")
        op, size = data[pos], _U64.unpack_from(data, pos + 1)[0]
        record, pos = pos + 9, pos + 9 + size
        if pos > end:
            raise BadRecord(f"record at {record} overruns the chunk")
        if op != _OP_MESSAGE:
            continue
        if size < _MESSAGE_HEADER.size:
            raise BadRecord(f"message record at {record} is shorter than its header")
        channel_id, _, log_time, _ = _MESSAGE_HEADER.unpack_from(data, record)
        # rosbags keeps only messages inside the chunk's declared time range
        if channel_id in channel_map and chunk.message_start_time <= log_time <= chunk.message_end_time:
            payload = data[record + _MESSAGE_HEADER.size:pos]
            messages.append((log_time, base, channel_map[channel_id], payload))
    messages.sort(key=lambda m: m[0])
    return messages
