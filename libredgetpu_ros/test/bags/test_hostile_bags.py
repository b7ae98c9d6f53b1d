"""Hostile bags (issue 21 items 2 and 7): a damaged MCAP summary or chunk index, sqlite rows of the wrong
type, a topic of an unknown type, a compressed chunk declaring a huge size.

- One changed byte in a chunk index made rosbags derive 2^28+ messages for one chunk; ``process-bag`` then
  listed them as skipped frames and grew to 5.7 GB. Now ``mcap_summary`` checks the summary against the
  file at open and refuses it (InputError with the ``bag-repair`` hint). Reproduced under the fuzz harness's
  address-space cap, so a regression fails as MemoryError (or a hang) instead of eating the machine.
- 150 seeded 1-3 byte changes in the summary section: 0 tracebacks (19 of 150 here before, 21 in the
  issue); ``process-bag`` on such a bag: exit 2, one ``error:`` line.
- sqlite rows with TEXT/INTEGER data or a TEXT timestamp are counted failures / skipped rows; topic rows
  with a NULL id or a BLOB type are skipped topics.
- ``bag-repair`` skips a topic whose type is unknown and has no definition in the bag (was TypesysError).
- ``bag-repair`` on a zstd chunk declaring 192 MiB holds it once (was twice).
- rosbag2's compression modes: a per-message zstd bomb is a counted frame, a damaged chunk of such a bag is
  skipped, ``bag-repair`` writes its messages decompressed; a file-compressed MCAP is checked (and its size
  bounded) before rosbags opens it.

Each test fails on the code before the fix it covers.
"""

from __future__ import annotations

import json
import random
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .._helpers import one_error_line
from ..fuzz.harness import run_guarded

START_NS = 1_700_000_000_000_000_000
FOOTER = 37


def _image_bag(tmp: Path, name: str, frames: int = 30, storage: str = "mcap") -> Path:
    """``frames`` 200x150 rgb8 frames (90 KB each: ~11 per 1 MiB chunk)."""
    import cv2
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag

    image = tmp / "frame.png"
    if not image.exists():
        cv2.imwrite(str(image), np.random.default_rng(7).integers(0, 256, (150, 200, 3), dtype=np.uint8))
    make_bag([image], tmp / name, MakeBagOptions(loop=frames, start_ns=START_NS, storage=storage),
             progress=False)
    return tmp / name


def _summary(data: bytes | bytearray) -> tuple[int, int]:
    """(summary start, footer start) of an MCAP file."""
    footer = len(data) - FOOTER
    return struct.unpack_from("<Q", data, footer + 9)[0], footer


def _summary_records(data: bytes | bytearray) -> list[tuple[int, int, int]]:
    """(opcode, record offset, body length) of the summary records."""
    pos, footer = _summary(data)
    out = []
    while pos < footer:
        op, length = data[pos], struct.unpack_from("<Q", data, pos + 1)[0]
        out.append((op, pos, length))
        pos += 9 + length
    return out


def _without_summary_crc(data: bytes) -> bytearray:
    """The bag as rosbags (and most writers) leave it: summary CRC 0, so only the parser's checks count."""
    out = bytearray(data)
    out[len(out) - FOOTER + 25:len(out) - FOOTER + 29] = bytes(4)
    return out


def _read(path: Path) -> list[str]:
    """What process-bag's reader gives for every frame: '' (decoded) or the failure's cause."""
    from libredgetpu_ros.ros.bag_reader import FrameReader

    with FrameReader(path, ["/image_raw"], thread=False) as reader:
        return [frame.cause for frame in reader]


def _chunk_index_field(data: bytearray, field: str) -> int:
    """Offset of a field of the first chunk index record."""
    at = next(pos for op, pos, _ in _summary_records(data) if op == 0x08) + 9
    if field == "chunk offset":
        return at + 16 + 4  # byte 4 of chunk_start_offset: + 2^32
    if field == "message index offset":
        return at + 32 + 4 + 2 + 4  # byte 4 of the first message index offset
    if field == "message index length":
        return at + 32 + 4 + struct.unpack_from("<I", data, at + 32)[0] + 4
    raise AssertionError(field)


