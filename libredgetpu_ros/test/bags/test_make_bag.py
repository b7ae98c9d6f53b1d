"""make-bag: stamps, rate, frame_id, encodings and pixels, both storages, video input, bad input; read back
with rosbags (independent of our writer) and compared with OpenCV's decoding of the same files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.errors import ImageError, InputError, OutputError

START_NS = 1_700_000_000_123_456_789


def _read(bag: Path) -> list[tuple[str, int, object]]:
    from rosbags.highlevel import AnyReader

    with AnyReader([bag]) as reader:  # decodes with the definitions stored in the bag itself
        return [(conn.topic, ts, reader.deserialize(raw, conn.msgtype))
                for conn, ts, raw in reader.messages()]


def _pixels(msg: object) -> np.ndarray:
    return np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3)


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
@pytest.mark.parametrize("encoding", ["rgb8", "bgr8"])
def test_stills_become_a_stamped_stream(tmp_path: Path, fixture_path, storage: str, encoding: str) -> None:
    import cv2
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag

    files = [fixture_path("images/cat.bmp"), fixture_path("images/grace_hopper.bmp")]
    opts = MakeBagOptions(topic="/cam/image_raw", frame_id="cam_optical", rate=4.0, storage=storage, loop=2,
                          encoding=encoding, start_ns=START_NS)
    summary = make_bag(files, tmp_path / "bag", opts, progress=False)
    assert summary.frames == 4
    assert any(p.suffix == (".mcap" if storage == "mcap" else ".db3") for p in (tmp_path / "bag").iterdir())

    messages = _read(tmp_path / "bag")
    assert [m[0] for m in messages] == ["/cam/image_raw"] * 4
    stamps = [ts for _, ts, _ in messages]
    assert stamps == [START_NS + i * 250_000_000 for i in range(4)]
    for i, (_, ts, msg) in enumerate(messages):
        assert msg.header.frame_id == "cam_optical"
        assert msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec == ts
        assert msg.encoding == encoding and msg.step == msg.width * 3 and msg.is_bigendian == 0
        bgr = cv2.imread(str(files[i % 2]), cv2.IMREAD_COLOR)
        expected = bgr if encoding == "bgr8" else bgr[:, :, ::-1]
        np.testing.assert_array_equal(_pixels(msg), expected)


def test_folder_input_is_sorted_and_default_rate_is_10hz(tmp_path: Path, fixture_path) -> None:
    import shutil

    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag

    folder = tmp_path / "frames"
    folder.mkdir()
    shutil.copy(fixture_path("images/grace_hopper.bmp"), folder / "b.bmp")
    shutil.copy(fixture_path("images/cat.bmp"), folder / "a.bmp")
    (folder / "notes.txt").write_text("not an image")
    make_bag([folder], tmp_path / "bag", MakeBagOptions(start_ns=0), progress=False)
    messages = _read(tmp_path / "bag")
    assert [ts for _, ts, _ in messages] == [0, 100_000_000]
    import cv2

    expected = [cv2.imread(str(folder / name)).shape[:2] for name in ("a.bmp", "b.bmp")]
    assert [(m.height, m.width) for _, _, m in messages] == expected  # sorted by name, the .txt skipped


def _write_video(path: Path, frames: list[np.ndarray], fps: float) -> Path:
    import cv2

    height, width = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (width, height))
    assert writer.isOpened(), "OpenCV cannot write MJPG .avi here"
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path


def test_video_frames_at_the_video_rate_or_the_given_rate(tmp_path: Path) -> None:
    import cv2
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag

    # Flat colour frames survive MJPG within a few levels; each frame has its own colour.
    colours = [(0, 0, 255), (0, 255, 0), (255, 0, 0), (40, 120, 200), (200, 200, 20)]
    frames = [np.full((48, 64, 3), c, np.uint8) for c in colours]
    video = _write_video(tmp_path / "clip.avi", frames, fps=25.0)
    reference = []
    cap = cv2.VideoCapture(str(video))
    while (got := cap.read())[0]:
        reference.append(got[1])
    cap.release()
    assert len(reference) == len(frames)

    summary = make_bag([video], tmp_path / "own", MakeBagOptions(start_ns=0), progress=False)
    assert summary.rate == pytest.approx(25.0)
    own = _read(tmp_path / "own")
    assert [ts for _, ts, _ in own] == [i * 40_000_000 for i in range(5)]
    for (_, _, msg), ref, original in zip(own, reference, frames, strict=True):
        np.testing.assert_array_equal(_pixels(msg), ref[:, :, ::-1])  # exactly what OpenCV decodes
        assert np.abs(_pixels(msg).astype(int) - original[:, :, ::-1]).max() <= 8  # and in order

    make_bag([video], tmp_path / "slow", MakeBagOptions(rate=5.0, start_ns=0, storage="sqlite3"),
             progress=False)
    assert [ts for _, ts, _ in _read(tmp_path / "slow")] == [i * 200_000_000 for i in range(5)]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rate": 0.0}, "rate must be > 0"),
    ({"loop": 0}, "loop must be >= 1"),
    ({"encoding": "mono16"}, "encoding 'mono16'"),
    ({"topic": "image_raw"}, "absolute name"),
    ({"storage": "rosbag1"}, "storage 'rosbag1'"),
])
def test_bad_options_are_refused(tmp_path: Path, fixture_path, kwargs: dict, message: str) -> None:
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag

    with pytest.raises(InputError, match=message):
        make_bag([fixture_path("images/cat.bmp")], tmp_path / "bag", MakeBagOptions(**kwargs), progress=False)


def test_bad_inputs_name_the_file(tmp_path: Path, fixture_path) -> None:
    from libredgetpu_ros.bags.make import make_bag

    with pytest.raises(InputError, match=r"nope\.png does not exist"):
        make_bag([tmp_path / "nope.png"], tmp_path / "bag1", progress=False)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    with pytest.raises(ImageError, match=r"broken\.jpg cannot be decoded"):
        make_bag([broken], tmp_path / "bag2", progress=False)
    (tmp_path / "exists").mkdir()
    with pytest.raises(InputError, match="already exists"):
        make_bag([fixture_path("images/cat.bmp")], tmp_path / "exists", progress=False)
    assert list((tmp_path / "exists").iterdir()) == []  # an existing folder is left alone
    (tmp_path / "a_file").write_bytes(b"")
    with pytest.raises(OutputError, match="cannot make the folder"):  # not a raw OSError
        make_bag([fixture_path("images/cat.bmp")], tmp_path / "a_file" / "sub" / "bag", progress=False)


def test_make_bag_command(tmp_path: Path, fixture_path, capsys: pytest.CaptureFixture[str]) -> None:
    from libredgetpu_ros.cli.main import main

    code = main(["make-bag", "--images", str(fixture_path("images/cat.bmp")), "--out", str(tmp_path / "bag"),
                 "--rate", "30", "--loop", "3", "--frame-id", "cam", "--storage", "sqlite3",
                 "--start", "100"])
    assert code == 0
    assert "3 frames on /image_raw" in capsys.readouterr().out
    messages = _read(tmp_path / "bag")
    assert [ts for _, ts, _ in messages] == [100_000_000_000 + round(i * 1e9 / 30) for i in range(3)]
    assert main(["make-bag", "--images", str(tmp_path / "missing"), "--out", str(tmp_path / "b2")]) == 2
