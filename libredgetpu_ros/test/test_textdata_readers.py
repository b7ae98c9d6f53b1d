"""Every reader of a user's YAML / JSON goes through textdata (issue 21 items 3 and 7): ``mgk --table``,
bag ``metadata.yaml``, the reference runner's program, bringup / node config files, the dense template
sidecar. Alias bombs and deep nesting are refused with the reader's typed error in bounded time (the
bombs run in a subprocess capped in time and address space: before, ``mgk --table`` took 1.66 GB)."""

from __future__ import annotations

import copy
import re

import pytest
from libredgetpu_ros.errors import ConfigError, InputError, ModelFormatError

from .test_textdata import billion_laughs, run_code

DEEP = "x: " + "[" * 3000 + "]" * 3000 + "\n"


def test_mgk_table_alias_bomb_refused_quickly(tmp_path) -> None:
    table = tmp_path / "table.yaml"
    table.write_text(billion_laughs() + "layers: *a8\n")
    proc = run_code(f"""
        from libredgetpu_ros.ingenic.table import load_table
        from libredgetpu_ros.errors import ConfigError
        try:
            load_table({str(table)!r})
        except ConfigError as exc:
            print("refused:", exc)
        """)
    assert proc.returncode == 0, proc.stderr[-1000:]
    assert proc.stdout.startswith("refused:") and "aliases expand to more than" in proc.stdout


@pytest.mark.parametrize("text", [DEEP, "layers: [" + "{a: " * 500 + "1" + "}" * 500 + "]\n"])
def test_mgk_table_deep_nesting_refused(tmp_path, text: str) -> None:
    from libredgetpu_ros.ingenic.table import load_table

    table = tmp_path / "table.yaml"
    table.write_text(text)
    with pytest.raises(ConfigError, match="nested deeper than 16 levels"):
        load_table(table)


@pytest.mark.parametrize("text", [DEEP, billion_laughs()])
def test_bag_metadata_refused_before_rosbags_reads_it(tmp_path, text: str) -> None:
    from libredgetpu_ros.bags.storage import open_reader

    bag = tmp_path / "bag"
    bag.mkdir()
    (bag / "metadata.yaml").write_text(text)
    with pytest.raises(InputError, match=r"metadata.yaml.*(nested deeper than 32|aliases expand)") as info:
        open_reader(bag)
    assert len(str(info.value)) < 600


def test_reference_program_bomb_refused(fixture_path, tmp_path) -> None:
    from libredgetpu_ros.femto import load_iospec
    from libredgetpu_ros.femto.reference import load_program

    spec = load_iospec(fixture_path("femto/add_bc_api.yaml"))
    program = tmp_path / "program.yaml"
    program.write_text(billion_laughs() + "outputs: {}\n")
    with pytest.raises(ConfigError, match="aliases expand"):
        load_program(program, spec)
    program.write_bytes(b"outputs: {A: {bias: 0.0}}\n# caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_program(program, spec)


def test_bringup_and_node_config_deep_nesting_refused(tmp_path) -> None:
    from libredgetpu_ros.ros.bag_processing import load_node_config
    from libredgetpu_ros.ros.bringup import load_config

    path = tmp_path / "bringup.yaml"
    path.write_text(DEEP)
    with pytest.raises(ConfigError, match="nested deeper than"):
        load_config(path)
    with pytest.raises(ConfigError, match="nested deeper than"):
        load_node_config(path)


def test_template_sidecar_deep_json_refused(tmp_path) -> None:
    from libredgetpu_ros.matmul.template import _read_sidecar

    path = tmp_path / "dense_edgetpu.json"
    path.write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ModelFormatError, match="nested 100001 levels deep"):
        _read_sidecar(path)


def test_robotics_template_sidecar_deep_json_refused(tmp_path) -> None:
    from libredgetpu_ros.robotics.template import _read_sidecar

    path = tmp_path / "spot_edgetpu.json"
    path.write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")  # before: RecursionError
    with pytest.raises(ModelFormatError, match=r"sidecar is not JSON.*nested 100001 levels deep"):
        _read_sidecar(path)


