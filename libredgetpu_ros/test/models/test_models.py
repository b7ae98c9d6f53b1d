"""`libredgetpu-ros models`: catalogue, fetch from a loopback server (checksum mismatch, truncated transfer,
resume, a server ignoring Range), offline import, unknown names, config names, and a fetched model running
with `infer`. No test touches the internet: every URL is the loopback server's (127.0.0.1)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libredgetpu_ros.errors import InputError, ModelFetchError

pytestmark = pytest.mark.timeout(60)

ENTRY = "mobilenet_v1_0.25_128"  # the smallest entry: ~0.5 MB per model file


@pytest.fixture
def served(tmp_path: Path, fixtures_dir: Path) -> Path:
    """The entry's files, flat, as a mirror serves them."""
    from libredgetpu_ros.models.store import entry

    folder = tmp_path / "www"
    folder.mkdir()
    for f in entry(ENTRY).files:
        src, = fixtures_dir.rglob(f.name)
        shutil.copyfile(src, folder / f.name)
    return folder


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


RENAMED = {"coco_labels_edgetpu_2019.txt": "/coco_labels.txt"}


def test_catalogue_pins_every_file_to_the_fixture_bytes(fixtures_dir: Path) -> None:
    from libredgetpu_ros.models.catalogue import CATALOGUE

    assert len(CATALOGUE) >= 4
    for e in CATALOGUE.values():
        compiled = e.edgetpu.name if e.edgetpu else e.cpu.name.replace(".tflite", "_edgetpu.tflite")
        assert e.edgetpu is not None or e.task == "pattern"  # only the pattern templates lack one
        assert compiled.endswith("_edgetpu.tflite")
        assert e.cpu.name == compiled.replace("_edgetpu", "")  # where the pipeline looks for the twin
        for f in e.files:
            # Google's repositories; the templates: LibrEdgeTPU at a pinned commit
            assert f.url.startswith(("https://raw.githubusercontent.com/google-coral/",
                                     "https://raw.githubusercontent.com/ricardodeazambuja/LibrEdgeTPU/"
                                     "be71d6de166d9c13bd221117bebb1934446fd10f/"))
            # the URL ends with the cache name, except a file renamed in the cache (two upstream files
            # share the name coco_labels.txt)
            assert f.url.endswith(RENAMED.get(f.name, f.name)), f.name
            src, = fixtures_dir.rglob(f.name)
            assert _sha(src) == f.sha256, f.name


