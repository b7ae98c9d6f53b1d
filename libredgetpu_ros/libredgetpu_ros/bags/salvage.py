"""What a killed or damaged bag still holds: a linear scan of its data, trusting nothing it has not checked.

rosbags (and ``ros2 bag``) read an MCAP file through its summary and footer, which a writer killed by SIGKILL
never writes, and a rosbag2 folder through ``metadata.yaml``, written last. Here:

- **MCAP**: records are walked from the magic onwards; every length is checked against what is left of the
  record or the file before anything is read or allocated. A chunk is kept only when whole: its records
  fit, its size matches, its CRC matches when it has one (0 = not computed), and its inner records parse;
  otherwise it is counted as corrupt and skipped (none of its messages are used). The walk ends at the data
  section's end, at the footer, or where the file stops mid-record (the partial tail is reported).
  Compressed chunks: zstd and lz4 (bounded by the chunk's declared size, at most
  ``MAX_COMPRESSED_CHUNK_BYTES``).
- **sqlite3**: opened read-write so sqlite rolls back an unfinished transaction (the journal a killed
  writer leaves), then the ``topics`` and ``messages`` tables are read.

:func:`scan` returns the channels and a message iterator; ``bags.repair`` writes them to a new bag.
"""

from __future__ import annotations

import glob
import mmap
import re
import sqlite3
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from libredgetpu_ros.bags.decompress import BadRecord, chunk_records
from libredgetpu_ros.errors import InputError
from libredgetpu_ros.textdata import clip, clip_repr

MCAP_MAGIC = b"\x89MCAP0\r\n"
_OP_HEADER, _OP_FOOTER, _OP_SCHEMA, _OP_CHANNEL, _OP_MESSAGE, _OP_CHUNK, _OP_DATA_END = (
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x0F)
_U16, _U32, _U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")


@dataclass(frozen=True)
class Channel:
    """A topic as the bag declares it: enough to write it again."""

    id: int
    topic: str
    msgtype: str
    serialization_format: str
    msgdef: str  # the schema text ('' when unknown)
    qos: str  # offered_qos_profiles as stored ('' when unknown)
    type_hash: str = ""  # rosbag2's type_description_hash when stored (sqlite3)


@dataclass
class ScanReport:
    path: Path
    storage: str
    messages: int = 0
    chunks: int = 0  # whole chunks used
    corrupt_chunks: int = 0  # skipped: CRC mismatch, bad size or unparsable records
    orphans: int = 0  # messages of a channel never declared (its record was in a corrupt chunk)
    bad_rows: int = 0  # sqlite3 rows skipped: a timestamp that is not an integer, data that is not a BLOB
    complete: bool = False  # the data section ended properly (DataEnd / footer seen)
    tail_bytes: int = 0  # bytes after the last whole record (a record cut by the kill)
    notes: list[str] = field(default_factory=list)


