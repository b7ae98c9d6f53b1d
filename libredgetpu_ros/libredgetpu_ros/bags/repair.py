"""``bag-repair``: copy what a killed or damaged bag still holds (``bags.salvage``) into a new, complete bag.

The copy is written by our writers (real chunk CRCs, ``metadata.yaml``), in the source's storage unless
told otherwise; the source is only read (sqlite only rolls back a transaction its writer left unfinished).
Topics keep their type, message definition, serialization format and offered QoS; a type's hash comes
from the bag (sqlite3) or from the typestore, else from the definition the bag carries. A topic's QoS
profiles that do not parse, or are over ``qos_checks``' per-topic cap or over the bag's totals (checked
before parsing: once the totals are reached, every further topic's), are dropped and said in the summary:
the topic is copied with none, so a player uses its defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from libredgetpu_ros.bags.decompress import MAX_COMPRESSED_CHUNK_BYTES, BadRecord, decompress
from libredgetpu_ros.bags.qos_checks import qos_budget
from libredgetpu_ros.bags.salvage import Channel, ScanReport, data_files, scan
from libredgetpu_ros.bags.storage import new_bag
from libredgetpu_ros.bags.typestore import typestore
from libredgetpu_ros.errors import InputError
from libredgetpu_ros.textdata import clip

# A zstd frame's magic number: never the start of a CDR payload (its encapsulation header is 00 0x 00 00),
# so a message starting with it was stored by rosbag2's per-message compression mode
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


@dataclass
class RepairSummary:
    source: Path
    output: Path
    storage: str
    files: list[ScanReport] = field(default_factory=list)
    skipped_topics: dict[str, str] = field(default_factory=dict)  # topic -> why its messages were dropped
    dropped: int = 0  # messages of skipped topics, or compressed messages that did not decompress
    decompressed: int = 0  # messages stored zstd-compressed (rosbag2's per-message mode), written plain
    bad_payloads: dict[str, str] = field(default_factory=dict)  # topic -> the last decompression failure
    qos_dropped: dict[str, str] = field(default_factory=dict)  # topic -> why its QoS profiles were not copied

    @property
    def messages(self) -> int:
        return sum(r.messages for r in self.files) - self.dropped

    def text(self) -> str:
        lines = [f"{self.source} -> {self.output} ({self.storage}): {self.messages} messages recovered"]
        for r in self.files:
            state = "complete" if r.complete else f"unfinished ({r.tail_bytes} bytes of a cut record dropped)"
            lines.append(f"  {r.path.name}: {r.messages} messages, {r.chunks} whole chunks, "
                         f"{r.corrupt_chunks} corrupt chunk(s) skipped, {r.orphans} orphan message(s), "
                         f"{r.bad_rows} bad row(s) skipped; "
                         f"{state}")
            lines += [f"    {note}" for note in r.notes]
        lines += [f"  topic {t} not copied: {why}" for t, why in sorted(self.skipped_topics.items())]
        if self.decompressed:
            lines.append(f"  {self.decompressed} message(s) stored zstd-compressed (per-message mode) "
                         f"written decompressed")
        lines += [f"  topic {t}: compressed message(s) dropped: {why}"
                  for t, why in sorted(self.bad_payloads.items())]
        lines += [f"  topic {t}: QoS profiles not copied (a player uses its defaults): {why}"
                  for t, why in sorted(self.qos_dropped.items())]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"source": str(self.source), "output": str(self.output), "storage": self.storage,
                "messages": self.messages, "dropped": self.dropped, "skipped_topics": self.skipped_topics,
                "decompressed": self.decompressed, "bad_payloads": self.bad_payloads,
                "qos_dropped": self.qos_dropped,
                "files": [{"path": str(r.path), "messages": r.messages, "chunks": r.chunks,
                           "corrupt_chunks": r.corrupt_chunks, "orphans": r.orphans, "bad_rows": r.bad_rows,
                           "complete": r.complete,
                           "tail_bytes": r.tail_bytes, "notes": r.notes} for r in self.files]}


def _definition(channel: Channel) -> tuple[str, str]:
    """(message definition, rosbag2's RIHS01 type hash) of a channel's type: the definition the bag carries,
    else the typestore's; the hash stored in the bag, else the typestore's, else computed from the
    definition. InputError when the type is unknown here and the bag has no definition for it."""
    store = typestore()
    known = channel.msgtype in store.types
    if not channel.msgdef and not known:
        raise InputError("type unknown here and no message definition in the bag")
    msgdef = channel.msgdef or store.generate_msgdef(channel.msgtype, ros_version=2)[0]
    if channel.type_hash:
        return msgdef, channel.type_hash
    if known:
        return msgdef, store.hash_rihs01(channel.msgtype)
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    own = get_typestore(Stores.ROS2_KILTED)  # a private store: the shared one stays as it is
    try:
        own.register(get_types_from_msg(channel.msgdef, channel.msgtype))
        return msgdef, own.hash_rihs01(channel.msgtype)
    except Exception as exc:  # rosbags raises several parser errors; any means "cannot hash this type"
        raise InputError(f"its message definition does not parse: {clip(exc, 200)}") from exc


def _qos(channel: Channel, dropped: dict[str, str]) -> list[Any]:
    """The channel's QoS profiles as rosbags writes them; none (the reason in ``dropped``) when their text
    is over the per-topic cap or the bag's totals (``repair_bag``'s budget), beyond textdata's YAML budgets
    or does not parse: the topic is still worth copying."""
    from rosbags.rosbag2.metadata import parse_qos

    from libredgetpu_ros.bags.qos_checks import check_qos_text

    if not channel.qos:
        return []
    try:
        check_qos_text(channel.topic, channel.qos, f"topic {clip(channel.topic, 100)}'s QoS profiles")
        return parse_qos(channel.qos)
    except Exception as exc:  # rosbags' parser raises several types; any means "not copied"
        dropped[channel.topic] = clip(exc, 200)
        return []


def repair_bag(source: str | Path, output: str | Path, storage: str | None = None) -> RepairSummary:
    """Copy every readable message of ``source`` (a bag folder or one .mcap / .db3) into ``output``."""
    source, output = Path(source), Path(output)
    files = data_files(source)
    storage = storage or ("sqlite3" if files[0].suffix == ".db3" else "mcap")
    summary = RepairSummary(source, output, storage)
    connections: dict[tuple[str, str], Any] = {}
    with qos_budget(), new_bag(output, storage) as writer:  # appears at ``output`` only when complete
        for path in files:
            report, channels, messages = scan(path)
            summary.files.append(report)
            for cid, timestamp, payload in messages:
                channel = channels[cid]
                key = (channel.topic, channel.msgtype)
                conn = connections.get(key)
                if conn is None and channel.topic not in summary.skipped_topics:
                    try:
                        msgdef, type_hash = _definition(channel)
                        conn = connections[key] = writer.add_connection(
                            channel.topic, channel.msgtype, msgdef=msgdef, rihs01=type_hash,
                            serialization_format=channel.serialization_format or "cdr",
                            offered_qos_profiles=_qos(channel, summary.qos_dropped))
                    except InputError as exc:
                        summary.skipped_topics[channel.topic] = f"{clip(channel.msgtype, 100)}: {exc}"
                if conn is None:
                    summary.dropped += 1
                    continue
                if bytes(payload[:4]) == _ZSTD_MAGIC:  # rosbag2's per-message compression
                    try:
                        payload = decompress(payload, "zstd", MAX_COMPRESSED_CHUNK_BYTES, "message")
                        summary.decompressed += 1
                    except BadRecord as exc:
                        summary.dropped += 1
                        summary.bad_payloads[channel.topic] = str(exc)
                        continue
                writer.write(conn, timestamp, payload)
    return summary
