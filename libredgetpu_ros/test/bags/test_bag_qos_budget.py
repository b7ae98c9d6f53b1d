"""A bag's offered QoS profiles, all topics together (``bags/qos_checks.py`` ``QosBudget``): each topic was
capped (2,048 real profiles), the bag was not, so a bag of many topics each just under the per-topic caps
had every one parsed (~1.8 s of CPU each, and again by rosbags) before anything was refused. Now the bag's
totals are charged before each topic is parsed: such a bag is refused after a few topics, naming the bag,
the total and the cap; bag-repair drops the profiles of the topics over the total and says so; a large real
bag (hundreds of topics, a /rosout with one profile per node) still opens. No timing: parsed topics are
counted."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from libredgetpu_ros.errors import InputError

TOPICS = 40
# one profile as rosbags writes it, then a YAML comment: ~700 KiB (under the 768 KiB per-topic cap) that
# parses cheaply, so the test spends its time counting, not parsing
PADDING = 700 * 1024


def _profile_text() -> str:
    from libredgetpu_ros.bags.storage import sensor_data_qos
    from rosbags.rosbag2.metadata import dump_qos_v8

    return dump_qos_v8([sensor_data_qos()])


def _hostile_text(i: int) -> str:
    # each topic's text differs (a bag of identical texts is charged too: test_identical_texts_...)
    return f"{_profile_text()}\n# {i:04d}{'x' * PADDING}\n"


def _write(path: Path, storage: str, texts: dict[str, str | int], monkeypatch) -> Path:
    """A bag with one message on each topic of ``texts``, whose offered_qos_profiles text is the given one in
    its storage file (an int: that many real profiles, written by rosbags there and in metadata.yaml)."""
    import rosbags.rosbag2.writer as rosbags_writer
    from libredgetpu_ros.bags.storage import new_bag, sensor_data_qos
    from libredgetpu_ros.bags.typestore import typestore

    with new_bag(path, storage) as writer:
        for topic, text in texts.items():
            with monkeypatch.context() as patch:
                if isinstance(text, str) and storage == "mcap":  # the channel's metadata string
                    patch.setattr(rosbags_writer, "dump_qos_v9", lambda _qos, text=text: text)
                profiles = [sensor_data_qos()] * (text if isinstance(text, int) else 1)
                conn = writer.add_connection(topic, "std_msgs/msg/Empty", typestore=typestore(),
                                             offered_qos_profiles=profiles)
            writer.write(conn, 1, b"\x00\x01\x00\x00")
    if storage == "sqlite3":
        db = sqlite3.connect(next(path.glob("*.db3")))
        for topic, text in texts.items():
            if isinstance(text, str):
                db.execute("UPDATE topics SET offered_qos_profiles = ? WHERE name = ?", (text, topic))
        db.commit()
        db.close()
    return path


def _count_parses(monkeypatch) -> list[str]:
    """The topics' QoS texts textdata parses (their origins), from now on."""
    from libredgetpu_ros import textdata

    parsed: list[str] = []
    load_yaml = textdata.load_yaml
    monkeypatch.setattr(textdata, "load_yaml", lambda text, origin, **kw: (
        parsed.append(origin) if "offered_qos_profiles" in origin or "QoS profiles" in origin else None)
        or load_yaml(text, origin, **kw))
    return parsed


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_many_topics_at_the_per_topic_cap_refused_after_a_few(tmp_path: Path, monkeypatch,
                                                              storage: str) -> None:
    """40 topics of ~700 KiB each (every one within the per-topic caps): the old code parsed all 40 (and
    rosbags then parsed them again); the bag's byte total (3 MiB) refuses the 5th before its parse, naming
    the bag, the total and the cap, with the bag-wide hint."""
    from libredgetpu_ros.bags.qos_checks import (
        BAG_HINT,
        MAX_BAG_QOS_BYTES,
        MAX_BAG_QOS_PROFILES,
        MAX_QOS_PROFILE_BYTES,
        QosBagTooLarge,
    )
    from libredgetpu_ros.bags.storage import open_reader

    texts = {f"/robot/t{i:02d}": _hostile_text(i) for i in range(TOPICS)}
    assert all(len(t) < MAX_QOS_PROFILE_BYTES for t in texts.values())
    bag = _write(tmp_path / "hostile", storage, texts, monkeypatch)
    parsed = _count_parses(monkeypatch)
    with pytest.raises(QosBagTooLarge) as refused:
        open_reader(bag)
    text = str(refused.value)
    fit = MAX_BAG_QOS_BYTES // len(next(iter(texts.values())))  # 4
    assert len(parsed) == fit < TOPICS, parsed
    assert text.startswith(f"cannot read bag {bag}: "), text
    assert re.search(rf"topic /robot/t{fit:02d}: the bag's offered_qos_profiles would reach [\d,]+ bytes "
                     rf"with it \(topic {fit + 1}\), more than the {MAX_BAG_QOS_BYTES:,} accepted per bag "
                     rf"\({MAX_BAG_QOS_PROFILES:,} profiles\)", text), text
    assert text.endswith(BAG_HINT), text


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_bag_repair_drops_the_profiles_over_the_bag_total_and_the_copy_opens(tmp_path: Path, monkeypatch,
                                                                             storage: str) -> None:
    """bag-repair copies every topic and message; the topics whose profiles would take the bag over its
    total are copied without them (the summary says so, for each), the others with theirs, so the copy
    opens. A real profile after the refused ones still fits: it is kept."""
    from libredgetpu_ros.bags.qos_checks import MAX_BAG_QOS_BYTES
    from libredgetpu_ros.bags.repair import repair_bag
    from libredgetpu_ros.bags.storage import open_reader

    hostile: dict[str, str | int] = {f"/robot/t{i:02d}": _hostile_text(i) for i in range(8)}
    texts = {**hostile, "/robot/small": 1}
    bag = _write(tmp_path / "hostile", storage, texts, monkeypatch)
    parsed = _count_parses(monkeypatch)
    summary = repair_bag(bag, tmp_path / "fixed")
    fit = MAX_BAG_QOS_BYTES // len(next(iter(hostile.values())))
    assert summary.messages == len(texts), summary.text()
    assert sorted(summary.qos_dropped) == sorted(hostile)[fit:], summary.text()
    assert all("accepted per bag" in why for why in summary.qos_dropped.values()), summary.qos_dropped
    assert "QoS profiles not copied" in summary.text()
    assert len(parsed) == fit + 1, parsed  # the refused topics' texts were never parsed
    reader = open_reader(tmp_path / "fixed")
    try:
        profiles = {c.topic: len(c.ext.offered_qos_profiles) for c in reader.connections}
        assert profiles == {t: 0 if t in summary.qos_dropped else 1 for t in texts}, profiles
        assert sum(1 for _ in reader.messages()) == len(texts)
    finally:
        reader.close()


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_large_real_bag_opens(tmp_path: Path, monkeypatch, storage: str) -> None:
    """A large robot's bag: 400 topics with one publisher each, and /rosout and /parameter_events with one
    profile per node (400 nodes), as rosbag2 records them: 1,200 profiles, in the storage file and again in
    metadata.yaml, within the bag's totals."""
    from libredgetpu_ros.bags.storage import open_reader

    nodes = 400
    texts: dict[str, str | int] = {f"/robot/node{i:03d}/out": 1 for i in range(nodes)}
    texts["/rosout"] = texts["/parameter_events"] = nodes
    bag = _write(tmp_path / "large", storage, texts, monkeypatch)
    reader = open_reader(bag)
    try:
        profiles = {c.topic: len(c.ext.offered_qos_profiles) for c in reader.connections}
        assert len(profiles) == nodes + 2 and profiles["/rosout"] == profiles["/parameter_events"] == nodes
    finally:
        reader.close()