@pytest.mark.parametrize("qos", ["- " + "[" * 3000 + "]" * 3000, billion_laughs()])
def test_sqlite_offered_qos_refused_before_rosbags_parses_it(tmp_path, qos: str) -> None:
    import sqlite3

    import cv2
    import numpy as np
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.bags.storage import open_reader

    image = tmp_path / "frame.png"
    cv2.imwrite(str(image), np.zeros((8, 8, 3), np.uint8))
    make_bag([image], tmp_path / "bag", MakeBagOptions(loop=2, storage="sqlite3"), progress=False)
    conn = sqlite3.connect(next((tmp_path / "bag").glob("*.db3")))
    conn.execute("UPDATE topics SET offered_qos_profiles = ?", (qos,))  # before: RecursionError from rosbags
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match=r"offered_qos_profiles: (nested deeper than 16|aliases expand)"):
        open_reader(tmp_path / "bag")


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_offered_qos_over_the_per_topic_cap_refused_before_parsing(tmp_path, storage: str) -> None:
    """rosbag2 keeps one profile per publisher: a topic with 1,000 of them (a large system's /rosout) opens
    (the former 64 KiB cap refused ~240 and more). 3,000 (over MAX_QOS_PROFILES) are refused by the
    cap, naming the topic, its measure and the cap, and bag-repair drops them."""
    from libredgetpu_ros.bags.qos_checks import HINT as QOS_HINT
    from libredgetpu_ros.bags.storage import new_bag, open_reader, sensor_data_qos
    from libredgetpu_ros.bags.typestore import typestore

    def write(name: str, profiles: int) -> object:
        with new_bag(tmp_path / name, storage) as writer:
            conn = writer.add_connection("/camera/chatty_qos", "std_msgs/msg/Empty", typestore=typestore(),
                                         offered_qos_profiles=[sensor_data_qos()] * profiles)
            writer.write(conn, 1, b"\x00\x01\x00\x00")
        return tmp_path / name

    reader = open_reader(write("large_system", 1000))
    try:
        assert len(reader.connections[0].ext.offered_qos_profiles) == 1000
    finally:
        reader.close()
    expected = (r"topic /camera/chatty_qos: offered_qos_profiles (is \d+ bytes|has \d+ YAML marks), more "
                r"than the \d+ accepted per topic \(2,048 profiles\)")
    with pytest.raises(InputError, match=expected) as refused:
        open_reader(write("many", 3000))
    # not the generic "bag-repair recovers" hint: the QoS hint says what bag-repair does with such a topic
    assert "bag-repair` recovers" not in str(refused.value), refused.value
    assert str(refused.value).endswith(QOS_HINT), refused.value
    # ... and it does: the copy keeps the message, drops the profiles (checked, never parsed) and says so
    from libredgetpu_ros.bags.repair import repair_bag

    summary = repair_bag(tmp_path / "many", tmp_path / "fixed")
    assert summary.messages == 1 and list(summary.qos_dropped) == ["/camera/chatty_qos"], summary.text()
    assert "accepted per topic" in summary.qos_dropped["/camera/chatty_qos"]
    assert "QoS profiles not copied" in summary.text()
    fixed = open_reader(tmp_path / "fixed")
    try:
        assert [c.topic for c in fixed.connections] == ["/camera/chatty_qos"]
        assert sum(1 for _ in fixed.messages()) == 1
    finally:
        fixed.close()


@pytest.mark.parametrize("qos", ["[" + ",".join(["0"] * 100000) + "]", "a" * (800 * 1024)])
def test_sqlite_dense_qos_over_the_caps_refused_before_parsing(tmp_path, monkeypatch, qos: str) -> None:
    """The densest YAML costs ~4 times real profiles per byte to parse: within the byte cap, its marks
    (token-opening characters) are over theirs, and it is refused before any parse; so is a text over the
    byte cap."""
    import sqlite3

    import cv2
    import numpy as np
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.bags.qos_checks import MAX_QOS_MARKS, MAX_QOS_PROFILE_BYTES, QosTooLarge
    from libredgetpu_ros.bags.storage import open_reader

    from libredgetpu_ros import textdata

    image = tmp_path / "frame.png"
    cv2.imwrite(str(image), np.zeros((8, 8, 3), np.uint8))
    make_bag([image], tmp_path / "bag", MakeBagOptions(loop=2, storage="sqlite3"), progress=False)
    conn = sqlite3.connect(next((tmp_path / "bag").glob("*.db3")))
    conn.execute("UPDATE topics SET offered_qos_profiles = ?", (qos,))
    conn.commit()
    conn.close()
    loads: list[str] = []
    load_yaml = textdata.load_yaml
    monkeypatch.setattr(textdata, "load_yaml", lambda text, origin, **kw: loads.append(origin)
                        or load_yaml(text, origin, **kw))
    expected = (rf"has 100001 YAML marks, more than the {MAX_QOS_MARKS} " if qos[0] == "["
                else rf"is {800 * 1024} bytes, more than the {MAX_QOS_PROFILE_BYTES} ")
    with pytest.raises(QosTooLarge, match=expected):
        open_reader(tmp_path / "bag")
    assert not [o for o in loads if "offered_qos_profiles" in o], loads


