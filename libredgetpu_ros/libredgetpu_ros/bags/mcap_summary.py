"""An MCAP file's footer and summary section, checked against the file before rosbags reads them.

rosbags 0.11 opens an MCAP file through its summary (schemas, channels, chunk indexes, statistics) and
trusts every length and count in it: one changed byte took a record length (allocated at once), a schema
encoding (a KeyError), a QoS string (a KeyError deep in its parser) or a chunk's message-index offsets
(from which it derives the message count per chunk, 2^36 for one changed byte: ``process-bag`` then grew to
5.7 GB listing the frames of a chunk it skipped). :func:`check_mcap` reads the same records first, with
every length checked against what is left of its record and the file, and cross-checks the chunk index
against the bytes it points at:

- footer: its fixed layout, the summary offsets inside the file, the summary CRC when there is one (our
  writers record it; rosbags writes 0, "not computed");
- summary records tile the section up to the footer; schema and channel records parse (UTF-8 text, a
  schema encoding rosbags knows, channel metadata as key/value strings);
- each chunk index: its chunk inside the data section, the chunk record there (opcode, length, times,
  uncompressed size, compression, stored size) equal to the index's copy, a compression we read, an
  uncompressed size within ``decompress.check_chunk_size``'s budget, chunks not overlapping; its message index
  records (the ones the count is derived from) where the index says, tiling their range, each of the right
  channel and a whole number of 16-byte entries, and no more messages than the chunk's bytes can hold;
- statistics: the fixed part and its per-channel counts whole, no count above what the file can hold.

Where rosbags would instead scan the data section at open (no summary, statistics without schemas, no
chunk index), the data section is first walked by ``salvage.scan_mcap_data`` (every length and chunk
checked, compressed chunks within budget and exactly their declared size), and any damage refuses the file.

Any failure is a :class:`BadSummary` (an ``InputError``) naming the file, the record's offset and the field;
``storage.open_reader`` adds the ``bag-repair`` hint (the salvage walk does not use the summary), or for a
channel's QoS profiles over their cap (``qos_checks``, kept as the cause) a hint of its own.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from libredgetpu_ros.bags.crc import crc32
from libredgetpu_ros.bags.decompress import COMPRESSIONS, BadRecord, check_chunk_size
from libredgetpu_ros.bags.qos_checks import QOS_KEY, QosTooLarge, check_qos_text, qos_budget
from libredgetpu_ros.bags.salvage import MCAP_MAGIC, Cursor, ScanReport, scan_mcap_data
from libredgetpu_ros.errors import InputError

_OP_HEADER, _OP_FOOTER, _OP_SCHEMA, _OP_CHANNEL, _OP_CHUNK = 0x01, 0x02, 0x03, 0x04, 0x06
_OP_MESSAGE_INDEX, _OP_CHUNK_INDEX, _OP_STATISTICS = 0x07, 0x08, 0x0B
_OP_SUMMARY_OFFSET, _OP_DATA_END = 0x0E, 0x0F
_FOOTER = struct.Struct("<BQQQI")  # opcode, record length (20), summary start, summary offset start, CRC
_FOOTER_SIZE = _FOOTER.size + len(MCAP_MAGIC)  # 37
_U64 = struct.Struct("<Q")
_SCHEMA_ENCODINGS = ("ros2msg", "ros2idl", "omgidl", "")  # rosbags' get_msgdef table
_MIN_MESSAGE = 9 + 22  # a message record: opcode, length, channel, sequence, log and publish time
_MIN_CHUNK = 9 + 40  # a chunk record with an empty compression string and no records
_MAX_FILE_RATIO = 64  # a file-compressed bag may decompress to this many times its size (+1 MiB)


class BadSummary(InputError):
    """An MCAP file's footer or summary does not agree with the file."""


@dataclass(frozen=True)
class _ChunkIndex:
    at: int  # the index record's offset (for messages)
    start_time: int
    end_time: int
    offset: int
    length: int
    index_offsets: dict[int, int]
    index_length: int
    compression: str
    compressed_size: int
    uncompressed_size: int


def check_mcap(path: Path) -> None:
    """BadSummary unless ``path``'s footer and summary can be handed to rosbags (module docstring)."""
    with path.open("rb") as f:
        if f.seek(0, 2) == 0:
            raise BadSummary(f"{path} is empty")
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    try:
        check_mcap_data(data, str(path))
    except BadRecord as exc:
        raise BadSummary(f"{path}: {exc}") from exc
    finally:
        data.release()


