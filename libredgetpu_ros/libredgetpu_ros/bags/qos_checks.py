"""A bag's recorded QoS profiles (each topic's ``offered_qos_profiles``), checked before rosbags parses them.

rosbags parses a topic's profiles at open (a YAML string in an sqlite3 ``topics`` row or an MCAP channel's
metadata; a YAML list or string under ``metadata.yaml``'s topic), in pure Python and without a depth or
alias bound; ``metadata.yaml`` itself is parsed whole first. rosbag2 keeps one profile per publisher, never
merged, so a topic every node publishes (``/rosout``) carries hundreds. A topic's profiles are accepted up to
what :data:`MAX_QOS_PROFILES` real profiles take, in bytes (:data:`MAX_QOS_PROFILE_BYTES`) and in YAML marks
(:data:`MAX_QOS_MARKS`: the parse's cost follows its tokens, and dense YAML has ~4 times a profile's per
byte); over either the topic is refused, named, before any parse of it (:class:`QosTooLarge`). Below them,
the text is parsed once under textdata's depth and alias budgets. Shared by ``storage`` (sqlite3 rows,
``metadata.yaml``), ``mcap_summary`` (channels) and ``repair``.

A bag is charged as a whole too (:class:`QosBudget`, active for one bag under :func:`qos_budget`): every
topic's profiles, in every file and in ``metadata.yaml``, are added up before that topic is parsed, so a bag
of many topics each just under the per-topic caps is refused after a few of them (:class:`QosBagTooLarge`),
not after all. Two totals: the storage files' texts we parse (:data:`MAX_BAG_QOS_PROFILES`; a text identical
to one already accepted in the bag is not parsed again: a split bag's files repeat every topic's profiles)
and every copy, which rosbags parses once per file and once in ``metadata.yaml`` at open
(:data:`MAX_BAG_QOS_COPIES`; ``metadata.yaml``'s own parse is bounded by textdata's file cap).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from libredgetpu_ros.errors import InputError

# publishers on one topic a bag may record (a large system's /rosout); parse cost at the caps: docs/bags.md
MAX_QOS_PROFILES = 2048
# one profile: ~220 bytes and 34 marks as rosbags writes it, ~290 bytes and 31 marks as rosbag2 does
PROFILE_BYTES, PROFILE_MARKS = 384, 40
MAX_QOS_PROFILE_BYTES = MAX_QOS_PROFILES * PROFILE_BYTES
MAX_QOS_MARKS = MAX_QOS_PROFILES * PROFILE_MARKS
# profiles one bag may carry, all topics together (distinct texts parsed here; sizing: docs/bags.md), and in
# every copy rosbags parses (a split bag repeats its topics' profiles in each file: 8 such copies)
MAX_BAG_QOS_PROFILES = 4 * MAX_QOS_PROFILES
MAX_BAG_QOS_BYTES = MAX_BAG_QOS_PROFILES * PROFILE_BYTES
MAX_BAG_QOS_MARKS = MAX_BAG_QOS_PROFILES * PROFILE_MARKS
MAX_BAG_QOS_COPIES = 8 * MAX_BAG_QOS_PROFILES
MAX_BAG_COPY_BYTES = MAX_BAG_QOS_COPIES * PROFILE_BYTES
MAX_BAG_COPY_MARKS = MAX_BAG_QOS_COPIES * PROFILE_MARKS
# the characters that open or separate YAML tokens: a string's count of them bounds its tokens
MARKS = ",:-[]{}&*!?|>'\"\n"
QOS_KEY = "offered_qos_profiles"
# bag-repair copies the bag with such a topic's profiles dropped (said in its summary)
HINT = (f" (rosbag2 keeps one profile of ~270 bytes per publisher: over the cap means more than "
        f"{MAX_QOS_PROFILES:,} publishers on the topic, or metadata altered or written by another tool; "
        "`libredgetpu-ros bag-repair` copies the bag without that topic's profiles, so a player uses its "
        "defaults)")


# over the bag-wide totals: the topics are each within their caps, the bag as a whole is not
BAG_HINT = (f" (rosbag2 keeps one profile of ~270 bytes per publisher: over the cap means more than "
            f"{MAX_BAG_QOS_PROFILES:,} publishers on all topics together, more than "
            f"{MAX_BAG_QOS_COPIES:,} counting each file of a split bag, or metadata altered or written by "
            "another tool; `libredgetpu-ros bag-repair` copies the bag into one file, the topics over the "
            "total without their profiles, so a player uses its defaults for them)")


class QosTooLarge(InputError):
    """A topic's offered QoS profiles are over :data:`MAX_QOS_PROFILE_BYTES` or :data:`MAX_QOS_MARKS`."""


class QosBagTooLarge(QosTooLarge):
    """A bag's topics' offered QoS profiles, all together, are over :class:`QosBudget`'s totals."""


