"""Zero-copy MCAP reading (``bags.mcap_view``) against rosbags' reader, the reference: same messages, same
order, same connections; a damaged chunk is skipped and reported where rosbags stops; bags it does not
handle are left to rosbags."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

RIHS = "RIHS01_" + "cd" * 32


def _write_bag(path: Path, storage: str = "mcap", compression: str | None = None) -> None:
    """Two topics, timestamps out of order inside chunks, payloads big enough for several 1 MiB chunks."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    writer = Writer(path, version=9, storage_plugin=plugin)
    if compression:
        writer.set_compression(CompressionMode[compression], CompressionFormat.ZSTD)
    writer.open()
    try:
        a = writer.add_connection("/a", "acme_msgs/msg/Blob", msgdef="uint8[] data", rihs01=RIHS)
        b = writer.add_connection("/b", "acme_msgs/msg/Blob", msgdef="uint8[] data", rihs01=RIHS)
        for i in range(40):
            ts = 1_000 * (i ^ 5)  # not monotonic
            writer.write(a if i % 3 else b, ts, bytes([i]) * (150_000 + 1_000 * i))
            writer.write(b, ts, bytes([255 - i]) * 17)  # same timestamp on the other topic
    finally:
        writer.close()


def _open(path: Path) -> Any:
    from libredgetpu_ros.bags.storage import open_reader

    return open_reader(path)


def _both(path: Path, topics: set[str] | None = None) -> tuple[list[Any], list[Any] | None]:
    from libredgetpu_ros.bags.mcap_view import message_views

    reader = _open(path)
    try:
        conns = [c for c in reader.connections if topics is None or c.topic in topics]
        expected = [(c.id, c.topic, t, bytes(d)) for c, t, d in reader.messages(connections=conns)]
        views = message_views(reader, conns)
        got = None if views is None else [(c.id, c.topic, t, bytes(d)) for c, t, d in views]
        return expected, got
    finally:
        reader.close()


@pytest.mark.parametrize("topics", [None, {"/a"}, {"/b"}])
def test_same_messages_as_rosbags(tmp_path: Path, topics: set[str] | None) -> None:
    _write_bag(tmp_path / "bag")
    mcap = next((tmp_path / "bag").glob("*.mcap"))
    for path in (tmp_path / "bag", mcap):  # the folder and the file open different rosbags readers
        expected, got = _both(path, topics)
        assert len(expected) == (80 if topics is None else 54 if topics == {"/b"} else 26)
        assert got == expected


def test_views_are_slices_of_the_file(tmp_path: Path) -> None:
    from libredgetpu_ros.bags.mcap_view import message_views

    _write_bag(tmp_path / "bag")
    reader = _open(tmp_path / "bag")
    try:
        views = message_views(reader, reader.connections)
        assert views is not None
        _, _, first = next(iter(views))
        assert isinstance(first, memoryview) and first.readonly
    finally:
        reader.close()


@pytest.mark.parametrize(("storage", "compression"), [("sqlite3", None), ("mcap", "STORAGE"),
                                                       ("mcap", "MESSAGE")])
def test_other_bags_are_left_to_rosbags(tmp_path: Path, storage: str, compression: str | None) -> None:
    _write_bag(tmp_path / "bag", storage, compression)
    expected, got = _both(tmp_path / "bag")
    assert got is None and len(expected) == 80


def _first_chunk(data: bytes) -> int:
    pos = 8  # after the magic: walk the records to the first chunk (opcode 0x06)
    while data[pos] != 0x06:
        pos += 9 + struct.unpack_from("<Q", data, pos + 1)[0]
    return pos


def _patch(path: Path, edit: Any) -> None:
    mcap = next(path.glob("*.mcap"))
    data = bytearray(mcap.read_bytes())
    edit(data, _first_chunk(bytes(data)))
    mcap.write_bytes(bytes(data))


def _set_crc(data: bytearray, chunk: int) -> None:
    size = struct.unpack_from("<Q", data, chunk + 9 + 16)[0]
    start = chunk + 9 + 40 + struct.unpack_from("<I", data, chunk + 9 + 36)[0]
    struct.pack_into("<I", data, chunk + 9 + 24, zlib.crc32(data[start:start + size]))


def _records_start(data: bytearray, chunk: int) -> int:
    return chunk + 9 + 40 + struct.unpack_from("<I", data, chunk + 9 + 36)[0]