def check_compressed_mcap(path: Path) -> None:
    """:func:`check_mcap` of a zstd-compressed MCAP file (rosbag2's file compression mode), decompressed as
    rosbags will decompress it (every frame, into a temporary file) but within the budget of
    ``_MAX_FILE_RATIO`` x its size + 1 MiB, so a small file cannot fill the disk first."""
    import tempfile

    from libredgetpu_ros.bags.decompress import zstd_module

    zstd = zstd_module()
    budget = _MAX_FILE_RATIO * path.stat().st_size + (1 << 20)
    with tempfile.TemporaryDirectory(prefix="mcap-check-") as tmp:
        plain = Path(tmp) / path.stem
        try:
            with path.open("rb") as bio, zstd.open(bio, "rb") as src, plain.open("wb") as out:
                while piece := src.read(1 << 24):
                    if out.tell() + len(piece) > budget:
                        raise BadSummary(f"{path} decompresses to more than {budget} bytes "
                                         f"({_MAX_FILE_RATIO} x its size + 1 MiB)")
                    out.write(piece)
        except (zstd.ZstdError, EOFError) as exc:
            raise BadSummary(f"{path} does not decompress as zstd: {exc}") from exc
        try:
            check_mcap(plain)
        except BadSummary as exc:
            raise BadSummary(str(exc).replace(str(plain), f"{path} (decompressed)")) from exc


def check_mcap_data(data: bytes | memoryview, name: str) -> None:
    """The checks of :func:`check_mcap` on bytes in memory (a mapped file, or a fuzz case); BadRecord or
    BadSummary on failure."""
    data = memoryview(data)
    size = len(data)
    if size < len(MCAP_MAGIC) + 9 + _FOOTER_SIZE or bytes(data[:len(MCAP_MAGIC)]) != MCAP_MAGIC:
        raise BadSummary(f"{name} is not an MCAP file ({size} bytes, no MCAP magic and header)")
    if data[8] != _OP_HEADER:
        raise BadRecord(f"the record at offset 8 is 0x{data[8]:02x}, not the header")
    header_length = _U64.unpack_from(data, 9)[0]
    if header_length > size - 17 - _FOOTER_SIZE:
        raise BadRecord(f"header record length {header_length} runs past the file's end")
    data_start = 17 + header_length
    footer_at = size - _FOOTER_SIZE
    if bytes(data[size - len(MCAP_MAGIC):]) != MCAP_MAGIC:
        raise BadSummary(f"{name} does not end with the MCAP magic (was its writer killed?)")
    op, length, summary_start, offset_start, crc = _FOOTER.unpack_from(data, footer_at)
    if op != _OP_FOOTER or length != 20:
        raise BadRecord(f"footer at offset {footer_at}: opcode 0x{op:02x}, length {length}")
    if summary_start and not data_start <= summary_start <= footer_at:
        raise BadRecord(f"footer: summary start {summary_start} is outside [{data_start}, {footer_at}]")
    if offset_start and not (summary_start or data_start) <= offset_start <= footer_at:
        raise BadRecord(f"footer: summary offset start {offset_start} is outside the summary section")
    if summary_start and crc and crc32(data[summary_start:footer_at + 9 + 16]) != crc:
        raise BadRecord(f"summary section [{summary_start}, {footer_at}): CRC mismatch")
    data_end = summary_start or footer_at
    with qos_budget():  # the bag's, when open_reader checks its files; else this file's own
        chunks, schemas, statistics = (_summary(data, summary_start, footer_at) if summary_start
                                       else ([], 0, None))
    for chunk in chunks:
        _check_chunk(data, chunk, data_start, data_end)
    _check_disjoint(chunks)
    stored = data_end - data_start + sum(c.uncompressed_size for c in chunks)
    if statistics is not None and max(statistics, default=0) * _MIN_MESSAGE > stored:
        raise BadRecord(f"statistics count {max(statistics)} messages; the file holds at most "
                        f"{stored // _MIN_MESSAGE}")
    # rosbags scans the data section itself when the summary does not describe it: walk it first
    if not summary_start or (statistics is not None and not schemas) or not chunks:
        _check_top_level(data, data_start, data_end)
        _check_data_section(data[:data_end], name)


def _summary(data: memoryview, start: int,
             footer_at: int) -> tuple[list[_ChunkIndex], int, list[int] | None]:
    """(chunk indexes, schema count, statistics counts) of the summary records rosbags reads (up to the
    first summary offset record); every record up to the footer must be whole."""
    chunks: list[_ChunkIndex] = []
    schemas, statistics = 0, None
    reading = True
    for op, body, end in _records(data, start, footer_at):
        if op in (_OP_SUMMARY_OFFSET, _OP_FOOTER):
            reading = False  # rosbags stops here; the rest only has to be whole
        if not reading:
            continue
        cur = Cursor(data, body, end)
        if op == _OP_SCHEMA:
            _schema(cur, body - 9)
            schemas += 1
        elif op == _OP_CHANNEL:
            _channel(cur)
        elif op == _OP_CHUNK_INDEX:
            chunks.append(_chunk_index(cur, body - 9))
        elif op == _OP_STATISTICS:
            statistics = _statistics(cur)
    return chunks, schemas, statistics


