"""Opening rosbag2 bags for reading and writing (sqlite3 or mcap) with errors that name the path."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from libredgetpu_ros.errors import InputError, OutputError

STORAGES = ("mcap", "sqlite3")
IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")


def open_reader(path: str | Path) -> Any:
    """An opened ``rosbags.rosbag2.Reader`` (a bag folder, or its single .mcap / .db3 file). MCAP files are
    checked first (``mcap_summary``: footer, summary and chunk index against the file), so rosbags never
    allocates or counts from a field that disagrees with the file; anything rosbags then raises on the
    bag's bytes is an InputError with the ``bag-repair`` hint too."""
    from rosbags.rosbag2 import Reader

    from libredgetpu_ros.bags.mcap_summary import check_compressed_mcap, check_mcap
    from libredgetpu_ros.bags.qos_checks import qos_budget, qos_refusal
    from libredgetpu_ros.bags.salvage import unfinished_hint

    path = Path(path)
    try:
        exists = path.exists()
    except OSError as exc:  # a name too long, a loop: nothing to open
        from libredgetpu_ros.textdata import clip

        raise InputError(f"bag {clip(str(path))} cannot be opened: {exc.strerror or exc}") from None
    if not exists:
        raise InputError(f"bag {path} does not exist{unfinished_hint(path)}")
    _check_entries(path)
    reader = None
    try:
        files = [path] if path.is_file() else sorted(path.iterdir())
        with qos_budget():  # the bag's QoS totals: its files and metadata.yaml together
            for file in files:
                if file.suffix == ".mcap":
                    check_mcap(file)
                elif file.name.endswith(".mcap.zstd"):  # rosbag2's file compression: rosbags decompresses it
                    check_compressed_mcap(file)
                elif file.suffix == ".db3":
                    _check_sqlite_path(file)
                    _check_sqlite_qos(file)
            if (path / "metadata.yaml").is_file():
                _check_metadata(path / "metadata.yaml")
        reader = Reader(path)
        reader.open()
    except MemoryError:
        raise
    except Exception as exc:  # InputError from the checks, or whatever rosbags raises on the bag's bytes
        refused: type[InputError] = InputError
        if (qos := qos_refusal(exc)) is not None:
            refused, hint = qos
        elif path.is_dir() and not (path / "metadata.yaml").exists():
            hint = (" (no metadata.yaml: was its writer killed? `libredgetpu-ros bag-repair` recovers what "
                    "was written)")
        else:
            hint = " (`libredgetpu-ros bag-repair` recovers what a damaged or unfinished bag still holds)"
        raise refused(f"cannot read bag {path}: {_describe(exc)}{hint}") from exc
    return reader


def _check_entries(path: Path) -> None:
    """A bag is a regular file or a folder of regular files (symlinks followed): a FIFO or a device among
    them (``x.mcap``, ``metadata.yaml``) would block or never end the first read, hanging a node's executor
    (``~/fit`` with a bag) or the CLI. Checked before anything is opened."""
    from libredgetpu_ros.paths import check_regular
    from libredgetpu_ros.textdata import clip

    if path.is_dir():
        try:
            entries = sorted(path.iterdir())
        except OSError as exc:
            raise InputError(f"cannot read bag {clip(str(path))}: {type(exc).__name__}: {clip(exc)}") \
                from None
        for entry in entries:
            if not entry.is_dir():
                check_regular(entry, f"bag {clip(str(path))}: entry")
    else:
        check_regular(path, "bag")


SQLITE_URI_CHARS = "#?%"


def _check_sqlite_path(path: Path) -> None:
    """rosbags opens a .db3 as the SQLite URI f"file:{path}", unescaped: a '#', '?' or '%' anywhere in the
    path cuts or rewrites it, so another file would be opened (or written). Refused, naming the way out."""
    bad = sorted({c for c in str(path.absolute()) if c in SQLITE_URI_CHARS})
    if bad:
        from libredgetpu_ros.textdata import clip

        raise InputError(f"sqlite3 bag {clip(str(path))}: its path holds {' '.join(map(repr, bad))}, which "
                         f"rosbags' SQLite URI misreads; rename the folder or use mcap storage")