def test_fetch_verifies_caches_and_the_model_runs_with_infer(file_server, cache: Path, served: Path,
                                                              fixture_path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from libredgetpu_ros.cli.main import main
    from libredgetpu_ros.models.store import entry

    with file_server(served) as srv:
        assert main(["models", "fetch", ENTRY, "--mirror", srv.url, "--no-progress"]) == 0
        first = len(srv.requests)
        assert main(["models", "fetch", ENTRY, "--mirror", srv.url]) == 0  # all cached: nothing requested
        assert len(srv.requests) == first == 3
    for f in entry(ENTRY).files:
        assert _sha(cache / f.name) == f.sha256
    assert not list(cache.glob("*.part"))
    capsys.readouterr()
    assert main(["models", "path", ENTRY]) == 0
    assert capsys.readouterr().out.strip() == str(cache / entry(ENTRY).edgetpu.name)
    # The catalogue name works wherever a model path does: infer, on the CPU twin fetched beside it.
    assert main(["infer", "--model", ENTRY, "--labels", ENTRY, "--backend", "cpu",
                 "--image", str(fixture_path("images/cat.bmp")), "--json"]) == 0
    out = capsys.readouterr().out
    assert '"classify"' in out and "cat" in out


def test_checksum_mismatch_is_refused_and_nothing_is_kept(file_server, cache: Path, served: Path) -> None:
    from libredgetpu_ros.models.store import entry, fetch

    bad = entry(ENTRY).edgetpu.name
    with file_server(served) as srv:
        srv.corrupt.add(bad)
        with pytest.raises(ModelFetchError, match=f"checksum mismatch for {bad}.*expected"):
            fetch(ENTRY, mirror=srv.url)
    assert not (cache / bad).exists() and not (cache / f"{bad}.part").exists()


def test_truncated_transfer_then_resume_with_range(file_server, cache: Path, served: Path) -> None:
    from libredgetpu_ros.models.store import entry, fetch

    f = entry(ENTRY).edgetpu
    size = (served / f.name).stat().st_size
    with file_server(served) as srv:
        srv.truncate[f.name] = size // 3
        cut = r"(truncated transfer: got \d+ of \d+ bytes|interrupted).*resume"
        with pytest.raises(ModelFetchError, match=cut):
            fetch(ENTRY, mirror=srv.url)
        part = cache / f"{f.name}.part"
        assert part.stat().st_size == size // 3 and not (cache / f.name).exists()
        srv.requests.clear()
        fetch(ENTRY, mirror=srv.url)
        name, wanted, sent = srv.requests[0]
        assert (name, wanted, sent) == (f.name, f"bytes={size // 3}-", size - size // 3)  # only the rest
    assert _sha(cache / f.name) == f.sha256 and not part.exists()


def test_server_ignoring_range_restarts_the_part(file_server, cache: Path, served: Path) -> None:
    from libredgetpu_ros.models.store import entry, fetch

    f = entry(ENTRY).edgetpu
    cache.mkdir(parents=True)
    (cache / f"{f.name}.part").write_bytes(b"\x00" * 1000)  # stale bytes a 200 reply must replace
    with file_server(served) as srv:
        srv.ignore_range = True
        fetch(ENTRY, mirror=srv.url)
    assert _sha(cache / f.name) == f.sha256


def test_unreachable_server_and_missing_file_say_what(file_server, cache: Path, tmp_path: Path) -> None:
    from libredgetpu_ros.models.store import fetch

    with file_server(tmp_path) as srv:  # serves nothing: 404
        with pytest.raises(ModelFetchError, match="HTTP 404"):
            fetch(ENTRY, mirror=srv.url)
        url = srv.url
    with pytest.raises(ModelFetchError, match=r"cannot connect .*models import DIR.*--mirror"):
        fetch(ENTRY, mirror=url)  # the server is gone: the offline routes are named


def test_offline_import_from_the_fixtures_folder(cache: Path, fixtures_dir: Path, tmp_path: Path) -> None:
    from libredgetpu_ros.cli.main import main
    from libredgetpu_ros.models.catalogue import CATALOGUE
    from libredgetpu_ros.models.store import entry, import_dir

    assert sorted(import_dir(fixtures_dir)) == sorted(CATALOGUE)
    for e in CATALOGUE.values():
        for f in e.files:
            assert _sha(cache / f.name) == f.sha256
    # A file with a catalogue name and other bytes is an error naming it, not a silent skip.
    other = tmp_path / "other"
    other.mkdir()
    (other / entry(ENTRY).cpu.name).write_bytes(b"not the model")
    with pytest.raises(ModelFetchError, match="checksum mismatch"):
        import_dir(other, [ENTRY])
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["models", "import", str(empty)]) == 2  # nothing complete found: a clear error, exit 2


def test_unknown_name_lists_the_catalogue(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from libredgetpu_ros.cli.main import main

    assert main(["models", "fetch", "yolo_v99"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'yolo_v99'" in err and ENTRY in err
    assert main(["models", "path", "yolo_v99"]) == 2
    capsys.readouterr()
    assert main(["models", "path", ENTRY]) == 2  # known, not cached: both ways to get it
    err = capsys.readouterr().err
    assert f"libredgetpu-ros models fetch {ENTRY}" in err and "models import DIR" in err


def test_config_names_resolve_only_from_the_cache(cache: Path, fixtures_dir: Path) -> None:
    from libredgetpu_ros.models.store import entry, import_dir, resolve_labels, resolve_model
    from libredgetpu_ros.perception.pipeline import PipelineConfig

    with pytest.raises(InputError, match=f"models fetch {ENTRY}"):
        PipelineConfig(model=ENTRY).model_paths()
    assert resolve_model("/some/path_edgetpu.tflite") == "/some/path_edgetpu.tflite"  # paths untouched
    import_dir(fixtures_dir, [ENTRY])
    assert PipelineConfig(model=ENTRY).model_paths() == [cache / entry(ENTRY).edgetpu.name]
    assert resolve_labels(ENTRY) == str(cache / "imagenet_labels.txt")
    with pytest.raises(InputError, match="no labels file"):
        resolve_labels("posenet_mobilenet_v1_075_481_641")


def test_list_json(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from libredgetpu_ros.cli.main import main

    assert main(["models", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cache"] == str(cache)
    assert {m["name"]: m["status"] for m in doc["models"]}[ENTRY] == "missing"


@settings(max_examples=300, deadline=200, derandomize=True)
@given(header=st.one_of(st.text(max_size=40),
                        st.from_regex(r"bytes \d{1,12}-\d{1,12}/(\d{1,12}|\*)", fullmatch=True)),
       offset=st.integers(0, 10**12))
def test_fuzz_content_range_parser(header: str, offset: int) -> None:
    from libredgetpu_ros.models.download import _BadResume, _expected_total

    class Reply:
        def __init__(self) -> None:
            self.headers = {"Content-Range": header}

    try:
        total = _expected_total(Reply(), 206, offset, "http://127.0.0.1/x")  # type: ignore[arg-type]
    except _BadResume as exc:  # the part is discarded and the file fetched again from byte 0
        assert "Content-Range" in str(exc) and len(str(exc)) < 400
    else:
        assert total is None or total > offset


def test_progress_bar_reports_the_file_and_bytes(file_server, cache: Path, served: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from libredgetpu_ros.models.store import entry, fetch

    with file_server(served) as srv:
        fetch(ENTRY, mirror=srv.url, progress=True)
    err = capsys.readouterr().err
    assert entry(ENTRY).edgetpu.name in err and "B/s" in err  # tqdm's bar (name, total, rate) on stderr


def test_fetch_path_and_import_json(file_server, cache: Path, served: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``--json`` of fetch, path and import: one JSON document on stdout naming the cached files."""
    import json

    from libredgetpu_ros.cli.main import main
    from libredgetpu_ros.models.store import entry

    e = entry(ENTRY)
    with file_server(served) as srv:
        assert main(["models", "fetch", ENTRY, "--mirror", srv.url, "--no-progress", "--json"]) == 0
    fetched = json.loads(capsys.readouterr().out)
    assert fetched["cache"] == str(cache)
    assert fetched["fetched"] == [{"name": ENTRY, "path": str(cache / e.edgetpu.name),
                                   "files": {f.name: str(cache / f.name) for f in e.files}}]
    assert main(["models", "path", ENTRY, "--cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"name": ENTRY, "file": e.cpu.name,
                                                   "path": str(cache / e.cpu.name)}
    shutil.rmtree(cache)
    assert main(["models", "import", str(served), "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in imported["complete"]] == [ENTRY]
    assert all(Path(p).is_file() for p in imported["complete"][0]["files"].values())


def test_import_of_a_folder_without_the_labels_names_what_is_missing(
        cache: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`models import fixtures/ssd`: the detector's labels file lives in fixtures/labels; the error names it
    and the entry; importing that folder then completes the entry."""
    from libredgetpu_ros.cli.main import main

    assert main(["models", "import", str(fixtures_dir / "ssd")]) == 2
    err = capsys.readouterr().err
    assert "ssd_mobilenet_v2_coco still lacks coco_labels_edgetpu_2019.txt" in err, err
    assert main(["models", "import", str(fixtures_dir / "labels"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "ssd_mobilenet_v2_coco" in [e["name"] for e in report["complete"]]
    assert "ssd_mobilenet_v2_coco" not in report["partial"]
