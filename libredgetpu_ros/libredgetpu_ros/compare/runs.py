"""``compare-bags``: two runs of process-bag(s) (two result bags, or two output folders) compared bag by
bag, topic by topic, message by message (``compare.messages``).

Bags pair by output name (``bags.corpus.outputs_in``); a bag in one run only is ``bag_added`` /
``bag_lost``. In a pair, messages pair per topic by bag timestamp (the input frame's) and order within it;
one without a partner is ``message_added`` / ``message_lost``. A difference ``exceeds`` when it is over its
tolerance (or is an appearance, a loss or a changed class); the verdict is "changed" when one does.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from libredgetpu_ros.bags.corpus import SUMMARY_NAME, outputs_in
from libredgetpu_ros.compare.messages import (
    DRAWING_TYPES,
    LABEL_ENCODINGS,
    Difference,
    Tolerances,
    diff_messages,
)
from libredgetpu_ros.errors import InputError

MAX_SCORE_DELTAS = 200_000  # samples kept for the histogram


@dataclass
class BagComparison:
    name: str
    status: str = "same"  # same | changed | bag_added | bag_lost
    messages: dict[str, int] = field(default_factory=lambda: {"baseline": 0, "candidate": 0, "compared": 0})
    differences: list[Difference] = field(default_factory=list)  # every one, within tolerance too
    score_deltas: list[float] = field(default_factory=list)
    first_ns: int = 0  # the bag's first message, the timeline's origin
    input: str | None = None  # the input bag (from the runs' summary.json), for crops

    def counts(self, exceeding: bool) -> dict[str, int]:
        return dict(sorted(Counter(d.kind for d in self.differences if d.exceeds or not exceeding).items()))

    def as_dict(self) -> dict[str, Any]:
        return {"bag": self.name, "status": self.status, "messages": self.messages, "input": self.input,
                "differences": self.counts(False), "exceeding": self.counts(True)}


@dataclass
class Comparison:
    baseline: Path
    candidate: Path
    tolerances: Tolerances
    bags: list[BagComparison]

    @property
    def changed(self) -> bool:
        return any(b.status != "same" for b in self.bags)

    def exceeding(self) -> list[Difference]:
        return [d for b in self.bags for d in b.differences if d.exceeds]

    def as_dict(self, max_listed: int = 200) -> dict[str, Any]:
        listed = sorted(self.exceeding(), key=lambda d: (d.bag, d.timestamp, d.topic))
        total: Counter[str] = Counter()
        for b in self.bags:
            total.update(b.counts(True))
        return {"baseline": str(self.baseline), "candidate": str(self.candidate),
                "tolerances": vars(self.tolerances), "verdict": "changed" if self.changed else "same",
                "bags": [b.as_dict() for b in self.bags],
                "totals": {"bags": len(self.bags),
                           "changed_bags": sum(b.status != "same" for b in self.bags),
                           "compared_messages": sum(b.messages["compared"] for b in self.bags),
                           "exceeding": sum(total.values()),
                           "exceeding_by_kind": dict(sorted(total.items()))},
                "listed": [d.as_dict() for d in listed[:max_listed]], "listed_of": len(listed)}


def read_results(bag: Path) -> dict[str, list[tuple[int, str, Any]]]:
    """topic -> [(timestamp, msgtype, decoded message)] of a result bag, in bag order (drawings skipped:
    markers, colour images). The compared messages of one bag are held in memory (masks included)."""
    from libredgetpu_ros.bags.storage import open_reader
    from libredgetpu_ros.bags.typestore import typestore

    store = typestore()
    reader = open_reader(bag)
    try:
        wanted = [c for c in reader.connections if c.msgtype not in DRAWING_TYPES]
        out: dict[str, list[tuple[int, str, Any]]] = defaultdict(list)
        for conn, ts, raw in reader.messages(connections=wanted):
            try:
                msg = store.deserialize_cdr(raw, conn.msgtype)
            except Exception as exc:  # rosbags on a damaged payload
                raise InputError(f"bag {bag}: a {conn.msgtype} on {conn.topic} at {ts} cannot be decoded: "
                                 f"{type(exc).__name__}: {exc}") from None
            if conn.msgtype == "sensor_msgs/msg/Image" and msg.encoding not in LABEL_ENCODINGS:
                continue  # an annotated frame or an overlay: a drawing, not kept
            out[conn.topic].append((ts, conn.msgtype, msg))
        return dict(out)
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot read bag {bag}: {type(exc).__name__}: {exc}") from exc
    finally:
        reader.close()


def _pairs(base: list[tuple[int, str, Any]], cand: list[tuple[int, str, Any]]
           ) -> tuple[list[tuple[Any, Any]], list[Any], list[Any]]:
    """(pairs, baseline only, candidate only): messages paired by timestamp, then order within it."""
    by_ts: dict[int, list[Any]] = defaultdict(list)
    for item in cand:
        by_ts[item[0]].append(item)
    pairs, lost = [], []
    for item in base:
        partners = by_ts.get(item[0])
        if partners:
            pairs.append((item, partners.pop(0)))
        else:
            lost.append(item)
    added = sorted((i for items in by_ts.values() for i in items), key=lambda i: i[0])
    return pairs, lost, added


def compare_bag(name: str, base_bag: Path | None, cand_bag: Path | None, tol: Tolerances) -> BagComparison:
    result = BagComparison(name)
    if base_bag is None or cand_bag is None:
        result.status = "bag_added" if base_bag is None else "bag_lost"
        result.differences.append(Difference(result.status, 1.0, True, f"{name} is in one run only",
                                             bag=name))
        return result
    base, cand = read_results(base_bag), read_results(cand_bag)
    result.messages["baseline"] = sum(map(len, base.values()))
    result.messages["candidate"] = sum(map(len, cand.values()))
    stamps = [items[0][0] for items in (*base.values(), *cand.values()) if items]
    result.first_ns = min(stamps, default=0)
    for topic in sorted(set(base) | set(cand)):
        pairs, lost, added = _pairs(base.get(topic, []), cand.get(topic, []))
        for kind, items in (("message_lost", lost), ("message_added", added)):
            for ts, msgtype, _msg in items:
                result.differences.append(Difference(kind, 1.0, True, msgtype, topic=topic, timestamp=ts,
                                                     bag=name))
        for (ts, btype, bmsg), (_, ctype, cmsg) in pairs:
            if btype != ctype:
                result.differences.append(Difference("field_changed", 1.0, True, f"type {btype} -> {ctype}",
                                                     topic=topic, timestamp=ts, bag=name))
                continue
            try:
                frame = diff_messages(btype, bmsg, cmsg, tol)
            except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
                raise InputError(f"bag {name}: a {btype} on {topic} at {ts} is malformed: "
                                 f"{type(exc).__name__}: {exc}") from None
            if frame is None:
                continue
            result.messages["compared"] += 1
            for d in frame.differences:
                d.topic, d.timestamp, d.bag = topic, ts, name
            result.differences += frame.differences
            if len(result.score_deltas) < MAX_SCORE_DELTAS:
                result.score_deltas += frame.score_deltas
    if any(d.exceeds for d in result.differences):
        result.status = "changed"
    return result


def _run_bags(path: Path) -> dict[str, Path]:
    if not path.exists():
        raise InputError(f"{path} does not exist")
    return outputs_in(path)


def _inputs(path: Path) -> dict[str, str]:
    """bag name -> input bag, from a process-bags output folder's summary.json (empty without one)."""
    summary = path / SUMMARY_NAME
    if not summary.is_file():
        return {}
    from libredgetpu_ros.textdata import load_json_file

    try:
        doc = load_json_file(summary, "summary.json")
    except InputError:
        return {}
    bags = doc.get("bags", []) if isinstance(doc, dict) else []
    return {str(b["bag"]): str(b["input"]) for b in bags
            if isinstance(b, dict) and "bag" in b and "input" in b}


def compare_runs(baseline: str | Path, candidate: str | Path, tol: Tolerances | None = None) -> Comparison:
    """Two result bags, or two output folders of process-bags, compared (InputError for bad input)."""
    baseline, candidate = Path(baseline), Path(candidate)
    tol = tol or Tolerances()
    base, cand = _run_bags(baseline), _run_bags(candidate)
    if len(base) == 1 and len(cand) == 1 and set(base) != set(cand):  # two single bags of other names
        cand = {next(iter(base)): next(iter(cand.values()))}
    if not base and not cand:
        raise InputError(f"no result bags in {baseline} nor in {candidate}")
    inputs = _inputs(baseline) | _inputs(candidate)
    bags = []
    for name in sorted(set(base) | set(cand)):
        result = compare_bag(name, base.get(name), cand.get(name), tol)
        result.input = inputs.get(name)
        bags.append(result)
    return Comparison(baseline, candidate, tol, bags)