def _check_sqlite_qos(path: Path) -> None:
    """Each topic's ``offered_qos_profiles`` YAML within the per-topic cap, the bag's totals and textdata's
    budgets (``qos_checks``): rosbags parses it at open with no depth or alias bound (a deeply nested one was
    a RecursionError)."""
    import sqlite3

    from libredgetpu_ros.bags.qos_checks import QosTooLarge, check_qos_text, qos_budget

    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)  # '#', '?', '%' escaped
        try:
            rows = conn.execute("SELECT name, offered_qos_profiles FROM topics").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return  # an older schema or a damaged file: rosbags' own open says which
    with qos_budget():
        for name, text in rows:
            if isinstance(text, str) and text:
                try:
                    check_qos_text(str(name), text, f"{path.name}: offered_qos_profiles", max_depth=16)
                except QosTooLarge as exc:
                    raise type(exc)(f"{path.name}: {exc}") from None


def _check_metadata(path: Path) -> None:
    """``metadata.yaml`` within textdata's budgets (rosbags' YAML reader has none for depth or aliases), its
    topics' QoS profiles within the per-topic cap first (``qos_checks``: found without parsing the file)."""
    from libredgetpu_ros.bags.qos_checks import check_metadata_qos
    from libredgetpu_ros.textdata import MAX_YAML_BYTES, clip, decode_utf8, load_yaml, read_file

    origin = f"metadata.yaml {clip(path)}"
    text = decode_utf8(read_file(path, "metadata.yaml", MAX_YAML_BYTES), origin)
    check_metadata_qos(text, "metadata.yaml")
    load_yaml(text, origin, max_depth=32)


def _describe(exc: BaseException) -> str:
    """One line for an error from reading a bag: our typed errors as they are, a library's with its type."""
    from libredgetpu_ros.textdata import clip

    text = clip(" ".join(str(exc).split()), 300)
    return text if isinstance(exc, (InputError, OSError)) else f"{type(exc).__name__}: {text}"


def guarded_messages(messages: Iterator[Any], path: str | Path) -> Iterator[Any]:
    """``messages`` (rosbags' iteration of an opened bag) with whatever rosbags or sqlite raise on the bag's
    bytes while reading (ReaderError, apsw errors, struct.error, ...) turned into one InputError naming the
    bag; MemoryError passes (the readers' checks are meant to make it impossible)."""
    while True:
        try:
            item = next(messages)
        except StopIteration:
            return
        except (MemoryError, InputError):
            raise
        except Exception as exc:  # rosbags' parsers on the bag's bytes: every failure means a damaged bag
            raise InputError(f"cannot read bag {path}: {_describe(exc)} (`libredgetpu-ros bag-repair` "
                             f"recovers what a damaged bag still holds)") from exc
        yield item


def open_writer(path: str | Path, storage: str) -> Any:
    """An opened ``rosbags.rosbag2.Writer`` creating the bag folder ``path`` (which must not exist), with
    chunk CRCs and periodic commits (``bags.writers``)."""
    from rosbags.rosbag2 import StoragePlugin, Writer, WriterError

    from libredgetpu_ros.bags.writers import install

    path = Path(path)
    if storage not in STORAGES:
        raise InputError(f"storage {storage!r} is not one of {', '.join(STORAGES)}")
    if path.exists():
        raise InputError(f"output bag {path} already exists: remove it or choose another name")
    if storage == "sqlite3":  # written correctly by bags.writers, but rosbags could not read it back
        _check_sqlite_path(path / f"{path.name}.db3")
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    try:
        writer = install(Writer(path, version=9, storage_plugin=plugin))  # real CRCs, kill-safe (writers.py)
        writer.open()
    except (WriterError, OSError) as exc:
        raise InputError(f"cannot create bag {path}: {exc}") from exc
    return writer


@dataclass(frozen=True, slots=True)
class Unreadable:
    """Stands for a message's payload that could not be read (``messages`` below); ``reason`` says why."""

    reason: str


def messages(reader: Any, connections: list[Any], max_bytes: int) -> Iterator[tuple[Any, int, Any]]:
    """``reader.messages(connections)`` with what rosbags raises on the bag's bytes as an InputError
    (``guarded_messages``). For a bag in rosbag2's per-message compression mode the messages are
    decompressed here instead of by rosbags (one-shot ``zstd.decompress``, no limit): see
    :func:`decompressed`."""
    if getattr(reader, "compression_mode", None) != "message":
        yield from guarded_messages(reader.messages(connections=connections), reader.path)
        return
    from libredgetpu_ros.bags.mcap_view import match_connection

    for storage in reader.storage.storages:  # DirectoryReader.messages' walk, without its decompression
        connmap = {x.id: conn for x in storage.connections
                   if (conn := match_connection(x, connections)) is not None}
        wanted = [x for x in storage.connections if x.id in connmap]
        if wanted:
            stored = guarded_messages(storage.messages(wanted), reader.path)
            yield from decompressed(((connmap[conn.id], timestamp, data) for conn, timestamp, data in stored),
                                    max_bytes)