def test_identical_texts_are_parsed_once_and_every_copy_is_charged(monkeypatch) -> None:
    """A split bag repeats each topic's profiles in every file (rosbags parses each copy at open): a text
    identical to one already accepted in the bag is not parsed again, but its copy counts toward the
    bag's total of copies, which refuses the bag once over."""
    from libredgetpu_ros.bags.qos_checks import (
        MAX_BAG_COPY_BYTES,
        QosBagTooLarge,
        check_qos_text,
        qos_budget,
    )

    text = _hostile_text(0)
    parsed = _count_parses(monkeypatch)
    copies = MAX_BAG_COPY_BYTES // len(text)
    with qos_budget() as budget:
        for _ in range(copies):
            check_qos_text("/robot/t00", text, "test offered_qos_profiles")
        assert len(parsed) == budget.parsed == 1 and budget.topics == copies
        with pytest.raises(QosBagTooLarge, match=rf"more than the {MAX_BAG_COPY_BYTES:,} accepted per bag"):
            check_qos_text("/robot/t00", text, "test offered_qos_profiles")
    with qos_budget() as fresh:  # the next bag starts from nothing
        check_qos_text("/robot/t00", text, "test offered_qos_profiles")
        assert fresh.topics == 1 and len(parsed) == 2


def test_a_refused_text_is_not_accepted_for_its_copies() -> None:
    """A text that failed its parse is not remembered as accepted: its next copy is parsed (and refused)
    again, not waved through."""
    from libredgetpu_ros.bags.qos_checks import check_qos_text, qos_budget

    with qos_budget() as budget:
        for _ in range(2):
            with pytest.raises(InputError, match="nested deeper than 16"):
                check_qos_text("/t", "- " + "[" * 40 + "]" * 40, "test offered_qos_profiles", max_depth=16)
        assert budget.parsed == 2 and not budget.accepted
