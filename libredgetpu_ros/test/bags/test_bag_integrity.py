"""Bags that survive kills and bit flips (issue 18 item 3).

- Bags we write carry real chunk CRCs (rosbags writes 0); a flipped bit makes its chunk's frames counted
  failures (``corrupt_chunk``), never wrong pixels.
- A writer killed by SIGKILL leaves an MCAP without summary/footer and no metadata.yaml (or a sqlite3 file
  with a journal): ``bag-repair`` recovers every whole chunk (every committed row), exactly.
- SIGTERM ends ``make-bag`` like Ctrl-C: exit 130 and a complete, readable bag.
- The salvage parser is fuzzed (``test/fuzz/harness.py``: seeded mutations, bounded count, time and
  memory per case).
"""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

START_NS = 1_700_000_000_000_000_000


def _chunks(data: bytes) -> list[tuple[int, int, int, int]]:
    """(record offset, records start, records size, stored CRC) of every chunk, walking the records."""
    out, pos = [], 8
    while pos + 9 <= len(data):
        op, size = data[pos], struct.unpack_from("<Q", data, pos + 1)[0]
        if op == 0x06:
            usize, crc = struct.unpack_from("<QI", data, pos + 9 + 16)
            comp_len = struct.unpack_from("<I", data, pos + 9 + 28)[0]
            out.append((pos, pos + 9 + 32 + comp_len + 8, usize, crc))
        if op == 0x0F:  # data end
            break
        pos += 9 + size
    return out


def _message_count(data: bytes, chunk: tuple[int, int, int, int]) -> int:
    _pos, pos, size, _crc = chunk
    count, end = 0, pos + size
    while pos < end:
        count += data[pos] == 0x05
        pos += 9 + struct.unpack_from("<Q", data, pos + 1)[0]
    return count


def _make(tmp_path: Path, fixture_path, name: str = "bag", loop: int = 10, storage: str = "mcap") -> Path:
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag

    files = [fixture_path("images/cat.bmp"), fixture_path("images/grace_hopper.bmp")]
    make_bag(files, tmp_path / name, MakeBagOptions(rate=10.0, loop=loop, start_ns=START_NS, storage=storage),
             progress=False)
    return tmp_path / name


def test_make_bag_writes_real_chunk_crcs(tmp_path: Path, fixture_path) -> None:
    bag = _make(tmp_path, fixture_path, loop=3)
    data = next(bag.glob("*.mcap")).read_bytes()
    chunks = _chunks(data)
    assert len(chunks) >= 3
    for _pos, start, size, crc in chunks:
        assert crc != 0 and crc == zlib.crc32(data[start:start + size])


def _frames(bag: Path) -> list:
    from libredgetpu_ros.ros.bag_reader import FrameReader

    with FrameReader(bag, ["/image_raw"], thread=False) as reader:
        return [(f.timestamp, f.cause, None if f.rgb is None else f.rgb.copy()) for f in reader]


@pytest.mark.ros  # the frame decoders come with rclpy
def test_flipped_bits_are_reported_and_never_decoded(tmp_path: Path, fixture_path) -> None:
    clean_bag = _make(tmp_path, fixture_path, "clean")
    bad_bag = _make(tmp_path, fixture_path, "bad")
    mcap = next(bad_bag.glob("*.mcap"))
    data = bytearray(mcap.read_bytes())
    chunks = _chunks(bytes(data))
    rng = np.random.default_rng(64)
    hit = set()
    for _ in range(64):  # 64 bits flipped inside the chunks' records (the issue's experiment)
        k = int(rng.integers(len(chunks)))
        _pos, start, size, _crc = chunks[k]
        at = start + int(rng.integers(size))
        data[at] ^= 1 << int(rng.integers(8))
        hit.add(k)
    mcap.write_bytes(bytes(data))
    clean = {ts: rgb for ts, _cause, rgb in _frames(clean_bag)}
    got = _frames(bad_bag)
    assert len(got) == len(clean) == 20
    failed = [ts for ts, cause, _rgb in got if cause]
    assert failed and all(cause == "corrupt_chunk" for _ts, cause, _ in got if cause)
    for ts, cause, rgb in got:
        if not cause:
            np.testing.assert_array_equal(rgb, clean[ts])  # a frame that decodes is the original frame
    assert len(failed) >= len(hit)  # every damaged chunk held at least one frame


_KILLED_WRITER = """
import os, signal, sys
from libredgetpu_ros.bags.storage import open_writer
from libredgetpu_ros.bags.typestore import typestore
writer = open_writer(sys.argv[1], sys.argv[2])
conn = writer.add_connection("/blob", "std_msgs/msg/UInt8MultiArray", typestore=typestore())
count, size = int(sys.argv[3]), int(sys.argv[4])
for i in range(count):
    writer.write(conn, 1_000 + i, bytes([i % 251]) * size)
os.kill(os.getpid(), signal.SIGKILL)  # no close(): no summary, footer or metadata.yaml
"""