@pytest.mark.ros  # the frame decoders come with rclpy
@pytest.mark.parametrize("field", ["chunk offset", "message index offset", "message index length"])
def test_one_changed_chunk_index_byte_is_refused_without_allocating(tmp_path: Path, field: str) -> None:
    """rosbags derives a chunk's message count from these fields. Before: the changed chunk offset made the
    chunk fail its bounds check and process-bag list 2^28 skipped frames (MemoryError under the 1 GiB cap,
    5.7 GB without one); the changed message index fields were taken as they came (a wrong count,
    listed the same way had the chunk been damaged too). Now each is refused at open."""
    from libredgetpu_ros.errors import InputError

    bag = _image_bag(tmp_path, "bag", frames=12)
    mcap = next(bag.glob("*.mcap"))
    data = _without_summary_crc(mcap.read_bytes())
    data[_chunk_index_field(data, field)] ^= 0x01
    mcap.write_bytes(bytes(data))
    outcome = run_guarded(lambda _: _read(bag), b"", (InputError,), time_limit_s=120, memory_limit_mb=1024)
    assert outcome.kind == "refused", outcome
    with pytest.raises(InputError, match=r"chunk index at offset .*bag-repair") as refused:
        _read(bag)  # now known to be bounded: the whole message, here
    assert "\n" not in str(refused.value) and mcap.name in str(refused.value)


def _flip_campaign(bag: Path, flips: int, seed: int, crc: bool, tally: Path) -> None:
    """``flips`` copies of the bag's MCAP, each with 1-3 random bytes of its summary section replaced, read as
    process-bag reads them; the kinds of outcome go to ``tally``; a traceback fails the whole campaign."""
    from libredgetpu_ros.errors import InputError

    mcap = next(bag.glob("*.mcap"))
    clean = mcap.read_bytes() if crc else bytes(_without_summary_crc(mcap.read_bytes()))
    start, footer = _summary(clean)
    rng = random.Random(seed)
    counts = {"read": 0, "refused": 0}
    untyped = []
    for i in range(flips):
        data = bytearray(clean)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(start, footer + FOOTER - 8)] = rng.randrange(256)  # up to the end magic
        mcap.write_bytes(bytes(data))
        try:
            _read(bag)
            counts["read"] += 1
        except InputError:
            counts["refused"] += 1
        except Exception as exc:  # what the campaign looks for: collected, reported together
            untyped.append(f"flip {i}: {type(exc).__name__}: {str(exc)[:120]}")
    tally.write_text(json.dumps(counts))
    if untyped:
        raise RuntimeError(f"{len(untyped)} of {flips} flips gave tracebacks: " + "; ".join(untyped[:5]))


@pytest.mark.ros
@pytest.mark.parametrize(("crc", "flips"), [(False, 150), (True, 30)])
def test_random_summary_flips_never_end_in_a_traceback(tmp_path: Path, crc: bool, flips: int) -> None:
    """The issue's campaign, bounded: 21 of 150 ended in KeyError, struct.error, MemoryError or an
    unwrapped ReaderError. Without a summary CRC (rosbags-written bags) the parser's checks alone must
    hold; with ours, every change that matters is refused."""
    bag = _image_bag(tmp_path, "bag", frames=30)
    tally = tmp_path / "tally.json"
    outcome = run_guarded(lambda _: _flip_campaign(bag, flips, 2021, crc, tally), b"", (),
                          time_limit_s=600, memory_limit_mb=1024)
    assert outcome.kind == "accepted", outcome.message
    counts = json.loads(tally.read_text())
    print(counts)
    assert counts["read"] + counts["refused"] == flips
    assert counts["refused"] > flips // 2  # the campaign does damage what is read


def _edit_db(bag: Path, *statements: str) -> None:
    conn = sqlite3.connect(next(bag.glob("*.db3")))
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.mark.ros
def test_sqlite_rows_of_another_type_are_counted_failures(tmp_path: Path) -> None:
    """TEXT data, INTEGER data (2^40: ``bytes(n)`` allocated a TiB before) and a TEXT timestamp: each a
    ``corrupt`` frame for process-bag's reader and a skipped row for bag-repair."""
    from libredgetpu_ros.bags.repair import repair_bag

    bag = _image_bag(tmp_path, "bag", frames=5, storage="sqlite3")
    _edit_db(bag, "UPDATE messages SET data = 'not a blob' WHERE id = 2",
             f"UPDATE messages SET data = {1 << 40} WHERE id = 3",
             "UPDATE messages SET timestamp = 'noon' WHERE id = 4")
    causes = _read(bag)
    assert sorted(causes) == ["", "", "corrupt", "corrupt", "corrupt"]
    summary = repair_bag(bag, tmp_path / "fixed")
    assert summary.messages == 2 and summary.files[0].bad_rows == 3
    assert any("'noon'" in note for note in summary.files[0].notes)
    assert _read(tmp_path / "fixed") == ["", ""]