def _records(data: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(opcode, body start, body end) of the records tiling [start, end) exactly."""
    pos = start
    while pos < end:
        if pos + 9 > end:
            raise BadRecord(f"record header at offset {pos} overruns the section's end {end}")
        op, length = data[pos], _U64.unpack_from(data, pos + 1)[0]
        if length > end - pos - 9:
            raise BadRecord(f"record 0x{op:02x} at offset {pos} declares {length} bytes, "
                            f"{end - pos - 9} left in its section")
        yield op, pos + 9, pos + 9 + length
        pos += 9 + length


def _schema(cur: Cursor, at: int) -> None:
    cur.u16("schema id")
    cur.text("schema name")
    encoding = cur.text("schema encoding")
    if encoding not in _SCHEMA_ENCODINGS:
        raise BadRecord(f"schema at offset {at}: encoding {encoding[:40]!r} is not one of "
                        f"{', '.join(repr(e) for e in _SCHEMA_ENCODINGS)}")
    cur.text("schema data")  # rosbags decodes it as UTF-8 text


def _channel(cur: Cursor) -> None:
    cur.u16("channel id")
    cur.u16("channel schema id")
    topic = cur.text("channel topic")
    cur.text("channel message encoding")
    n = cur.u32("channel metadata length")
    meta = Cursor(cur.data, cur.pos, cur.pos + n)
    cur.raw(n, "channel metadata")
    while meta.pos < meta.end:
        key, value = meta.text("metadata key"), meta.text("metadata value")
        if key == QOS_KEY:
            _check_qos(topic, value)


def _check_qos(topic: str, text: str) -> None:
    """The QoS text within the per-topic cap, the bag's totals and textdata's budgets (``qos_checks``), and
    parsing as rosbags will parse it at open (its parser raises KeyError, TypeError, ... on a damaged
    profile; not again for a text that passed in another file of the bag)."""
    from rosbags.rosbag2.metadata import parse_qos

    try:
        check_qos_text(topic, text, "channel offered_qos_profiles", also=parse_qos)
    except MemoryError:
        raise
    except QosTooLarge as exc:  # kept as the cause: storage.open_reader's hint depends on it
        raise BadRecord(f"channel {exc}") from exc
    except Exception as exc:  # any parser failure (TextDataError too) is a damaged record
        raise BadRecord(f"channel offered_qos_profiles does not parse ({type(exc).__name__}: "
                        f"{str(exc)[:80]})") from exc


def _chunk_index(cur: Cursor, at: int) -> _ChunkIndex:
    start_time, end_time = cur.u64("chunk index start time"), cur.u64("chunk index end time")
    offset, length = cur.u64("chunk index chunk offset"), cur.u64("chunk index chunk length")
    n = cur.u32("chunk index message index offsets length")
    if n % 10:
        raise BadRecord(f"chunk index at offset {at}: message index offsets are {n} bytes, not (u16, u64) "
                        f"pairs")
    raw = cur.raw(n, "chunk index message index offsets")
    index_offsets = dict(struct.iter_unpack("<HQ", raw))
    index_length = cur.u64("chunk index message index length")
    compression = cur.text("chunk index compression")
    compressed = cur.u64("chunk index compressed size")
    uncompressed = cur.u64("chunk index uncompressed size")
    return _ChunkIndex(at, start_time, end_time, offset, length, index_offsets, index_length, compression,
                       compressed, uncompressed)


def _statistics(cur: Cursor) -> list[int]:
    counts = [cur.u64("statistics message count")]
    for what in ("schema count", "channel count"):
        (cur.u16 if what == "schema count" else cur.u32)(f"statistics {what}")
    for what in ("attachment count", "metadata count", "chunk count"):
        cur.u32(f"statistics {what}")
    cur.u64("statistics start time")
    cur.u64("statistics end time")
    n = cur.u32("statistics channel message counts length")
    if n % 10:
        raise BadRecord(f"statistics: channel message counts are {n} bytes, not (u16, u64) pairs")
    counts += [count for _, count in struct.iter_unpack("<HQ", cur.raw(n, "statistics channel counts"))]
    return counts


def _check_chunk(data: memoryview, chunk: _ChunkIndex, data_start: int, data_end: int) -> None:
    """The chunk and its message index records agree with the chunk index (module docstring)."""
    where = f"chunk index at offset {chunk.at}"
    end = chunk.offset + chunk.length
    if chunk.offset < data_start or end + chunk.index_length > data_end or chunk.length < _MIN_CHUNK:
        raise BadRecord(f"{where}: chunk [{chunk.offset}, +{chunk.length}) and its message index "
                        f"(+{chunk.index_length}) are not inside the data section [{data_start}, {data_end})")
    if chunk.compression not in COMPRESSIONS:
        raise BadRecord(f"{where}: compression {chunk.compression[:40]!r} is not one of zstd, lz4 or none")
    if not chunk.compression and chunk.compressed_size != chunk.uncompressed_size:
        raise BadRecord(f"{where}: uncompressed chunk of {chunk.compressed_size} stored bytes claims "
                        f"{chunk.uncompressed_size}")
    check_chunk_size(chunk.uncompressed_size, chunk.compressed_size, chunk.compression, chunk.offset)
    cur = Cursor(data, chunk.offset + 9, end)
    op, length = data[chunk.offset], _U64.unpack_from(data, chunk.offset + 1)[0]
    found = (op, length, cur.u64("chunk start time"), cur.u64("chunk end time"), cur.u64("chunk size"))
    cur.u32("chunk CRC")
    found += (cur.text("chunk compression"), cur.u64("chunk records length"))
    wanted = (_OP_CHUNK, chunk.length - 9, chunk.start_time, chunk.end_time, chunk.uncompressed_size,
              chunk.compression, chunk.compressed_size)
    if found != wanted or cur.pos + chunk.compressed_size != end:
        raise BadRecord(f"{where}: the chunk record at offset {chunk.offset} says (opcode, length, start, "
                        f"end, size, compression, stored) = {str(found)[:200]}, the index "
                        f"{str(wanted)[:200]}")
    _check_message_indexes(data, chunk, where)


def _check_message_indexes(data: memoryview, chunk: _ChunkIndex, where: str) -> None:
    """rosbags counts a channel's messages in a chunk from the distance between consecutive message index
    offsets: each record must be where the index says, fill that distance, and be of its channel."""
    first, last = chunk.offset + chunk.length, chunk.offset + chunk.length + chunk.index_length
    ordered = sorted((offset, cid) for cid, offset in chunk.index_offsets.items())
    total = 0
    for k, (offset, cid) in enumerate(ordered):
        stop = ordered[k + 1][0] if k + 1 < len(ordered) else last
        if not first <= offset < stop:
            raise BadRecord(f"{where}: message index of channel {cid} at offset {offset} is not inside "
                            f"[{first}, {last}) or overlaps the next one")
        cur = Cursor(data, offset, stop)
        op, length, channel = cur.raw(1, "message index opcode")[0], cur.u64("message index length"), \
            cur.u16("message index channel")
        entries = cur.u32("message index entries length")
        if op != _OP_MESSAGE_INDEX or length != stop - offset - 9 or channel != cid \
                or entries != length - 6 or entries % 16:
            raise BadRecord(f"{where}: message index record at offset {offset} (opcode 0x{op:02x}, length "
                            f"{length}, channel {channel}, {entries} entry bytes) does not fill "
                            f"[{offset}, {stop}) for channel {cid}")
        total += entries // 16
    if total * _MIN_MESSAGE > chunk.uncompressed_size:
        raise BadRecord(f"{where}: its message indexes list {total} messages, more than "
                        f"{chunk.uncompressed_size} bytes of records can hold")


def _check_disjoint(chunks: list[_ChunkIndex]) -> None:
    previous_end, previous_at = -1, -1
    for chunk in sorted(chunks, key=lambda c: c.offset):
        if chunk.offset < previous_end:
            raise BadRecord(f"chunk index at offset {chunk.at}: its chunk at offset {chunk.offset} overlaps "
                            f"the one of the chunk index at offset {previous_at}")
        previous_end, previous_at = chunk.offset + chunk.length + chunk.index_length, chunk.at


def _check_top_level(data: memoryview, start: int, end: int) -> None:
    """rosbags' scan goes on past the data end record up to the summary (or footer): every record there
    must be whole too, and no chunk may follow the data end (the salvage walk stops at it)."""
    ended = False
    for op, body, _ in _records(data, start, end):
        if ended and op == _OP_CHUNK:
            raise BadRecord(f"chunk record at offset {body - 9} after the data end record")
        ended = ended or op == _OP_DATA_END


def _check_data_section(data: memoryview, name: str) -> None:
    """The records rosbags would scan at open (or while reading an unindexed file), walked and checked by
    the salvage scanner: any record it had to skip refuses the file."""
    report = ScanReport(Path(name), "mcap")
    _channels, messages = scan_mcap_data(data, report)
    for _ in messages:
        pass
    if report.corrupt_chunks or report.notes or report.orphans:
        problem = report.notes[0] if report.notes else f"{report.orphans} message(s) of undeclared channels"
        raise BadSummary(f"{name}: the data section rosbags would scan is damaged: {problem}")