def _views(path: Path) -> list[tuple[int, str, int, bytes | None]]:
    from libredgetpu_ros.bags.mcap_view import message_views

    reader = _open(path)
    try:
        views = message_views(reader, reader.connections)
        assert views is not None
        return [(c.id, c.topic, t, None if d is None else bytes(d)) for c, t, d in views]
    finally:
        reader.close()


def _first_chunk_count(path: Path) -> int:
    reader = _open(path)
    try:
        first = min(reader.storage.storages[0].chunks, key=lambda c: c.chunk_start_offset)
        return sum(first.channel_count.values())
    finally:
        reader.close()


def _skipped_not_decoded(path: Path, clean: list[Any]) -> None:
    """rosbags gives up on the whole bag; the views report the damaged chunk's messages (None, as many
    as its index counts) and give every other message unchanged."""
    got = _views(path)
    bad = [g for g in got if g[3] is None]
    assert len(bad) == _first_chunk_count(path) > 0
    good = [g for g in got if g[3] is not None]
    assert len(good) + len(bad) == len(clean)
    assert set(good) <= set(clean) and len(set(good)) == len(good)
    assert [g for g in clean if g in set(good)] == good  # same order


def test_chunk_checksum_mismatch_skips_that_chunk_only(tmp_path: Path) -> None:
    from rosbags.rosbag2 import ReaderError

    _write_bag(tmp_path / "bag")
    _patch(tmp_path / "bag", _set_crc)  # plain rosbags writes CRC 0 (unchecked): give the first chunk one
    expected, got = _both(tmp_path / "bag")
    assert got == expected

    def flip(data: bytearray, chunk: int) -> None:
        data[_records_start(data, chunk) + 200] ^= 0xFF  # inside a payload; the CRC no longer matches

    _patch(tmp_path / "bag", flip)
    with pytest.raises(ReaderError, match="checksum"):
        _both(tmp_path / "bag")
    _skipped_not_decoded(tmp_path / "bag", expected)


def test_record_overrunning_its_chunk_skips_that_chunk_only(tmp_path: Path) -> None:
    from rosbags.rosbag2 import ReaderError

    _write_bag(tmp_path / "bag")
    clean, _ = _both(tmp_path / "bag")

    def oversize(data: bytearray, chunk: int) -> None:
        pos = _records_start(data, chunk)
        while data[pos] != 0x05:  # schema and channel records come first
            pos += 9 + struct.unpack_from("<Q", data, pos + 1)[0]
        struct.pack_into("<Q", data, pos + 1, 10**9)  # a message record longer than its chunk

    _patch(tmp_path / "bag", oversize)
    reader = _open(tmp_path / "bag")
    try:
        with pytest.raises(ReaderError, match="Truncated record"):
            list(reader.messages())
    finally:
        reader.close()
    _skipped_not_decoded(tmp_path / "bag", clean)


def _chunked_bag(path: Path, chunks: int) -> None:
    """``chunks`` messages of 1.1 MB (one chunk each, rosbags closes a chunk past 1 MiB), real chunk CRCs."""
    from libredgetpu_ros.bags.storage import open_writer

    writer = open_writer(path, "mcap")
    try:
        conn = writer.add_connection("/a", "acme_msgs/msg/Blob", msgdef="uint8[] data", rihs01=RIHS)
        for i in range(chunks):
            writer.write(conn, i, bytes([i]) * 1_100_000)
    finally:
        writer.close()


def test_each_chunk_crc_is_checked_by_the_walking_thread_just_before_its_messages(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """No other thread verifies chunks (one was measured and dropped: docs/replay_testing.md), and a chunk
    is verified only when the walk reaches it (a bag larger than memory is not read twice)."""
    import threading

    from libredgetpu_ros.bags import mcap_view

    _chunked_bag(tmp_path / "bag", 12)
    checked: list[str] = []
    crc32 = mcap_view.crc32

    def recorded(data: Any, *args: Any) -> int:
        checked.append(threading.current_thread().name)
        return crc32(data, *args)

    monkeypatch.setattr(mcap_view, "crc32", recorded)
    before = set(threading.enumerate())
    reader = _open(tmp_path / "bag")
    try:
        views = mcap_view.message_views(reader, reader.connections)
        assert views is not None
        for i, (_, timestamp, view) in enumerate(views):
            assert timestamp == i and view is not None and view[-1] == i
            assert len(checked) == i + 1, (i, len(checked))
            assert set(threading.enumerate()) <= before
    finally:
        reader.close()
    assert checked == ["MainThread"] * 12