def test_bag_repair_skips_a_topic_of_unknown_type(tmp_path: Path) -> None:
    """Before: rosbags' TypesysError ("Type 'foo_msgs/msg/Bar' is unknown") as a traceback."""
    bag = _image_bag(tmp_path, "bag", frames=3, storage="sqlite3")
    _edit_db(bag, "UPDATE topics SET type = 'foo_msgs/msg/Bar'")
    out = subprocess.run([sys.executable, "-m", "libredgetpu_ros.cli.main", "bag-repair", str(bag),
                          str(tmp_path / "fixed"), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["messages"] == 0 and report["dropped"] == 3
    assert "unknown" in report["skipped_topics"]["/image_raw"]


def _zstd_bomb(path: Path, size: int) -> None:
    """An MCAP (no summary: bag-repair does not need one) with one zstd chunk whose records are one
    unknown-opcode record of ``size`` bytes: 1 MiB of noise (so the ratio is within budget) then zeros."""
    from backports import zstd

    noise = np.random.default_rng(3).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    compressor = zstd.ZstdCompressor()
    parts = [compressor.compress(b"\x7f" + struct.pack("<Q", size - 9) + noise)]
    zeros = bytes(1 << 24)
    left = size - 9 - len(noise)
    while left:
        parts.append(compressor.compress(zeros[:min(left, len(zeros))]))
        left -= min(left, len(zeros))
    parts.append(compressor.flush())
    stored = b"".join(parts)
    body = struct.pack("<QQQI", START_NS, START_NS, size, 0) + struct.pack("<I", 4) + b"zstd" \
        + struct.pack("<Q", len(stored)) + stored
    header = struct.pack("<I", 4) + b"ros2" + struct.pack("<I", 0)
    path.write_bytes(b"\x89MCAP0\r\n" + b"\x01" + struct.pack("<Q", len(header)) + header
                     + b"\x06" + struct.pack("<Q", len(body)) + body)


def test_bag_repair_holds_a_big_compressed_chunk_once(tmp_path: Path) -> None:
    """A zstd chunk declaring (and holding) 192 MiB: before, bag-repair's resident memory grew by 2.05x that
    (394 MiB measured here: the length-capped one-shot decompressor's buffer and its copy; 2.07 GB for 1 GiB
    in the issue). Now by the chunk + at most 32 MiB (215 MiB measured: 4 MiB pieces into an anonymous
    mapping of the declared size, plus the writer's imports)."""
    size = 192 << 20
    bag = tmp_path / "bomb.mcap"
    _zstd_bomb(bag, size)
    script = (
        "import json, resource, sys\n"
        "from libredgetpu_ros.bags.repair import repair_bag\n"
        "from libredgetpu_ros.bags.typestore import typestore\n"
        "typestore()\n"
        "base = int(open('/proc/self/statm').read().split()[1]) * resource.getpagesize()\n"
        "s = repair_bag(sys.argv[1], sys.argv[2])\n"
        "peak = 1024 * int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])\n"
        "print(json.dumps([base, peak, s.files[0].chunks, s.files[0].corrupt_chunks]))\n")
    # VmHWM, this process's own high-water mark: ru_maxrss would include the parent's (pytest's) RSS,
    # which Linux carries over exec into the child's signal struct
    out = subprocess.run([sys.executable, "-c", script, str(bag), str(tmp_path / "fixed")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    base, peak, chunks, corrupt = json.loads(out.stdout)
    print(f"baseline {base / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB for a {size >> 20} MiB chunk")
    assert (chunks, corrupt) == (1, 0)
    assert peak - base <= size + (32 << 20)


@pytest.mark.ros
def test_process_bag_on_a_damaged_summary_is_one_error_line(tmp_path: Path, fixture_path) -> None:
    """The CLI contract on a bag refused at open: exit 2, one ``error:`` line naming the file, the damaged
    field and ``bag-repair``, no traceback."""
    import yaml

    bag = _image_bag(tmp_path, "bag", frames=4)
    mcap = next(bag.glob("*.mcap"))
    data = _without_summary_crc(mcap.read_bytes())
    data[_chunk_index_field(data, "chunk offset")] ^= 0x01
    mcap.write_bytes(bytes(data))
    config = tmp_path / "classify.yaml"
    config.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "model": str(fixture_path("classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite")), "backend": "cpu",
        "task": "classify"}}}))
    out = subprocess.run([sys.executable, "-m", "libredgetpu_ros.cli.main", "process-bag", str(bag),
                          str(tmp_path / "out"), "--config", str(config)], capture_output=True, text=True,
                         timeout=120)
    one_error_line(out.returncode, out.stderr, mcap.name, "chunk index", "bag-repair")
    assert not (tmp_path / "out").exists()


