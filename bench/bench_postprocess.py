"""Time each CPU post-processor next to LiteRT running the same op chain, in the same run.

    .venv/bin/python bench/bench_postprocess.py [--baseline REV ...]  ->  bench/results/postprocess.md

With ``--baseline REV`` (repeatable) the package as of each git revision REV is extracted to a temporary
directory and all versions run in child processes, alternately, ``--rounds`` times each (interleaved, so load
on the shared machine hits them alike); every step reports the best of the per-round medians. Children run
with one BLAS thread (LiteRT is timed with one thread too).

PoseNet: our decoder on the boundary tensors of test_couple.jpg (LiteRT cannot run PosenetDecoderOp, so the
baseline column shows LiteRT's backbone for scale). SSD: our decoder vs LiteRT invoking the CPU head model
(RESHAPE/CONCATENATION/LOGISTIC/TFLite_Detection_PostProcess) on the same random raw inputs. DeepLab: our tail
vs LiteRT's full CPU model minus the same model cut at the Edge TPU boundary. Classification: top-5 only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from _revisions import package_at  # beside this script (run as a script: its folder is on sys.path)
from _timing import median_ns, ratio, write_report
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.backends.twin import cut_at_tensors
from libredgetpu_ros.fixtures import fixture
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.postprocess.classify import Classifier
from libredgetpu_ros.postprocess.deeplab import DeepLabTail
from libredgetpu_ros.postprocess.posenet import PoseDecoder
from libredgetpu_ros.postprocess.ssd import SsdDecoder

REPEATS = 30
POSENET_REPEATS = 100  # ~1 ms each: more calls cost little and steady the median
OUT = Path(__file__).resolve().parent / "results" / "postprocess.md"


def median_ms(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    """Median CPU time of the calling thread (everything here runs single-threaded in it), so that the load
    other jobs put on the shared cores does not count; wall time on an idle core is the same."""
    return median_ns(fn, repeats) / 1e6


def rgb(name: str, size: tuple[int, int], interpolation: int = cv2.INTER_LINEAR) -> np.ndarray:
    image = cv2.cvtColor(cv2.imread(str(fixture(f"images/{name}"))), cv2.COLOR_BGR2RGB)
    return cv2.resize(image, size, interpolation=interpolation)


def invoke_fn(interpreter: Interpreter) -> Callable[[], None]:
    return interpreter.invoke


def bench_posenet() -> tuple[float, float]:
    path = fixture("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder.tflite")
    decoder = PoseDecoder.from_model(load_model(path))
    content, _, _ = cut_at_tensors(path.read_bytes(), decoder.input_names)
    interpreter = Interpreter(model_content=content)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"],
                           rgb("test_couple.jpg", (641, 481), cv2.INTER_NEAREST_EXACT)[None])
    interpreter.invoke()
    outputs = {d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}
    return median_ms(lambda: decoder.decode(outputs), POSENET_REPEATS), median_ms(invoke_fn(interpreter), 5)


def bench_ssd() -> tuple[float, float]:
    path = fixture("ssd/ssd_mobilenet_v1_coco_quant_postprocess_head_layers.tflite")
    decoder = SsdDecoder.from_model(load_model(path))
    interpreter = Interpreter(str(path))
    interpreter.allocate_tensors()
    rng = np.random.default_rng(0)
    feed = {}
    for d in interpreter.get_input_details():
        raw = rng.integers(0, 160 if "Class" in d["name"] else 256, size=d["shape"], dtype=np.uint8)
        if "Class" in d["name"]:
            hot = rng.random(d["shape"]) < 0.002
            raw[hot] = rng.integers(190, 256, size=int(hot.sum()), dtype=np.uint8)
        feed[d["name"]] = raw
        interpreter.set_tensor(d["index"], raw)
    ours = median_ms(lambda: decoder.decode_raw(feed), 200)
    litert = median_ms(invoke_fn(interpreter), 200)
    return ours, litert


def bench_deeplab() -> tuple[float, float]:
    compiled = load_model(fixture("deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite"))
    tail = DeepLabTail.from_model(compiled)
    twin = fixture("deeplab/deeplabv3_mnv2_pascal_quant.tflite")
    full = Interpreter(str(twin), num_threads=1)
    full.allocate_tensors()
    content, _, _ = cut_at_tensors(twin.read_bytes(), tail.input_names)
    cut = Interpreter(model_content=content, num_threads=1)
    cut.allocate_tensors()
    image = rgb("grace_hopper.bmp", (513, 513))[None]
    for interpreter in (full, cut):
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], image)
    cut.invoke()
    outputs = {d["name"]: cut.get_tensor(d["index"]) for d in cut.get_output_details()}
    ours = median_ms(lambda: tail(outputs), 20)
    # Full and cut model alternate, so both see the same conditions; their difference is LiteRT's tail.
    full_ms, cut_ms = [], []
    for _ in range(20):
        full_ms.append(median_ms(invoke_fn(full), 1))
        cut_ms.append(median_ms(invoke_fn(cut), 1))
    return ours, statistics.median(full_ms) - statistics.median(cut_ms)


def bench_classify() -> float:
    model = load_model(fixture("classify/mobilenet_v2_1.0_224_quant.tflite"))
    classifier = Classifier.from_model(model, labels=fixture("labels/imagenet_labels.txt"))
    raw = np.random.default_rng(0).integers(0, 256, size=(1, classifier.num_classes), dtype=np.uint8)
    return median_ms(lambda: classifier.top_k({classifier.input_names[0]: raw}, k=5), 200)


STEPS = ("posenet", "ssd", "ssd_litert", "deeplab", "deeplab_litert", "classify", "backbone")


def measure() -> dict[str, float]:
    warnings.simplefilter("ignore")
    pose_ms, backbone_ms = bench_posenet()
    ssd_ms, ssd_litert = bench_ssd()
    deeplab_ms, deeplab_litert = bench_deeplab()
    return dict(zip(STEPS, (pose_ms, ssd_ms, ssd_litert, deeplab_ms, deeplab_litert, bench_classify(),
                            backbone_ms), strict=True))


def run_child(package_root: Path | None) -> dict[str, float]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if package_root is not None:
        env["PYTHONPATH"] = str(package_root)
    out = subprocess.run([sys.executable, __file__, "--child"], env=env, check=True, capture_output=True,
                         text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    origin = result.pop("package")
    expected = str(package_root) if package_root is not None else str(Path(__file__).resolve().parents[1])
    if not origin.startswith(expected):
        raise RuntimeError(f"child imported libredgetpu_ros from {origin}, expected under {expected}")
    return result


def best_of(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: min(r[k] for r in rounds) for k in rounds[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", action="append", default=[],
                        help="git revision to compare against (repeatable: one 'before' column each)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import libredgetpu_ros

        result = measure()
        result["package"] = str(Path(libredgetpu_ros.__file__).resolve())
        print(json.dumps(result))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        roots = {rev: package_at(rev, Path(tmp) / str(i)) for i, rev in enumerate(args.baseline)}
        now_rounds: list[dict[str, float]] = []
        base_rounds: dict[str, list[dict[str, float]]] = {rev: [] for rev in roots}
        for _ in range(args.rounds):
            for rev, root in roots.items():
                base_rounds[rev].append(run_child(root))
            now_rounds.append(run_child(None))
    now = best_of(now_rounds)
    bases = {rev: best_of(rounds) for rev, rounds in base_rounds.items()}
    rows = [
        ("PoseNet decode (test_couple.jpg, 2 poses)", "posenet", None, "<= 2 ms",
         f"LiteRT backbone to the boundary: {now['backbone']:.1f} ms"),
        ("SSD decode + fast NMS (head, 1917 anchors)", "ssd", "ssd_litert", "<= 1.5x LiteRT", ""),
        ("DeepLab CPU tail (513x513)", "deeplab", "deeplab_litert", "<= 1.0x LiteRT",
         "LiteRT = full model - model cut at the boundary"),
        ("Classification top-5 (1001 classes)", "classify", None, "", ""),
    ]
    before_cols = "".join(f" `{rev}` (ms) |" for rev in bases)
    last = args.baseline[-1] if args.baseline else None
    lines = [
        "# Post-processing benchmark",
        "",
        f"`{' '.join(['python', *sys.argv])}`; milliseconds, best of {args.rounds} interleaved rounds of "
        "per-round medians of thread CPU time, one BLAS and one LiteRT thread, 2 shared cores.",
        "",
        f"| step |{before_cols} now (ms) | now / `{last}` | LiteRT same ops (ms) | now / LiteRT | target "
        "| note |",
        "|---|" + "---:|" * (len(bases) + 4) + "---|---|",
    ]
    for name, key, litert_key, target, note in rows:
        before = "".join(f" {b[key]:.2f} |" for b in bases.values())
        speedup = ratio(now[key], bases[last][key], 2) if last else "n/a"
        litert = f"{now[litert_key]:.2f}" if litert_key else "n/a"
        vs_litert = ratio(now[key], now[litert_key], 2) if litert_key else "n/a"
        lines.append(f"| {name} |{before} {now[key]:.2f} | {speedup} | {litert} | {vs_litert} | {target} "
                     f"| {note} |")
    for rev in bases:
        sha = subprocess.run(["git", "rev-parse", "--short", rev], capture_output=True,
                             text=True).stdout.strip()
        lines.append(f"\n`{rev}` = {sha}; its per-round medians: " + ", ".join(
            f"{k} {[round(r[k], 2) for r in base_rounds[rev]]}" for k in ("posenet", "ssd", "deeplab")))
    lines += ["", "Per-round medians (now): " + ", ".join(
        f"{k} {[round(r[k], 2) for r in now_rounds]}" for k in ("posenet", "ssd", "deeplab"))]
    write_report(OUT, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
