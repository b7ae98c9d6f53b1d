"""EmbeddingSimilarity on the MatMul engine with the fixture extractor (CPU twin through LiteRT): augmented
queries of the enrolment photos, the open-set decision on photos never enrolled, ranking against float64
cosine within the int8 bound, capacity, persistence across templates 256/512/1024, atomic swaps under
concurrent queries, bad input and hostile labels."""

from __future__ import annotations

import threading
import time
import tracemalloc
from pathlib import Path

import cv2
import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError, ImageError, InputError
from libredgetpu_ros.matmul import MatMulEngine
from libredgetpu_ros.perception.images import load_image
from libredgetpu_ros.robotics.embedding import UNKNOWN, EmbeddingSimilarity
from libredgetpu_ros.robotics.extractor import EmbeddingExtractor

from .._helpers import load_helper

bad_files = load_helper(Path(__file__).with_name("_bad_files.py"))

PHOTOS = ("cat_train_0", "dog_train_0", "hotdog_train_0", "hotdog_train_1")


def augmentations(rgb: np.ndarray) -> dict[str, np.ndarray]:
    """Crops (corners, centre; 70 and 85 %), flips, brightness 0.6-1.5, +-10 degree rotations, blur."""
    h, w = rgb.shape[:2]
    out: dict[str, np.ndarray] = {}
    for f in (0.7, 0.85):
        ch, cw = int(h * f), int(w * f)
        corners = {"tl": (0, 0), "br": (h - ch, w - cw), "c": ((h - ch) // 2, (w - cw) // 2)}
        for name, (y, x) in corners.items():
            out[f"crop{f}{name}"] = rgb[y:y + ch, x:x + cw]
    out["flip"] = np.ascontiguousarray(rgb[:, ::-1])
    out["flip+crop"] = np.ascontiguousarray(rgb[:, ::-1][int(h * .1):int(h * .9), int(w * .1):int(w * .9)])
    for b in (0.6, 0.8, 1.25, 1.5):
        out[f"brightness{b}"] = np.clip(rgb.astype(np.float32) * b, 0, 255).astype(np.uint8)
    for angle in (-10, 10):
        rotation = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.15)
        out[f"rotate{angle}"] = cv2.warpAffine(rgb, rotation, (w, h), borderMode=cv2.BORDER_REFLECT)
    out["blur"] = cv2.GaussianBlur(rgb, (7, 7), 2)
    return out


@pytest.fixture(scope="module")
def extractor(fixture_path):
    model = fixture_path("robotics/embedding/mobilenet_v1_1.0_224_quant_embedding_extractor_edgetpu.tflite")
    with EmbeddingExtractor(model, backend="cpu") as ex:
        yield ex


@pytest.fixture(scope="module")
def photos(fixture_path):
    return {name: load_image(fixture_path(f"robotics/embedding/{name}.bmp")) for name in PHOTOS}


@pytest.fixture(scope="module")
def bank(extractor, photos):
    """Embeddings of every photo and its augmentations: {(photo, augmentation): vector}."""
    vectors = {(name, "original"): extractor.embed(rgb) for name, rgb in photos.items()}
    for name, rgb in photos.items():
        for aug, image in augmentations(rgb).items():
            vectors[(name, aug)] = extractor.embed(image)
    return vectors


def _cls(photo: str) -> str:
    return photo.rsplit("_", 2)[0]


def unrelated_photos(fixture_path) -> dict[str, np.ndarray]:
    """Photos of nothing enrolled: two fixture photos of people and matplotlib's sample photo of a gift
    box (shipped with the matplotlib wheel the package requires)."""
    import matplotlib

    present = Path(matplotlib.get_data_path()) / "sample_data" / "Minduka_Present_Blue_Pack.png"
    return {"grace_hopper": load_image(fixture_path("images/grace_hopper.bmp")),
            "test_couple": load_image(fixture_path("images/test_couple.jpg")), "present": load_image(present)}


def test_open_set_says_unknown_for_unrelated_photos_and_keeps_enrolled_classes(extractor, bank, fixture_path):
    """Three classes enrolled (one photo each); held photos of two of them (another hot dog, the fixtures'
    other cat) and every augmentation of the enrolled photos stay right, photos of nothing enrolled come
    back unknown (the closed set named one of the three for each), and a forgotten class is unknown."""
    held = {"hotdog": extractor.embed(load_image(fixture_path("robotics/embedding/hotdog_train_1.bmp"))),
            "cat": extractor.embed(load_image(fixture_path("images/cat.bmp")))}
    unrelated = {name: extractor.embed(rgb) for name, rgb in unrelated_photos(fixture_path).items()}
    with MatMulEngine.from_template(1024, backend="cpu") as engine:
        db = EmbeddingSimilarity(engine, 1024)
        for photo in PHOTOS[:3]:
            db.add(_cls(photo), bank[(photo, "original")])
        threshold = db.threshold()
        for label, vector in held.items():
            decision = db.classify(vector)
            print(f"held {label}: {decision.label} {decision.score:.3f} (threshold {threshold:.3f})")
            assert decision.label == label and decision.known
        for (photo, aug), vector in bank.items():
            if photo in PHOTOS[:3]:
                assert db.classify(vector).label == _cls(photo), (photo, aug)
        unknown = 0
        for name, vector in unrelated.items():
            decision, closed = db.classify(vector), db.classify(vector, margin=None)
            print(f"unrelated {name}: {decision.label} (best {decision.score:.3f}); closed set: "
                  f"{closed.label}")
            assert closed.label in ("cat", "dog", "hotdog")
            unknown += decision.label == UNKNOWN and decision.matches == ()
        assert unknown >= 2
        assert db.classify(bank[("cat_train_0", "original")]).score <= 1.0  # int8 rounding clipped
        db.remove("cat")
        forgotten = db.classify(held["cat"])
        closed = db.classify(held["cat"], margin=None)
        print(f"cat after forgetting it: {forgotten.label} (best {forgotten.score:.3f}, closed set "
              f"{closed.label}, threshold {forgotten.threshold:.3f})")
        assert forgotten.label == UNKNOWN and closed.label in ("dog", "hotdog")


def test_augmented_queries_find_the_right_class(bank):
    with MatMulEngine.from_template(1024, backend="cpu") as engine:
        db = EmbeddingSimilarity(engine, 1024)
        for photo in PHOTOS:
            db.add(_cls(photo), bank[(photo, "original")])
        queries = [(photo, aug) for (photo, aug) in bank if aug != "original"]
        right, margins = 0, []
        for key in queries:
            first, second = db.query(bank[key], top_k=2)
            right += first.label == _cls(key[0])
            margins.append(first.score - second.score)
        accuracy = right / len(queries)
        print(f"augmented queries: {right}/{len(queries)} right ({accuracy:.0%}), smallest margin "
              f"{min(margins):.3f}")
        assert len(queries) == 60 and accuracy == 1.0


@pytest.mark.parametrize("n", [256, 1024])
def test_ranking_equals_float64_cosine_except_ties_within_the_int8_bound(bank, n):
    keys = sorted(bank)
    database = np.array([bank[k] for k in keys[::2]], dtype=np.float64)  # 32 entries
    unit = database / np.linalg.norm(database, axis=1, keepdims=True)
    with MatMulEngine.from_template(n, backend="cpu") as engine:
        db = EmbeddingSimilarity(engine, 1024)
        db.add_many([(f"e{i}", v) for i, v in enumerate(database)])
        swapped_pairs = checked_pairs = 0
        for key in keys[1::2]:  # the other half are the queries
            q = bank[key].astype(np.float64)
            cosine = unit @ (q / np.linalg.norm(q))
            score, _, bound = db.scores(q, bound=True)
            score, bound = score[: len(unit)], bound[: len(unit)]
            assert np.all(np.abs(score - cosine) <= bound + 1e-6)
            mine, exact = np.argsort(-score, kind="stable"), np.argsort(-cosine, kind="stable")
            for a in range(len(unit)):
                for b in range(a + 1, len(unit)):
                    i, j = mine[a], mine[b]  # engine says i >= j
                    checked_pairs += 1
                    if cosine[i] < cosine[j]:  # float64 disagrees: only allowed inside the bounds
                        swapped_pairs += 1
                        assert cosine[j] - cosine[i] <= bound[i] + bound[j] + 1e-9
            if not np.array_equal(mine, exact):
                assert np.all(np.abs(cosine[mine] - cosine[exact]) <= 2 * bound.max() + 1e-9)
        print(f"dense_{n}: {swapped_pairs} of {checked_pairs} pairs swapped, all within the int8 bound "
              f"(mean bound {np.mean(bound):.4f})")


def test_capacity_full_is_a_clear_error_and_keeps_the_database():
    rng = np.random.default_rng(0)
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        db = EmbeddingSimilarity(engine, 1024)  # 4 rows per entry: 64 entries
        assert (db.chunks, db.capacity) == (4, 64)
        db.add_many([(f"p{i}", v) for i, v in enumerate(rng.normal(size=(60, 1024)))])
        version = engine.version
        with pytest.raises(InputError, match=r"full: capacity 64 entries .* 4 free, 5 asked"):
            db.add_many([(f"x{i}", v) for i, v in enumerate(rng.normal(size=(5, 1024)))])
        assert len(db) == 60 and engine.version == version
        db.remove("p3")
        db.add("x", rng.normal(size=1024))
        assert len(db) == 60 and "p3" not in db.labels


@pytest.mark.parametrize("source,target", [(1024, 256), (1024, 512), (256, 1024), (512, 256)])
def test_persistence_round_trip_across_templates(bank, tmp_path, source, target):
    keys = sorted(bank)[:40]
    path = tmp_path / "db.npz"
    queries = [bank[k] for k in sorted(bank)[40:56]]
    with MatMulEngine.from_template(source, backend="cpu") as a, \
            MatMulEngine.from_template(target, backend="cpu") as b:
        first = EmbeddingSimilarity(a, 1024)
        first.add_many([(f"{k[0]}/{k[1]}", bank[k]) for k in keys])
        assert first.save(path) == 40
        second = EmbeddingSimilarity(b, 1024)
        assert second.load(path) == 40 and second.labels == first.labels
        for q in queries:
            x, y = first.query(q, top_k=3, bound=True), second.query(q, top_k=3, bound=True)
            if x[0].label != y[0].label:  # a tie within both bounds
                assert abs(x[0].score - y[0].score) <= x[0].bound + y[0].bound
            assert abs(x[0].score - y[0].score) <= x[0].bound + y[0].bound


def test_load_refuses_other_dimension_or_too_many_entries_and_keeps_the_old(tmp_path):
    rng = np.random.default_rng(1)
    with MatMulEngine.from_template(1024, backend="cpu") as big, \
            MatMulEngine.from_template(256, backend="cpu") as small:
        many = EmbeddingSimilarity(big, 1024)
        many.add_many([(f"p{i}", v) for i, v in enumerate(rng.normal(size=(100, 1024)))])
        many.save(tmp_path / "many.npz")
        target = EmbeddingSimilarity(small, 1024)
        target.add("keep", rng.normal(size=1024))
        with pytest.raises(InputError, match="holds 100 entries, this template's capacity is 64"):
            target.load(tmp_path / "many.npz")
        with MatMulEngine.from_template(512, backend="cpu") as other:
            narrow = EmbeddingSimilarity(other, 512)
            narrow.add("n", rng.normal(size=512))
            narrow.save(tmp_path / "narrow.npz")
        with pytest.raises(InputError, match="holds 512-d embeddings, this database 1024-d"):
            target.load(tmp_path / "narrow.npz")
        (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 truncated")
        with pytest.raises(InputError, match=r"embedding database file .* not a readable \.npz"):
            target.load(tmp_path / "junk.npz")
        # A header declaring a 40 GB array in a few bytes is refused before anything is allocated.
        huge = bad_files.lying_npz(tmp_path / "huge.npz", ("embeddings", "meta"))
        tracemalloc.start()
        try:
            with pytest.raises(InputError, match="header declares"):
                target.load(huge)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 16 << 20, f"{peak} bytes allocated reading a lying header"
        assert target.labels == ["keep"]


def test_read_changes_nothing_and_replace_takes_only_its_own_databases_read(tmp_path):
    """``load`` = ``read`` (the file, no lock, nothing changed) + ``replace`` (the swap): what the
    recognition node's ``~/load`` runs outside / inside its frame lock. A read made for another database
    (another engine's scales) is refused by ``replace``."""
    rng = np.random.default_rng(6)
    with MatMulEngine.from_template(256, backend="cpu") as a, \
            MatMulEngine.from_template(256, backend="cpu") as b, \
            MatMulEngine.from_template(256, backend="cpu") as c:
        source = EmbeddingSimilarity(a, 1024)
        source.add_many([("x", rng.normal(size=1024)), ("y", rng.normal(size=1024))])
        source.save(tmp_path / "db.npz")
        target, other = EmbeddingSimilarity(b, 1024), EmbeddingSimilarity(c, 1024)
        target.add("keep", rng.normal(size=1024))
        version = b.version
        loaded = target.read(tmp_path / "db.npz")
        assert loaded.count == 2 and target.labels == ["keep"] and b.version == version  # nothing changed
        with pytest.raises(InputError, match="read for another embedding database"):
            other.replace(loaded)
        assert target.replace(loaded) == 2 and target.labels == ["x", "y"] and b.version == version + 1
        probe = rng.normal(size=1024)
        assert target.query(probe, top_k=2) == source.query(probe, top_k=2)


def test_huge_metadata_is_refused_before_it_is_decoded(tmp_path):
    """Issue 30 item 4: a database whose metadata is a huge string (100 MB: 1.16 GB, the recognition node
    1.18 GB under ~/load) is refused from its npy header, before the string is read or decoded."""
    import json

    from libredgetpu_ros.robotics.embedding import DATABASE_FORMAT

    rng = np.random.default_rng(2)
    meta = json.dumps({"format": DATABASE_FORMAT, "embedding_dim": 256, "labels": ["a"],
                       "pad": "x" * (20 << 20)})  # 80 MB as a NumPy string (4 bytes a character)
    path = tmp_path / "fat.npz"
    np.savez_compressed(path, embeddings=rng.normal(size=(1, 256)).astype(np.float32), meta=np.array(meta))
    del meta
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        db = EmbeddingSimilarity(engine, 256)
        db.add("keep", rng.normal(size=256))
        tracemalloc.start()
        try:
            with pytest.raises(InputError, match=r"member 'meta.npy': \d+ bytes of array, more than the "
                                                 r"\d+ accepted for it"):
                db.load(path)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20, f"{peak} bytes allocated refusing the metadata"
        assert db.labels == ["keep"]


def test_embeddings_beyond_the_capacity_are_refused_before_they_are_read(tmp_path):
    """A database of 100 MB of embeddings (deflated to ~100 KB) for a 256-entry template: refused from the
    array's header (at most capacity x D float64), not read whole and then found too large (before: the
    whole array was read within the 512 MiB file budget, then refused by the capacity check)."""
    import io
    import json
    import zipfile

    from libredgetpu_ros.robotics.embedding import DATABASE_FORMAT

    rows = 100 * 2**20 // (256 * 4)  # 102,400 float32 rows of 256
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (rows, 256)})
    meta = io.BytesIO()
    np.save(meta, np.array(json.dumps({"format": DATABASE_FORMAT, "embedding_dim": 256,
                                       "labels": ["x"] * rows})))
    path = tmp_path / "wide.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("embeddings.npy", "w", force_zip64=True) as member:
            member.write(header.getvalue())
            chunk = bytes(1 << 20)
            for _ in range(100):
                member.write(chunk)
        archive.writestr("meta.npy", meta.getvalue())
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        db = EmbeddingSimilarity(engine, 256)
        db.add("keep", np.random.default_rng(5).normal(size=256))
        tracemalloc.start()
        try:
            with pytest.raises(InputError, match=r"member 'embeddings.npy': 104857600 bytes of array, more "
                                                 r"than the 524288 accepted"):
                db.load(path)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20, f"{peak} bytes allocated refusing the embeddings"
        assert db.labels == ["keep"]