def _compressed_bag(tmp: Path, name: str, mode: str, frames: int = 3) -> Path:
    """A camera bag in rosbag2's ``file`` or ``message`` compression mode (zstd), from our writers."""
    from libredgetpu_ros.bags.make import image_cdr
    from libredgetpu_ros.bags.typestore import typestore
    from libredgetpu_ros.bags.writers import install
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

    writer = install(Writer(tmp / name, version=9, storage_plugin=StoragePlugin.MCAP))
    writer.set_compression(CompressionMode[mode.upper()], CompressionFormat.ZSTD)
    writer.open()
    conn = writer.add_connection("/image_raw", "sensor_msgs/msg/Image", typestore=typestore())
    for i in range(frames):
        stamp = START_NS + i
        writer.write(conn, stamp, image_cdr(np.full((30, 40, 3), i, np.uint8), stamp, "cam", "rgb8"))
    writer.close()
    return tmp / name


def _zstd(data: bytes) -> bytes:
    from backports import zstd

    return zstd.compress(data)


@pytest.mark.ros
def test_a_per_message_zstd_bomb_is_a_counted_failure(tmp_path: Path) -> None:
    """rosbags decompresses each message of a per-message compressed bag in one shot, without a limit:
    a 40 KB message declaring 1 GiB was a MemoryError under the 512 MiB cap. Now at most 8 bytes a pixel of
    the frame budget (+1 MiB) is decompressed; the message is a ``corrupt`` frame."""
    from backports import zstd
    from libredgetpu_ros.errors import InputError

    bag = _compressed_bag(tmp_path, "bag", "message")
    compressor = zstd.ZstdCompressor()
    zeros = bytes(1 << 24)
    bomb = b"".join([*(compressor.compress(zeros) for _ in range(64)), compressor.flush()])
    _append_message(bag, bomb)
    outcome = run_guarded(lambda _: _read(bag), b"", (InputError,), time_limit_s=120, memory_limit_mb=512)
    assert outcome.kind == "accepted", outcome
    causes = _read(bag)
    assert causes == ["", "", "", "corrupt"]


def _append_message(bag: Path, stored: bytes) -> None:
    """Rewrite the bag (per-message compression mode) with one more message whose stored bytes are
    ``stored``: written through rosbags in mode NONE, then the metadata says ``message`` again."""
    import shutil

    from libredgetpu_ros.bags.storage import open_reader
    from libredgetpu_ros.bags.typestore import typestore
    from libredgetpu_ros.bags.writers import install
    from rosbags.rosbag2 import StoragePlugin, Writer

    reader = open_reader(bag)
    rows = [(ts, bytes(data)) for _c, ts, data in reader.storage.storages[0].messages(
        reader.storage.storages[0].connections)]
    reader.close()
    shutil.rmtree(bag)
    writer = install(Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP))
    writer.open()
    conn = writer.add_connection("/image_raw", "sensor_msgs/msg/Image", typestore=typestore())
    for ts, data in [*rows, (rows[-1][0] + 1, stored)]:
        writer.write(conn, ts, data)
    writer.close()
    meta = bag / "metadata.yaml"
    text = meta.read_text()
    assert text.count("compression_mode: ''") == 1 and text.count("compression_format: ''") == 1
    meta.write_text(text.replace("compression_mode: ''", "compression_mode: message")
                    .replace("compression_format: ''", "compression_format: zstd"))


@pytest.mark.ros
@pytest.mark.parametrize("damage", ["chunk index", "bomb"])
def test_a_file_compressed_mcap_is_checked_before_rosbags_opens_it(tmp_path: Path, damage: str) -> None:
    """rosbag2's file compression mode: rosbags decompresses the whole file into a temporary one, without a
    limit, and reads that. Before: the chunk-index byte gave the 2^28 skipped frames (MemoryError under the
    1 GiB cap) and a 1 MB file could claim any size. Now both are refused at open."""
    from libredgetpu_ros.errors import InputError

    bag = _compressed_bag(tmp_path, "bag", "file")
    packed = next(bag.glob("*.mcap.zstd"))
    if damage == "chunk index":
        from backports import zstd

        data = _without_summary_crc(zstd.decompress(packed.read_bytes()))
        data[_chunk_index_field(data, "chunk offset")] ^= 0x01
        packed.write_bytes(_zstd(bytes(data)))
        expected = "chunk index"
    else:  # a few KB of zstd that decompress to 128 MiB: over 64 x its size, refused before rosbags
        from backports import zstd

        compressor = zstd.ZstdCompressor()
        zeros = bytes(1 << 24)
        packed.write_bytes(b"".join([*(compressor.compress(zeros) for _ in range(8)), compressor.flush()]))
        expected = "decompresses to more than"
    outcome = run_guarded(lambda _: _read(bag), b"", (InputError,), time_limit_s=120, memory_limit_mb=1024)
    assert outcome.kind == "refused", outcome
    with pytest.raises(InputError, match=expected):
        _read(bag)