class Cursor:
    """Bounds-checked little-endian reads over one record's bytes."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: memoryview, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def _take(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.end:
            raise BadRecord(f"{what}: needs {n} bytes, {self.end - self.pos} left")
        at, self.pos = self.pos, self.pos + n
        return at

    def u16(self, what: str) -> int:
        return _U16.unpack_from(self.data, self._take(2, what))[0]

    def u32(self, what: str) -> int:
        return _U32.unpack_from(self.data, self._take(4, what))[0]

    def u64(self, what: str) -> int:
        return _U64.unpack_from(self.data, self._take(8, what))[0]

    def raw(self, n: int, what: str) -> memoryview:
        at = self._take(n, what)
        return self.data[at:at + n]

    def text(self, what: str) -> str:
        n = self.u32(f"{what} length")
        try:
            return bytes(self.raw(n, what)).decode()
        except UnicodeDecodeError as exc:
            raise BadRecord(f"{what} is not UTF-8") from exc


class _McapScan:
    def __init__(self, data: memoryview, report: ScanReport) -> None:
        self.data, self.report = data, report
        self.schemas: dict[int, tuple[str, str]] = {}  # id -> (name, text)
        self.channels: dict[int, Channel] = {}

    def records(self, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        """(opcode, body start, body end) of the records in [start, end); BadRecord if one overruns."""
        pos = start
        while pos < end:
            if pos + 9 > end:
                raise BadRecord(f"record header at offset {pos} overruns by {pos + 9 - end} bytes")
            op, size = self.data[pos], _U64.unpack_from(self.data, pos + 1)[0]
            if size > end - pos - 9:
                raise BadRecord(f"record 0x{op:02x} at offset {pos} declares {size} bytes, "
                                f"{end - pos - 9} left")
            yield op, pos + 9, pos + 9 + size
            pos += 9 + size

    def definition(self, op: int, start: int, end: int) -> None:
        """A schema or channel record (top level or inside a chunk)."""
        cur = Cursor(self.data, start, end)
        if op == _OP_SCHEMA:
            sid = cur.u16("schema id")
            name, _encoding = cur.text("schema name"), cur.text("schema encoding")
            text = bytes(cur.raw(cur.u32("schema data length"), "schema data")).decode(errors="replace")
            self.schemas[sid] = (name, text)
            return
        cid, sid = cur.u16("channel id"), cur.u16("channel schema id")
        topic, encoding = cur.text("channel topic"), cur.text("channel message encoding")
        n = cur.u32("channel metadata length")
        meta = Cursor(self.data, cur.pos, cur.pos + n)
        cur.raw(n, "channel metadata")
        qos = ""
        while meta.pos < meta.end:
            key, value = meta.text("metadata key"), meta.text("metadata value")
            if key == "offered_qos_profiles":
                qos = value
        name, text = self.schemas.get(sid, ("", ""))
        if not name:
            raise BadRecord(f"channel {cid} ({topic}) refers to unknown schema {sid}")
        self.channels[cid] = Channel(cid, topic, name, encoding, text, qos)

    def message(self, start: int, end: int) -> tuple[int, int, memoryview]:
        cur = Cursor(self.data, start, end)
        cid = cur.u16("message channel id")
        cur.u32("message sequence")
        log_time = cur.u64("message log time")
        cur.u64("message publish time")
        return cid, log_time, self.data[cur.pos:end]

    def chunk(self, start: int, end: int, at: int) -> list[tuple[int, int, memoryview]]:
        """The messages of a whole, valid chunk (definitions registered), or BadRecord."""
        cur = Cursor(self.data, start, end)
        cur.u64("chunk start time")
        cur.u64("chunk end time")
        size, crc = cur.u64("chunk uncompressed size"), cur.u32("chunk CRC")
        compression = cur.text("chunk compression")
        stored = cur.raw(cur.u64("chunk records length"), "chunk records")
        records = chunk_records(stored, compression, size, crc, at)
        inner = _McapScan(records, self.report)
        inner.schemas, inner.channels = dict(self.schemas), dict(self.channels)
        messages = []
        for op, s, e in inner.records(0, len(records)):
            if op in (_OP_SCHEMA, _OP_CHANNEL):
                inner.definition(op, s, e)
            elif op == _OP_MESSAGE:
                messages.append(inner.message(s, e))
        self.schemas, self.channels = inner.schemas, inner.channels  # only once the whole chunk is good
        return messages


def _scan_mcap(path: Path,
               report: ScanReport) -> tuple[dict[int, Channel], Iterator[tuple[int, int, memoryview]]]:
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size < len(MCAP_MAGIC):
            raise InputError(f"{path} is {size} bytes: not an MCAP file")
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    return scan_mcap_data(data, report)


def scan_mcap_data(data: bytes | memoryview,
                   report: ScanReport) -> tuple[dict[int, Channel], Iterator[tuple[int, int, memoryview]]]:
    """The MCAP walk over bytes in memory (a mapped file, or a fuzz case)."""
    data = memoryview(data)
    size = len(data)
    if bytes(data[: len(MCAP_MAGIC)]) != MCAP_MAGIC:
        raise InputError(f"{report.path} does not start with the MCAP magic")
    scan = _McapScan(data, report)
    channels: dict[int, Channel] = {}  # filled as the walk goes: a channel is declared before its messages

    def walk() -> Iterator[tuple[int, int, memoryview]]:
        pos = len(MCAP_MAGIC)
        while pos + 9 <= size:
            op, length = data[pos], _U64.unpack_from(data, pos + 1)[0]
            if length > size - pos - 9:
                break  # the record the kill cut short
            start, end = pos + 9, pos + 9 + length
            try:
                if op in (_OP_SCHEMA, _OP_CHANNEL):
                    scan.definition(op, start, end)
                elif op == _OP_MESSAGE:
                    yield scan.message(start, end)
                elif op == _OP_CHUNK:
                    messages = scan.chunk(start, end, pos)
                    report.chunks += 1
                    channels.update(scan.channels)
                    yield from messages
                elif op in (_OP_DATA_END, _OP_FOOTER):
                    report.complete = True
                    return
            except BadRecord as exc:
                report.corrupt_chunks += op == _OP_CHUNK
                _note(report, f"skipped record 0x{op:02x} at offset {pos}: {exc}")
            channels.update(scan.channels)
            pos = end
        report.tail_bytes = size - pos

    def messages() -> Iterator[tuple[int, int, memoryview]]:
        for cid, log_time, payload in walk():
            if cid in channels:
                report.messages += 1
                yield cid, log_time, payload
            else:
                report.orphans += 1

    return channels, messages()


def _scan_sqlite3(path: Path,
                  report: ScanReport) -> tuple[dict[int, Channel], Iterator[tuple[int, int, bytes]]]:
    try:
        conn = sqlite3.connect(path)  # read-write: rolls back a killed transaction; a plain path, not a URI
        conn.text_factory = _text  # TEXT that is not UTF-8 becomes a marker, not a UnicodeDecodeError
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"topics", "messages"} <= tables:
            raise InputError(f"{path} has no rosbag2 tables (topics, messages)")
        defs = {}
        if "message_definitions" in tables:
            rows = conn.execute("SELECT topic_type, encoded_message_definition, type_description_hash "
                                "FROM message_definitions")
            defs = {t: (d, h) for t, d, h in rows if _all_text(t, d, h)}
        rows = conn.execute("SELECT * FROM topics")
        columns = [d[0] for d in rows.description]
        if not {"id", "name", "type"} <= set(columns):
            raise InputError(f"{path}: table topics has columns {', '.join(columns)[:200]}, "
                             f"not id, name, type")
        channels = {}
        for row in rows:
            values = {k: v for k, v in zip(columns, row, strict=True) if v is not None}
            channel = _sqlite_channel(values, defs)
            if channel is None:
                _note(report, f"skipped topic row {clip_repr(row, 120)}: not an integer id with text fields")
                continue
            channels[channel.id] = channel
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # sqlite's message may quote non-UTF-8 text
        raise InputError(f"cannot read {path} as an sqlite3 bag: {clip(exc, 300)}") from exc
    report.complete = True

    def messages() -> Iterator[tuple[int, int, bytes]]:
        try:
            for cid, timestamp, data in conn.execute(
                    "SELECT topic_id, timestamp, CASE typeof(data) WHEN 'blob' THEN data "
                    "ELSE typeof(data) END FROM messages ORDER BY timestamp, id"):
                if type(timestamp) is not int or not isinstance(data, bytes):
                    # a column holds what was stored in it: TEXT or INTEGER data, a TEXT timestamp
                    report.bad_rows += 1
                    _note(report, f"skipped a row of topic {clip_repr(cid, 20)}: timestamp "
                                  f"{clip_repr(timestamp, 40)}, data of type "
                                  f"{'blob' if isinstance(data, bytes) else data} "
                                  f"(not an integer and a blob)")
                elif cid in channels:
                    report.messages += 1
                    yield cid, timestamp, data
                else:
                    report.orphans += 1
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # a damaged page: what was read is kept
            report.complete = False
            _note(report, f"stopped at a damaged part of the database: {clip(exc, 300)}")
        finally:
            conn.close()

    return channels, messages()


class _NotUtf8(bytes):
    """A TEXT value that is not UTF-8 (never a str, so never taken for a name)."""


def _text(raw: bytes) -> str | _NotUtf8:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return _NotUtf8(raw)


def _all_text(*values: object) -> bool:
    return all(isinstance(v, str) for v in values)


def _sqlite_channel(values: dict[str, object], defs: dict[str, tuple[str, str]]) -> Channel | None:
    """The Channel of a ``topics`` row (None when its id is not an integer or a text field is not text)."""
    cid, name, msgtype = values.get("id"), values.get("name"), values.get("type")
    fmt, qos = values.get("serialization_format", "cdr"), values.get("offered_qos_profiles", "")
    type_hash = values.get("type_description_hash", "")
    if type(cid) is not int or not _all_text(name, msgtype, fmt, qos, type_hash):
        return None
    msgdef, stored_hash = defs.get(msgtype, ("", ""))  # type: ignore[arg-type]
    return Channel(cid, name, msgtype, fmt, msgdef, qos, type_hash or stored_hash)  # type: ignore[arg-type]


def _note(report: ScanReport, text: str) -> None:
    if len(report.notes) < 20:
        report.notes.append(text)


def unfinished_hint(bag: Path) -> str:
    """For a bag that does not exist: where our writers left it unfinished when killed (``storage.new_bag``
    writes ``.<name>.<random>.tmp/<name>`` beside it), if anywhere."""
    left = sorted(bag.parent.glob(f".{glob.escape(bag.name)}.*.tmp/{glob.escape(bag.name)}"))
    return f"; its writer was stopped before it closed it: `libredgetpu-ros bag-repair {left[0]} OUT` " \
        f"recovers what was written" if left else ""


def data_files(bag: Path) -> list[Path]:
    """The storage files of a bag folder (or the file itself), in name order."""
    if bag.is_file():
        return [bag]
    if not bag.is_dir():
        raise InputError(f"bag {bag} does not exist{unfinished_hint(bag)}")
    # split bags are <name>_0, <name>_1, ... <name>_10: numbers compared as numbers
    files = sorted((p for p in bag.iterdir() if p.suffix in (".mcap", ".db3")),
                   key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)])
    if not files:
        packed = [p.name for p in bag.iterdir() if p.name.endswith((".mcap.zstd", ".db3.zstd"))]
        if packed:
            raise InputError(f"bag folder {bag} holds file-compressed storage ({', '.join(packed[:3])}): "
                             f"decompress it first (zstd -d) to repair it")
        raise InputError(f"bag folder {bag} holds no .mcap or .db3 file")
    return files


def scan(path: Path) -> tuple[ScanReport, dict[int, Channel], Iterator[tuple[int, int, bytes | memoryview]]]:
    """(report, channels by id, messages as (channel id, timestamp, payload)) of one storage file. The
    channels fill in as the messages are consumed (each before its first message); so do the report's
    counts."""
    storage = "sqlite3" if path.suffix == ".db3" else "mcap"
    report = ScanReport(path, storage)
    channels, messages = (_scan_sqlite3 if storage == "sqlite3" else _scan_mcap)(path, report)
    return report, channels, messages