def test_a_failed_save_leaves_the_old_file_whole(tmp_path, monkeypatch):
    """save() writes through atomicio: a write that fails half-way (disk full) keeps the previous file, no
    temporary is left, and a folder that does not exist is a typed OutputError."""
    from libredgetpu_ros.errors import OutputError

    with MatMulEngine.from_template(256, backend="cpu") as engine:
        db = EmbeddingSimilarity(engine, 1024)
        db.add("first", np.ones(1024))
        path = tmp_path / "db.npz"
        db.save(path)
        before = path.read_bytes()
        db.add("second", -np.ones(1024))

        monkeypatch.setattr(np, "savez", bad_files.disk_full_savez)
        with pytest.raises(OutputError, match="No space left on device"):
            db.save(path)
        monkeypatch.undo()
        assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["db.npz"]
        with pytest.raises(OutputError):
            db.save(tmp_path / "missing" / "db.npz")


def test_queries_never_see_a_half_updated_database():
    rng = np.random.default_rng(2)
    base = rng.normal(size=1024)
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        db = EmbeddingSimilarity(engine, 1024)
        db.add_many([("gen0", base)] * 8)
        stop, seen, errors, queries = threading.Event(), set(), [], [0]

        def reader() -> None:
            while not stop.is_set():
                matches = db.query(base + rng.normal(size=1024) * 0.01, top_k=10)
                queries[0] += 1
                seen.update(m.label for m in matches)
                # A label whose rows were not (or no longer) in the weights would score ~0.
                if not matches or any(m.score < 0.9 for m in matches):
                    errors.append(matches)

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            for gen in range(1, 30):
                db.add_many([(f"gen{gen}", base)] * 8)
                before = queries[0]
                end = time.monotonic() + 10
                while queries[0] < before + 2 and time.monotonic() < end:  # let queries overlap each swap
                    time.sleep(0.0005)
                db.remove(f"gen{gen - 1}")
        finally:
            stop.set()
            thread.join()
        assert errors == [] and len(seen) > 3