def _killed_bag(tmp_path: Path, storage: str, count: int, size: int) -> Path:
    bag = tmp_path / f"killed_{storage}"
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(bag), storage, str(count), str(size)],
                          capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert not (bag / "metadata.yaml").exists()
    return bag


@pytest.mark.parametrize(("storage", "count", "size", "recoverable"), [
    ("mcap", 30, 300_000, 28),  # chunks close past 1 MiB: 7 whole chunks of 4 messages, 2 messages pending
    ("sqlite3", 200, 1_000, 192),  # commits every 64 messages (or each second: then more)
])
def test_a_killed_writer_s_bag_is_repaired(tmp_path: Path, storage: str, count: int, size: int,
                                           recoverable: int) -> None:
    from libredgetpu_ros.bags.repair import repair_bag
    from libredgetpu_ros.bags.storage import open_reader
    from libredgetpu_ros.errors import InputError

    bag = _killed_bag(tmp_path, storage, count, size)
    with pytest.raises(InputError, match="bag-repair"):
        open_reader(bag)
    summary = repair_bag(bag, tmp_path / "fixed")
    assert recoverable <= summary.messages <= count
    if storage == "mcap":
        assert summary.messages == recoverable and summary.files[0].chunks == 7
        assert not summary.files[0].complete and summary.files[0].corrupt_chunks == 0
    reader = open_reader(tmp_path / "fixed")
    try:
        got = [(ts, bytes(raw)) for _c, ts, raw in reader.messages()]
        assert [c.msgtype for c in reader.connections] == ["std_msgs/msg/UInt8MultiArray"]
    finally:
        reader.close()
    assert got == [(1_000 + i, bytes([i % 251]) * size) for i in range(summary.messages)]


