"""A bag's recorded QoS profiles (each topic's ``offered_qos_profiles``), checked before rosbags parses them.

rosbags parses a topic's profiles at open (a YAML string in an sqlite3 ``topics`` row or an MCAP channel's
metadata; a YAML list or string under ``metadata.yaml``'s topic), in pure Python and without a depth or
alias bound; ``metadata.yaml`` itself is parsed whole first. rosbag2 keeps one profile per publisher, never
merged, so a topic every node publishes (``/rosout``) carries hundreds. A topic's profiles are accepted up to
what :data:`MAX_QOS_PROFILES` real profiles take, in bytes (:data:`MAX_QOS_PROFILE_BYTES`) and in YAML marks
(:data:`MAX_QOS_MARKS`: the parse's cost follows its tokens, and dense YAML has ~4 times a profile's per
byte); over either the topic is refused, named, before any parse of it (:class:`QosTooLarge`). Below them,
the text is parsed once under textdata's depth and alias budgets. Shared by ``storage`` (sqlite3 rows,
``metadata.yaml``) and ``mcap_summary`` (channels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from libredgetpu_ros.errors import InputError

# publishers on one topic a bag may record (a large system's /rosout); parse cost at the caps: docs/bags.md
MAX_QOS_PROFILES = 2048
# one profile: ~220 bytes and 34 marks as rosbags writes it, ~290 bytes and 31 marks as rosbag2 does
PROFILE_BYTES, PROFILE_MARKS = 384, 40
MAX_QOS_PROFILE_BYTES = MAX_QOS_PROFILES * PROFILE_BYTES
MAX_QOS_MARKS = MAX_QOS_PROFILES * PROFILE_MARKS
# the characters that open or separate YAML tokens: a string's count of them bounds its tokens
MARKS = ",:-[]{}&*!?|>'\"\n"
QOS_KEY = "offered_qos_profiles"
# bag-repair copies the bag with such a topic's profiles dropped (said in its summary)
HINT = (f" (rosbag2 keeps one profile of ~270 bytes per publisher: over the cap means more than "
        f"{MAX_QOS_PROFILES:,} publishers on the topic, or metadata altered or written by another tool; "
        "`libredgetpu-ros bag-repair` copies the bag without that topic's profiles, so a player uses its "
        "defaults)")


class QosTooLarge(InputError):
    """A topic's offered QoS profiles are over :data:`MAX_QOS_PROFILE_BYTES` or :data:`MAX_QOS_MARKS`."""


def count_marks(text: str) -> int:
    """How many of :data:`MARKS` ``text`` holds (one C pass per mark: no parse)."""
    return sum(text.count(mark) for mark in MARKS)


def check_qos_size(topic: str, size: int, marks: int) -> None:
    """QosTooLarge naming ``topic`` when its profiles' ``size`` bytes or ``marks`` marks are over a cap."""
    from libredgetpu_ros.textdata import clip

    if size > MAX_QOS_PROFILE_BYTES:
        raise QosTooLarge(f"topic {clip(topic, 200)}: {QOS_KEY} is {size} bytes, more than the "
                          f"{MAX_QOS_PROFILE_BYTES} accepted per topic ({MAX_QOS_PROFILES:,} profiles)")
    if marks > MAX_QOS_MARKS:
        raise QosTooLarge(f"topic {clip(topic, 200)}: {QOS_KEY} has {marks} YAML marks, more than the "
                          f"{MAX_QOS_MARKS} accepted per topic ({MAX_QOS_PROFILES:,} profiles)")


def check_qos_text(topic: str, text: str, origin: str, max_depth: int | None = None) -> None:
    """A topic's profiles text: its size, then its marks (:func:`check_qos_size`: the marks are counted only
    within the byte cap), then textdata's YAML budgets (depth, aliases; TextDataError). No byte cap is
    passed to the YAML load: a text within the cap in UTF-8 bytes has at most as many characters, which is
    what ``load_yaml`` counts."""
    from libredgetpu_ros.textdata import MAX_DEPTH, load_yaml

    size = len(text.encode("utf-8", "surrogatepass"))
    check_qos_size(topic, size, 0)
    check_qos_size(topic, size, count_marks(text))
    load_yaml(text, origin, max_depth=MAX_DEPTH if max_depth is None else max_depth)


def is_qos_too_large(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was raised from, a QosTooLarge (the checks of an MCAP file wrap theirs)."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, QosTooLarge):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


# a node's measure saturates here: aliases of aliases would otherwise grow it exponentially
_SATURATED = max(MAX_QOS_PROFILE_BYTES, MAX_QOS_MARKS) + 1


@dataclass
class _Node:
    """An open collection of ``metadata.yaml``'s event walk."""

    mapping: bool
    anchor: str | None
    expect_key: bool = True
    key: str | None = None
    name: str | None = None  # a topic's ``name`` (a mapping's scalar value under "name")
    qos: tuple[int, int] | None = None  # its ``offered_qos_profiles`` value's bytes and marks
    size: int = 0  # its scalars' bytes, keys included
    marks: int = 1  # its nodes (itself, its scalars, collections and aliases)


def check_metadata_qos(text: str, origin: str) -> None:
    """QosTooLarge when a topic of ``metadata.yaml`` (its text) offers profiles over a cap, found on
    libyaml's events (nothing composed: before the whole file is parsed, ~3.5 s of CPU per MB). A value's
    measure: a string's UTF-8 bytes and marks (what rosbags parses again); a list's scalars' bytes and its
    nodes (not its text span, which counts indentation); an alias's, its node's. An alias used as a key is
    read as its anchored scalar's value. A syntax error ends the walk: the YAML load that follows reports
    it."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # libyaml's events where installed
    stack: list[_Node] = []
    anchors: dict[str, tuple[int, int, str | None]] = {}  # bytes, marks, a scalar's value

    def finished(size: int, marks: int, scalar: Any) -> None:  # a node is complete: its role in its parent
        if not stack:
            return
        top = stack[-1]
        top.size, top.marks = min(top.size + size, _SATURATED), min(top.marks + marks, _SATURATED)
        if not top.mapping:
            return
        if top.expect_key:
            top.key, top.expect_key = scalar, False
            return
        if top.key == QOS_KEY:
            top.qos = (size, count_marks(scalar)) if isinstance(scalar, str) else (size, marks)
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
                    anchors[event.anchor] = (size, 1, event.value)
                finished(size, 1, event.value)
            elif kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
                stack.append(_Node(kind is yaml.MappingStartEvent, event.anchor))
            elif kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
                node = stack.pop()
                if node.anchor is not None:
                    anchors[node.anchor] = (node.size, node.marks, None)
                if node.qos is not None:
                    check_qos_size(node.name if node.name is not None else "(unnamed)", *node.qos)
                finished(node.size, node.marks, None)
            elif kind is yaml.AliasEvent:
                finished(*anchors.get(event.anchor, (0, 1, None)))
    except QosTooLarge as exc:
        raise QosTooLarge(f"{origin}: {exc}") from None
    finally:
        loader.dispose()