def test_bag_repair_skips_topic_rows_it_cannot_use(tmp_path: Path) -> None:
    """A topics table whose rows have a NULL id or a non-text type (a damaged or hand-made database):
    those topics are skipped with a note (before: KeyError 'id', found by the sqlite_bag fuzz long run)."""
    from libredgetpu_ros.bags.salvage import scan

    db = tmp_path / "bag.db3"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE topics(id INTEGER, name TEXT, type TEXT, serialization_format TEXT, "
                 "offered_qos_profiles TEXT)")
    conn.execute("CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER, timestamp INTEGER, "
                 "data BLOB)")
    conn.executemany("INSERT INTO topics VALUES (?, ?, ?, 'cdr', '')",  # a BLOB type stays a BLOB
                     [(None, "/a", "std_msgs/msg/UInt8MultiArray"), (2, "/b", b"\xff"),
                      (3, "/c", "std_msgs/msg/Empty")])
    conn.executemany("INSERT INTO messages(topic_id, timestamp, data) VALUES (?, ?, ?)",
                     [(None, 1, b"x"), (2, 2, b"y"), (3, 3, b"")])
    conn.commit()
    conn.close()
    report, channels, messages = scan(db)
    assert [cid for cid, _, _ in messages] == [3]
    assert list(channels) == [3] and report.orphans == 2
    assert sum("skipped topic row" in note for note in report.notes) == 2


@pytest.mark.ros
def test_a_damaged_chunk_of_a_per_message_compressed_bag_is_skipped(tmp_path: Path) -> None:
    """Per-message compressed bags are walked by ``mcap_view`` too (then decompressed per message): a chunk
    failing its CRC is skipped, its frames counted (before: rosbags' ReaderError ended the read)."""
    bag = _compressed_bag(tmp_path, "bag", "message")
    mcap = next(bag.glob("*.mcap"))
    data = bytearray(mcap.read_bytes())
    pos = 8
    while data[pos] != 0x06:  # the first chunk record
        pos += 9 + struct.unpack_from("<Q", data, pos + 1)[0]
    data[pos + 9 + 40 + 20] ^= 0xFF  # a byte of its records
    mcap.write_bytes(bytes(data))
    assert _read(bag) == ["corrupt_chunk"] * 3


@pytest.mark.ros
def test_bag_repair_writes_per_message_compressed_messages_decompressed(tmp_path: Path) -> None:
    """bag-repair copied a per-message compressed bag's zstd payloads into a plain bag, where nothing could
    decode them; now they are decompressed (within budget) and the repaired bag reads like the source."""
    from libredgetpu_ros.bags.repair import repair_bag

    bag = _compressed_bag(tmp_path, "bag", "message")
    summary = repair_bag(bag, tmp_path / "fixed")
    assert summary.messages == 3 and summary.decompressed == 3
    assert _read(tmp_path / "fixed") == _read(bag) == ["", "", ""]


@pytest.mark.ros
def test_replay_skips_and_counts_a_per_message_zstd_bomb(ros_env, tmp_path: Path) -> None:
    """``replay`` read messages through rosbags directly: a per-message compressed payload was decompressed
    in one shot without a limit (the 1 GiB bomb above), a damaged chunk ended it with rosbags' ReaderError.
    Now it goes through ``bags.storage.messages``: the bomb is skipped and counted, the 3 frames go out."""
    import threading

    from backports import zstd
    from libredgetpu_ros.ros.replay import Replayer, ReplayOptions
    from rclpy.node import Node

    bag = _compressed_bag(tmp_path, "bag", "message")
    compressor = zstd.ZstdCompressor()
    bomb = b"".join([*(compressor.compress(bytes(1 << 24)) for _ in range(64)), compressor.flush()])
    _append_message(bag, bomb)
    node = Node("replay_under_test", context=ros_env.init_rclpy())
    replayer = Replayer(node, bag, ReplayOptions(rate=100.0), lambda _: None)
    try:
        summary = replayer.play(threading.Event())
    finally:
        replayer.close()
        node.destroy_node()
    assert (summary.published, summary.unreadable) == (3, 1)