def test_bad_input_is_refused(extractor, tmp_path):
    with MatMulEngine.from_template(256, backend="cpu") as engine:
        db = EmbeddingSimilarity(engine, 1024)
        assert db.query(np.ones(1024)) == []
        db.add("a", np.ones(1024))
        for vector, message in ((np.ones(1000), "1000 values"), (np.zeros(1024), "all zeros"),
                                (np.full(1024, np.nan), "NaN")):
            with pytest.raises(InputError, match=message):
                db.add("b", vector)
            with pytest.raises(InputError, match=message):
                db.query(vector)
        for label in ("", "  ", 5, "x" * 300, "a\x00b", "a\nb", "tab\there", "\x1b[31mred", "a\u202eb",
                      "zero\u200bwidth", " padded", UNKNOWN):
            with pytest.raises(InputError, match="label"):
                db.add(label, np.ones(1024))
        with pytest.raises(InputError, match="label") as refused:
            db.remove("y" * 100_000)
        assert len(str(refused.value)) < 200  # a huge label is never echoed whole
        decomposed = "cafe\u0301"  # NFD: stored and found as the NFC "caf\u00e9"
        db.add(decomposed, np.arange(1024.0))
        assert "caf\u00e9" in db.labels and db.remove("caf\u00e9") == 1
        with pytest.raises(InputError, match="no entry labelled 'zzz'"):
            db.remove("zzz")
        with pytest.raises(InputError, match="top_k"):
            db.query(np.ones(1024), top_k=0)
        assert db.labels == ["a"]
    with pytest.raises(ConfigError):
        EmbeddingSimilarity(MatMulEngine.from_template(256, backend="cpu"), 0)
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(ImageError, match="cannot be decoded"):
        load_image(bad)
    with pytest.raises(InputError, match="region"):
        extractor.embed(np.zeros((100, 100, 3), np.uint8), region=(50, 50, 80, 10))
    assert extractor.embed(np.zeros((100, 100, 3), np.uint8), region=(10, 10, 50, 50)).shape == (1024,)
