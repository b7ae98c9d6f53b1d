"""A bag's recorded QoS profiles (each topic's ``offered_qos_profiles``), checked before rosbags parses them.

rosbags parses a topic's profiles at open (a YAML string in an sqlite3 ``topics`` row or an MCAP channel's
metadata; a YAML list or string under ``metadata.yaml``'s topic), in pure Python and without a depth or
alias bound; ``metadata.yaml`` itself is parsed whole first. Real profiles are < 2 KB per topic, so a topic
offering more than :data:`MAX_QOS_PROFILE_BYTES` is refused by its size, naming the topic, before any
parse of it (:class:`QosTooLarge`); below it, the text is parsed once under textdata's depth and alias
budgets. Shared by ``storage`` (sqlite3 rows, ``metadata.yaml``) and ``mcap_summary`` (channels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from libredgetpu_ros.errors import InputError

# 1 MiB of profiles cost seconds of CPU per topic to parse (figures: docs/bags.md)
MAX_QOS_PROFILE_BYTES = 64 * 1024
QOS_KEY = "offered_qos_profiles"
# bag-repair copies the bag with such a topic's profiles dropped (said in its summary)
HINT = (" (rosbag2 keeps one profile of ~270 bytes per publisher: over the cap means ~240 publishers on the "
        "topic, or metadata altered or written by another tool; `libredgetpu-ros bag-repair` copies the bag "
        "without that topic's profiles, so a player uses its defaults)")


class QosTooLarge(InputError):
    """A topic's offered QoS profiles are over :data:`MAX_QOS_PROFILE_BYTES`."""


def check_qos_size(topic: str, size: int) -> None:
    """QosTooLarge naming ``topic`` when its profiles' text is ``size`` bytes, over the cap."""
    if size > MAX_QOS_PROFILE_BYTES:
        from libredgetpu_ros.textdata import clip

        raise QosTooLarge(f"topic {clip(topic, 200)}: {QOS_KEY} is {size} bytes, more than the "
                          f"{MAX_QOS_PROFILE_BYTES} accepted per topic (rosbag2 writes < 2 KB)")


def check_qos_text(topic: str, text: str, origin: str, max_depth: int | None = None) -> None:
    """A topic's profiles text: its size (:func:`check_qos_size`), then textdata's YAML budgets (depth,
    aliases; TextDataError). No byte cap is passed to the YAML load: a text within the cap in UTF-8 bytes
    has at most as many characters, which is what ``load_yaml`` counts."""
    from libredgetpu_ros.textdata import MAX_DEPTH, load_yaml

    check_qos_size(topic, len(text.encode("utf-8", "surrogatepass")))
    load_yaml(text, origin, max_depth=MAX_DEPTH if max_depth is None else max_depth)


def is_qos_too_large(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was raised from, a QosTooLarge (the checks of an MCAP file wrap theirs)."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, QosTooLarge):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


@dataclass
class _Node:
    """An open collection of ``metadata.yaml``'s event walk."""

    mapping: bool
    start: int  # its first character
    anchor: str | None
    expect_key: bool = True
    key: str | None = None
    name: str | None = None  # a topic's ``name`` (a mapping's scalar value under "name")
    qos: int | None = None  # the size of its ``offered_qos_profiles`` value


def check_metadata_qos(text: str, origin: str) -> None:
    """QosTooLarge when a topic of ``metadata.yaml`` (its text) offers profiles over the cap, found on
    libyaml's events (nothing composed: before the whole file is parsed, ~3.5 s of CPU per MB). A value's
    size: a string's length in UTF-8 bytes (what rosbags parses again), a list's span of text, an alias's
    node's. A syntax error ends the walk: the YAML load that follows reports it."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # libyaml's events where installed
    stack: list[_Node] = []
    anchors: dict[str, int] = {}

    def finished(size: int, scalar: Any) -> None:  # a node is complete: its role in the open mapping
        if not stack or not stack[-1].mapping:
            return
        top = stack[-1]
        if top.expect_key:
            top.key, top.expect_key = scalar, False
            return
        if top.key == QOS_KEY:
            top.qos = size
        elif top.key == "name" and isinstance(scalar, str):
            top.name = scalar
        top.expect_key = True

    try:
        while True:
            try:
                if not loader.check_event():
                    return
                event = loader.get_event()
            except yaml.YAMLError:
                return
            kind = type(event)
            if kind is yaml.ScalarEvent:
                size = len(event.value.encode("utf-8", "surrogatepass"))
                if event.anchor is not None:
                    anchors[event.anchor] = size
                finished(size, event.value)
            elif kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
                stack.append(_Node(kind is yaml.MappingStartEvent, event.start_mark.index, event.anchor))
            elif kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
                node = stack.pop()
                size = event.end_mark.index - node.start
                if node.anchor is not None:
                    anchors[node.anchor] = size
                if node.qos is not None:
                    check_qos_size(node.name if node.name is not None else "(unnamed)", node.qos)
                finished(size, None)
            elif kind is yaml.AliasEvent:
                finished(anchors.get(event.anchor, 0), None)
    except QosTooLarge as exc:
        raise QosTooLarge(f"{origin}: {exc}") from None
    finally:
        loader.dispose()