def test_an_mcap_cut_anywhere_gives_back_its_whole_chunks(tmp_path: Path, fixture_path) -> None:
    from libredgetpu_ros.bags.repair import repair_bag

    bag = _make(tmp_path, fixture_path, loop=3)  # 6 frames
    data = next(bag.glob("*.mcap")).read_bytes()
    chunks = _chunks(data)
    for cut_in in sorted({1, 2, len(chunks) - 1}):  # cut inside chunk k: chunks before it are whole
        _pos, start, size, _crc = chunks[cut_in]
        cut = tmp_path / f"cut{cut_in}"
        cut.mkdir()
        (cut / "cut.mcap").write_bytes(data[: start + size // 2])
        summary = repair_bag(cut, tmp_path / f"fixed{cut_in}")
        assert summary.files[0].chunks == cut_in and summary.files[0].tail_bytes > 0
        assert summary.messages == sum(_message_count(data, c) for c in chunks[:cut_in])


def test_an_mcap_missing_only_its_footer_is_repaired_whole(tmp_path: Path, fixture_path) -> None:
    from libredgetpu_ros.bags.repair import repair_bag
    from libredgetpu_ros.bags.storage import open_reader
    from libredgetpu_ros.errors import InputError

    bag = _make(tmp_path, fixture_path, loop=2)  # metadata.yaml stays; the file loses its last record
    mcap = next(bag.glob("*.mcap"))
    data = mcap.read_bytes()
    mcap.write_bytes(data[:-(9 + 20 + 8)])  # the footer record and the closing magic
    with pytest.raises(InputError, match="bag-repair"):
        open_reader(bag)
    summary = repair_bag(bag, tmp_path / "fixed")
    assert summary.messages == 4 and summary.files[0].complete and summary.files[0].corrupt_chunks == 0


def test_bag_repair_command(tmp_path: Path) -> None:
    import json

    from libredgetpu_ros.cli.main import main

    bag = _killed_bag(tmp_path, "mcap", 9, 300_000)
    out = subprocess.run([sys.executable, "-m", "libredgetpu_ros.cli.main", "bag-repair", str(bag),
                          str(tmp_path / "fixed"), "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["messages"] == 8 and report["files"][0]["complete"] is False
    assert main(["bag-repair", str(bag), str(tmp_path / "fixed")]) == 2  # output exists: bad input
    assert main(["bag-repair", str(tmp_path / "nothing"), str(tmp_path / "x")]) == 2


def test_sigterm_closes_make_bag_like_ctrl_c(tmp_path: Path, fixture_path) -> None:
    from libredgetpu_ros.bags.storage import open_reader

    out = tmp_path / "long"
    proc = subprocess.Popen([sys.executable, "-m", "libredgetpu_ros.cli.main", "make-bag", "--images",
                             str(fixture_path("images/cat.bmp")), "--out", str(out), "--loop", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30

        def written() -> int:  # the bag is written beside ``out`` (storage.new_bag), renamed once closed
            files = list(tmp_path.glob(".long.*.tmp/long/*.mcap"))
            return files[0].stat().st_size if files else 0

        while written() < 3_000_000:
            assert time.monotonic() < deadline and proc.poll() is None, "make-bag did not start writing"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 130, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (out / "metadata.yaml").exists() and not any(tmp_path.glob(".long.*"))
    reader = open_reader(out)
    try:
        assert reader.message_count >= 3
    finally:
        reader.close()


def _salvage_seeds(tmp: Path) -> list[bytes]:
    """Small MCAPs: complete (one chunk + summary), the same cut after its chunk (a killed writer's), and
    one with a zstd chunk; two topics, messages of 40-700 bytes."""
    from libredgetpu_ros.bags.storage import open_writer
    from libredgetpu_ros.bags.typestore import typestore
    from libredgetpu_ros.bags.writers import install
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

    def fill(writer) -> None:
        conns = [writer.add_connection(t, "std_msgs/msg/UInt8MultiArray", typestore=typestore())
                 for t in ("/a", "/b")]
        for i in range(12):
            writer.write(conns[i % 2], 1_000 + i, bytes([i]) * (40 + 60 * i))
        writer.close()

    fill(open_writer(tmp / "plain", "mcap"))
    zstd = install(Writer(tmp / "zstd", version=9, storage_plugin=StoragePlugin.MCAP))
    zstd.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    zstd.open()
    fill(zstd)
    plain = next((tmp / "plain").glob("*.mcap")).read_bytes()
    data_end = _chunks(plain)[-1]
    cut = plain[: data_end[1] + data_end[2] + 200]  # past the chunk, inside its message index
    return [plain, cut, next((tmp / "zstd").glob("*.mcap")).read_bytes()]


def _consume_salvage(data: bytes) -> int:
    from libredgetpu_ros.bags.salvage import ScanReport, scan_mcap_data

    report = ScanReport(Path("<fuzz case>"), "mcap")
    _channels, messages = scan_mcap_data(data, report)
    count = sum(1 for _ in messages)
    assert count == report.messages <= 12
    return count


def test_salvage_fuzz(tmp_path: Path) -> None:
    """2,000 seeded mutations of small MCAPs (the fuzz harness: 2 s and 1 GiB per case): each scan ends
    with what it could recover or an InputError; no other exception, hang or runaway allocation."""
    from libredgetpu_ros.errors import InputError

    from ..fuzz.harness import FuzzTarget, fuzz

    seeds = _salvage_seeds(tmp_path)
    assert [_consume_salvage(seed) for seed in seeds] == [12, 12, 12]
    target = FuzzTarget(name="bag_salvage", seeds=seeds, run=_consume_salvage, allowed=(InputError,))
    report = fuzz(target, 2000, seed=1, time_limit_s=2.0, memory_limit_mb=1024)
    print(report.summary())
    assert report.cases == 2000 and report.ok, report.summary()


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_bag_appears_only_when_closed(tmp_path: Path, storage: str) -> None:
    """``storage.new_bag`` (make-bag, bag-repair, process-bag): the bag is written beside its final name and
    renamed there once closed; an error leaves nothing, Ctrl-C / SIGTERM publishes what was written."""
    from libredgetpu_ros.bags.storage import new_bag, open_reader
    from libredgetpu_ros.bags.typestore import typestore

    def write(out: Path, stop: BaseException) -> None:
        with new_bag(out, storage) as writer:
            conn = writer.add_connection("/a", "std_msgs/msg/UInt8MultiArray", typestore=typestore())
            for i in range(3):
                writer.write(conn, 1_000 + i, bytes(40))
            assert not out.exists() and len(list(tmp_path.glob(f".{out.name}.*.tmp"))) == 1
            raise stop

    with pytest.raises(RuntimeError):
        write(tmp_path / "failed", RuntimeError("disk on fire"))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KeyboardInterrupt):
        write(tmp_path / "interrupted", KeyboardInterrupt())
    assert [p.name for p in tmp_path.iterdir()] == ["interrupted"]
    reader = open_reader(tmp_path / "interrupted")
    try:
        assert reader.message_count == 3
        assert sorted(p.name for p in (tmp_path / "interrupted").iterdir()) == [
            "interrupted.db3" if storage == "sqlite3" else "interrupted.mcap", "metadata.yaml"]
    finally:
        reader.close()