def _metadata_bag(tmp_path):  # a one-topic mcap bag and its metadata.yaml, parsed
    import yaml
    from libredgetpu_ros.bags.storage import new_bag, sensor_data_qos
    from libredgetpu_ros.bags.typestore import typestore

    with new_bag(tmp_path / "bag", "mcap") as writer:
        conn = writer.add_connection("/camera/chatty_qos", "std_msgs/msg/Empty", typestore=typestore(),
                                     offered_qos_profiles=[sensor_data_qos()])
        writer.write(conn, 1, b"\x00\x01\x00\x00")
    meta = tmp_path / "bag" / "metadata.yaml"
    doc = yaml.safe_load(meta.read_text())
    return meta, doc, doc["rosbag2_bagfile_information"]["topics_with_message_count"][0]["topic_metadata"]


@pytest.mark.parametrize("form", ["list", "string"])
def test_metadata_yaml_qos_over_the_per_topic_cap_refused_before_the_file_is_parsed(tmp_path, monkeypatch,
                                                                                   form: str) -> None:
    """metadata.yaml's topics carry their profiles too (a list since metadata version 9, a YAML string
    before): 1,000 of them open (a list was measured by its text span, indentation included: refused from
    ~150); 3,000 are refused by the same per-topic cap, naming the topic, before the whole file is parsed
    (in pure Python, ~3.5 s per MB, then again by rosbags), with a hint that fits."""
    import yaml
    from libredgetpu_ros.bags.qos_checks import HINT as QOS_HINT
    from libredgetpu_ros.bags.qos_checks import QosTooLarge
    from libredgetpu_ros.bags.storage import open_reader

    from libredgetpu_ros import textdata

    meta, doc, topic = _metadata_bag(tmp_path)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    profiles = [copy.deepcopy(topic["offered_qos_profiles"][0]) for _ in range(3000)]  # no YAML aliases
    topic["offered_qos_profiles"] = profiles if form == "list" else yaml.dump(profiles, Dumper=dumper)
    meta.write_text(yaml.dump(doc, Dumper=dumper))
    loads: list[str] = []
    load_yaml = textdata.load_yaml
    monkeypatch.setattr(textdata, "load_yaml", lambda text, origin, **kw: loads.append(origin)
                        or load_yaml(text, origin, **kw))
    with pytest.raises(QosTooLarge) as refused:
        open_reader(tmp_path / "bag")
    text = str(refused.value)
    assert re.search(r"metadata.yaml: topic /camera/chatty_qos: offered_qos_profiles (is \d+ bytes|has \d+ "
                     r"YAML marks), more than the \d+ accepted per topic \(2,048 profiles\)", text), text
    assert text.endswith(QOS_HINT), text
    assert not [o for o in loads if o.startswith("metadata.yaml")], loads  # refused before its parse
    some = profiles[:1000]
    topic["offered_qos_profiles"] = some if form == "list" else yaml.dump(some, Dumper=dumper)
    meta.write_text(yaml.dump(doc, Dumper=dumper))
    open_reader(tmp_path / "bag").close()


def test_metadata_yaml_qos_behind_an_aliased_key_is_checked(tmp_path) -> None:
    """An alias used as a key is the anchored scalar's value to PyYAML: ``*k`` where ``&k`` anchored
    "offered_qos_profiles" is that key, and its value is checked like the plain key's (it was not)."""
    import yaml
    from libredgetpu_ros.bags.qos_checks import QosTooLarge
    from libredgetpu_ros.bags.storage import open_reader

    meta, doc, topic = _metadata_bag(tmp_path)
    del topic["offered_qos_profiles"]
    topic["type_description_hash"] = "offered_qos_profiles"  # a key rosbags ignores, holding the key's text
    topic["offered_qos_profiles"] = "[" + ",".join(["0"] * 100000) + "]"  # after it: the anchor comes first
    text = yaml.safe_dump(doc, width=1 << 30, sort_keys=False)
    text = text.replace("hash: offered_qos_profiles", "hash: &k offered_qos_profiles")
    text = text.replace("offered_qos_profiles: '[", "*k : '[")
    assert "*k : '[" in text and "&k offered_qos_profiles" in text
    assert yaml.safe_load(text)["rosbag2_bagfile_information"]["topics_with_message_count"][0][
        "topic_metadata"]["offered_qos_profiles"].startswith("[0,0")  # what PyYAML reads back
    meta.write_text(text)
    with pytest.raises(QosTooLarge, match=r"metadata.yaml: topic /camera/chatty_qos: offered_qos_profiles "
                                          r"has 100001 YAML marks"):
        open_reader(tmp_path / "bag")