@dataclass
class QosBudget:
    """What one bag's topics' profiles have cost so far: the texts parsed (``size``, ``marks``) and every
    copy (``copy_size``, ``copy_marks``); ``accepted`` holds the digests of texts that passed a check."""

    size: int = 0
    marks: int = 0
    copy_size: int = 0
    copy_marks: int = 0
    topics: int = 0
    parsed: int = 0  # texts parsed (a test counts them: the refusal comes after a few, not after all)
    accepted: set[bytes] = field(default_factory=set)

    def charge(self, topic: str, size: int, marks: int, key: bytes | None, *,
               copy_only: bool = False) -> bool:
        """Add a topic's profiles (``key``: their text's digest; ``copy_only``: profiles only rosbags parses
        again, metadata.yaml's); QosBagTooLarge when a total goes over its cap. True when the text has to be
        parsed, False when an identical text was accepted already (only its copy is charged)."""
        from libredgetpu_ros.textdata import clip

        new = not copy_only and (key is None or key not in self.accepted)
        size_now, marks_now = self.size + size * new, self.marks + marks * new
        copy_size, copy_marks = self.copy_size + size, self.copy_marks + marks
        for total, cap, what, profiles in (
                (size_now, MAX_BAG_QOS_BYTES, "bytes", MAX_BAG_QOS_PROFILES),
                (marks_now, MAX_BAG_QOS_MARKS, "YAML marks", MAX_BAG_QOS_PROFILES),
                (copy_size, MAX_BAG_COPY_BYTES, "bytes in all its files", MAX_BAG_QOS_COPIES),
                (copy_marks, MAX_BAG_COPY_MARKS, "YAML marks in all its files", MAX_BAG_QOS_COPIES)):
            if total > cap:  # nothing charged: bag-repair goes on with the next topic
                raise QosBagTooLarge(f"topic {clip(topic, 200)}: the bag's {QOS_KEY} would reach {total:,} "
                                     f"{what} with it (topic {self.topics + 1:,}), more than the {cap:,} "
                                     f"accepted per bag ({profiles:,} profiles)")
        self.size, self.marks, self.copy_size, self.copy_marks = size_now, marks_now, copy_size, copy_marks
        self.topics += 1
        return new


_BUDGET: ContextVar[QosBudget | None] = ContextVar("qos_budget", default=None)


@contextlib.contextmanager
def qos_budget() -> Iterator[QosBudget]:
    """The budget of the bag being checked: the one already active (a bag's files and metadata share it), or
    a new one for the duration of the block."""
    active = _BUDGET.get()
    if active is not None:
        yield active
        return
    token = _BUDGET.set(budget := QosBudget())
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def _digest(text: str, tag: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16,
                           person=tag.encode()[:16]).digest()


def qos_refusal(exc: BaseException | None) -> tuple[type[QosTooLarge], str] | None:
    """(its class, its hint) when ``exc`` is, or was raised from, a QosTooLarge (the checks of an MCAP file
    wrap theirs): the bag-wide refusal or the per-topic one; else None."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, QosBagTooLarge):
            return QosBagTooLarge, BAG_HINT
        if isinstance(exc, QosTooLarge):
            return QosTooLarge, HINT
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


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


def check_qos_text(topic: str, text: str, origin: str, max_depth: int | None = None,
                   also: Callable[[str], Any] | None = None) -> None:
    """A topic's profiles text: its size, then its marks (:func:`check_qos_size`: the marks are counted only
    within the byte cap), then the bag's totals (:class:`QosBudget`), then textdata's YAML budgets (depth,
    aliases; TextDataError) and ``also`` (rosbags' parser, for a caller that runs it): both skipped for a text
    identical to one that passed them in the same bag. No byte cap is passed to the YAML load: a text within
    the cap in UTF-8 bytes has at most as many characters, which is what ``load_yaml`` counts."""
    from libredgetpu_ros.textdata import MAX_DEPTH, load_yaml

    size = len(text.encode("utf-8", "surrogatepass"))
    check_qos_size(topic, size, 0)
    marks = count_marks(text)
    check_qos_size(topic, size, marks)
    depth = MAX_DEPTH if max_depth is None else max_depth
    key = _digest(text, f"{depth}:{getattr(also, '__name__', '')}")
    with qos_budget() as budget:
        if not budget.charge(topic, size, marks, key):
            return
        budget.parsed += 1
        load_yaml(text, origin, max_depth=depth)
        if also is not None:
            also(text)
        budget.accepted.add(key)


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

    with qos_budget() as budget:
        _walk(loader, stack, anchors, finished, budget, origin)


def _walk(loader: Any, stack: list[_Node], anchors: dict[str, tuple[int, int, str | None]],
          finished: Callable[[int, int, Any], None], budget: QosBudget, origin: str) -> None:
    """The event loop of :func:`check_metadata_qos` (``budget``: the bag's)."""
    import yaml

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
                    name = node.name if node.name is not None else "(unnamed)"
                    check_qos_size(name, *node.qos)
                    # a copy (rosbags parses it again); the file's own parse is bounded by its size cap
                    budget.charge(name, *node.qos, None, copy_only=True)
                finished(node.size, node.marks, None)
            elif kind is yaml.AliasEvent:
                finished(*anchors.get(event.anchor, (0, 1, None)))
    except QosTooLarge as exc:
        raise type(exc)(f"{origin}: {exc}") from None
    finally:
        loader.dispose()
