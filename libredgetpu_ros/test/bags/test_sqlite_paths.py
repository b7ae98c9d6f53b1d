"""sqlite3 bags under a path holding '#', '?' or '%': rosbags opens a .db3 as the unescaped SQLite URI
f"file:{path}", which cuts the path at '#' / '?' and decodes '%xx', so its writer wrote (and its reader read)
another file while the command reported success. Writing and reading such a path are refused naming the
way out, before anything is created; bag-repair's own scan opens the file by its plain path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from libredgetpu_ros.errors import InputError


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("folder", ["run#2", "run?x=1", "run%41"])
def test_writing_a_sqlite3_bag_there_is_refused_and_creates_nothing(tmp_path: Path, fixture_path,
                                                                    folder: str) -> None:
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag

    (tmp_path / folder).mkdir()
    before = _files(tmp_path)
    with pytest.raises(InputError, match=r"rosbags' SQLite URI misreads; rename the folder or use mcap"):
        make_bag([fixture_path("images/cat.bmp")], tmp_path / folder / "out",
                 MakeBagOptions(topic="/cam/image_raw", storage="sqlite3"), progress=False)
    assert _files(tmp_path) == before  # no stray database at tmp_path / "run" (what rosbags made)


def test_reading_a_sqlite3_bag_there_is_refused_naming_it(tmp_path: Path, fixture_path) -> None:
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.bags.storage import open_reader

    make_bag([fixture_path("images/cat.bmp")], tmp_path / "good",
             MakeBagOptions(topic="/cam/image_raw", storage="sqlite3"), progress=False)
    (tmp_path / "run#2").mkdir()
    shutil.copytree(tmp_path / "good", tmp_path / "run#2" / "good")
    open_reader(tmp_path / "good").close()
    with pytest.raises(InputError, match=r"run#2/good/good.db3: its path holds '#'"):
        open_reader(tmp_path / "run#2" / "good")


def test_our_sqlite3_writer_opens_its_database_by_the_plain_path(tmp_path: Path) -> None:
    from libredgetpu_ros.bags.writers import CommittingSqlite3Writer
    from rosbags.rosbag2 import CompressionMode

    folder = tmp_path / "run%41#b" / "bag"
    folder.mkdir(parents=True)
    writer = CommittingSqlite3Writer(folder, CompressionMode.NONE)
    writer.conn.close()
    assert _files(tmp_path) == {"run%41#b", "run%41#b/bag", "run%41#b/bag/bag.db3"}


def test_our_sqlite3_writer_sets_what_rosbags_own_init_sets(tmp_path: Path) -> None:
    """CommittingSqlite3Writer re-creates rosbags' Sqlite3Writer.__init__ instead of calling it (which opens
    the unescaped URI): a rosbags release whose writer gains an attribute its methods use must fail here,
    not as an AttributeError in the middle of a bag. rosbags' own writer is built on a path its URI reads
    right."""
    from libredgetpu_ros.bags.writers import CommittingSqlite3Writer
    from rosbags.rosbag2 import CompressionMode
    from rosbags.rosbag2.storage_sqlite3 import Sqlite3Writer

    writers = {}
    for name, cls in (("theirs", Sqlite3Writer), ("ours", CommittingSqlite3Writer)):
        (tmp_path / name / "bag").mkdir(parents=True)
        writers[name] = cls(tmp_path / name / "bag", CompressionMode.NONE)
    try:
        theirs, ours = vars(writers["theirs"]), vars(writers["ours"])
        assert set(ours) - {"_pending", "_last_commit"} == set(theirs), (sorted(ours), sorted(theirs))
        assert {k: type(v) for k, v in theirs.items()} == {k: type(ours[k]) for k in theirs}
        assert ours["path"] == tmp_path / "ours" / "bag" / "bag.db3"
        assert theirs["path"] == tmp_path / "theirs" / "bag" / "bag.db3"
    finally:
        for writer in writers.values():
            writer.conn.close()


def test_bag_repair_scans_a_sqlite3_bag_there(tmp_path: Path, fixture_path) -> None:
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.bags.salvage import scan

    make_bag([fixture_path("images/cat.bmp")] * 3, tmp_path / "good",
             MakeBagOptions(topic="/cam/image_raw", storage="sqlite3"), progress=False)
    (tmp_path / "run#2").mkdir()
    shutil.copytree(tmp_path / "good", tmp_path / "run#2" / "good")
    _report, channels, messages = scan(tmp_path / "run#2" / "good" / "good.db3")
    assert len(list(messages)) == 3  # the channels fill in as the messages are consumed
    assert [c.topic for c in channels.values()] == ["/cam/image_raw"]