def decompressed(items: Iterable[tuple[Any, int, Any]], max_bytes: int) -> Iterator[tuple[Any, int, Any]]:
    """(connection, timestamp, payload) of a per-message compressed bag with each payload decompressed:
    one zstd frame of at most ``max_bytes``; a payload failing that comes out as :class:`Unreadable`,
    ``None`` (a message of a skipped chunk, ``mcap_view``) stays ``None``."""
    from libredgetpu_ros.bags.decompress import BadRecord, decompress

    for conn, timestamp, data in items:
        if data is not None:
            try:
                data = bytes(decompress(data, "zstd", max_bytes, "message"))
            except BadRecord as exc:
                data = Unreadable(str(exc))
        yield conn, timestamp, data


@contextlib.contextmanager
def new_bag(path: str | Path, storage: str) -> Iterator[Any]:
    """An opened writer (``open_writer``) of a new bag that appears at ``path`` only once it is closed and
    complete: it is written in a temporary folder beside ``path`` and renamed into place after an fsync
    (``atomicio.atomic_directory``), so no reader ever sees half a bag under the final name.

    Ctrl-C or SIGTERM (KeyboardInterrupt) inside the block closes the bag, publishes it with what it holds
    (a complete, readable bag: the CLI's exit 130 contract) and re-raises; any other exception removes it.
    After SIGKILL, the unfinished bag stays in the hidden ``.<name>.<random>.tmp/<name>`` beside ``path``,
    where ``bag-repair`` recovers its whole chunks."""
    from libredgetpu_ros.atomicio import atomic_directory, make_folder

    path = Path(path)
    if path.exists():
        raise InputError(f"output bag {path} already exists: remove it or choose another name")
    if storage == "sqlite3":
        _check_sqlite_path(path / f"{path.name}.db3")  # before anything is made
    import sqlite3

    make_folder(path.parent)  # as rosbags' writer did; a folder that cannot be made is an OutputError
    interrupted: KeyboardInterrupt | None = None
    try:
        with atomic_directory(path) as tmp:
            inner = tmp / path.name  # rosbags names the data file after its folder: <name>/<name>.mcap
            writer = open_writer(inner, storage)
            try:
                yield writer
            except KeyboardInterrupt as exc:
                interrupted = exc
            finally:
                writer.close()
            for entry in inner.iterdir():
                entry.rename(tmp / entry.name)
            inner.rmdir()
    except sqlite3.Error as exc:  # sqlite3's own type for a full disk ("database or disk is full"), EFBIG...
        from libredgetpu_ros.textdata import clip

        raise OutputError(f"cannot write bag {clip(str(path))}: sqlite3: {clip(exc)}") from exc
    if interrupted is not None:
        raise interrupted


def storage_of(path: str | Path) -> str:
    """'mcap' or 'sqlite3': the storage of a bag folder or file, told by its data files."""
    path = Path(path)
    files = [path] if path.is_file() else list(path.iterdir())
    return "sqlite3" if any(f.suffix == ".db3" for f in files) else "mcap"


def sensor_data_qos() -> Any:
    """The ``rclcpp::SensorDataQoS`` profile as rosbags stores offered QoS (best effort, keep last 5)."""
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    never = QosTime(sec=0, nsec=0)  # rosbag2 writes "infinite" durations as 0 (the rmw default)
    return Qos(QosHistory.KEEP_LAST, 5, QosReliability.BEST_EFFORT, QosDurability.VOLATILE, never, never,
               QosLiveliness.AUTOMATIC, never, False)


def reliable_qos(depth: int, transient_local: bool = False) -> Any:
    """Reliable KEEP_LAST(depth); ``transient_local`` for latched topics (e.g. a label map)."""
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    never = QosTime(sec=0, nsec=0)
    durability = QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE
    return Qos(QosHistory.KEEP_LAST, depth, QosReliability.RELIABLE, durability, never, never,
               QosLiveliness.AUTOMATIC, never, False)


def topics_of(reader: Any, types: Iterable[str] | None = None) -> dict[str, list[str]]:
    """topic -> message type names of an opened reader (only the given types when ``types`` is set)."""
    wanted = set(types) if types is not None else None
    out: dict[str, list[str]] = {}
    for conn in reader.connections:
        if wanted is None or conn.msgtype in wanted:
            out.setdefault(conn.topic, [])
            if conn.msgtype not in out[conn.topic]:
                out[conn.topic].append(conn.msgtype)
    return out
