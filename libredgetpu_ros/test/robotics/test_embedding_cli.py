"""`libredgetpu-ros robotics embed`: enrol fixture photos, query, save/load; one error line and exit 2."""

from __future__ import annotations

import json

from libredgetpu_ros.cli.main import main

FOLDER = "robotics/embedding"


def test_enrol_query_save_and_reload(fixture_path, tmp_path, capsys):
    photo = {name: str(fixture_path(f"{FOLDER}/{name}.bmp"))
             for name in ("cat_train_0", "dog_train_0", "hotdog_train_0", "hotdog_train_1")}
    db = tmp_path / "places.npz"
    assert main(["robotics", "embed", "--backend", "cpu", "--template", "256",
                 "--enroll", f"cat={photo['cat_train_0']}", "--enroll", f"dog={photo['dog_train_0']}",
                 "--enroll", f"hotdog={photo['hotdog_train_0']}", "--query", photo["hotdog_train_1"],
                 "--top-k", "3", "--save", str(db), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["entries"] == 3 and report["capacity"] == 64 and report["backend"] == "cpu"
    matches = report["results"][0]["matches"]
    assert report["results"][0]["label"] == "hotdog" and report["results"][0]["threshold"] > 0.5
    assert matches[0]["label"] == "hotdog" and len(matches) == 3
    assert matches[0]["score"] > matches[1]["score"] + 0.1
    # The saved database loads into another template size.
    assert main(["robotics", "embed", "--backend", "cpu", "--database", str(db), "--query",
                 photo["dog_train_0"]]) == 0
    out = capsys.readouterr().out
    assert "3 entries of 1024 on dense_1024" in out and "dog_train_0.bmp: dog 1.0" in out


def test_bad_input_is_one_error_line(fixture_path, tmp_path, capsys):
    not_an_image = tmp_path / "photo.jpg"
    not_an_image.write_bytes(b"\xff\xd8\xff garbage")
    cat = str(fixture_path(f"{FOLDER}/cat_train_0.bmp"))
    cases = [
        (["--enroll", f"cat={not_an_image}", "--query", cat], "cannot be decoded"),
        (["--enroll", "cat", "--query", cat], "NAME=IMAGE"),
        (["--enroll", f"c\nat={cat}", "--query", cat], "non-printable character U+000A"),
        (["--enroll", f"c\x1bat={cat}", "--query", cat], "non-printable character U+001B"),
        (["--enroll", f"unknown={cat}", "--query", cat], "reserved"),
        (["--enroll", f"{'x' * 1000}={cat}", "--query", cat], "at most 256"),
        (["--enroll", f"cat={cat}", "--query", cat, "--open-set-margin", "2"], "--open-set-margin"),
        (["--query", cat], "nothing to compare with"),
        (["--database", str(not_an_image), "--query", cat], "embedding database file"),
    ]
    for extra, message in cases:
        assert main(["robotics", "embed", "--backend", "cpu", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_unrelated_photo_is_unknown(fixture_path, capsys):
    photo = {name: str(fixture_path(f"{FOLDER}/{name}.bmp")) for name in ("cat_train_0", "dog_train_0",
                                                                          "hotdog_train_0")}
    args = ["robotics", "embed", "--backend", "cpu", "--template", "256",
            "--enroll", f"cat={photo['cat_train_0']}", "--enroll", f"dog={photo['dog_train_0']}",
            "--enroll", f"hotdog={photo['hotdog_train_0']}",
            "--query", str(fixture_path("images/grace_hopper.bmp")), "--json"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["label"] == "unknown" and result["score"] < result["threshold"]
    assert main([*args, "--closed-set"]) == 0  # the old answer: the nearest class, however far
    assert json.loads(capsys.readouterr().out)["results"][0]["label"] in ("cat", "dog", "hotdog")
