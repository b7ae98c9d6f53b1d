"""Time each CPU post-processor next to LiteRT running the same op chain, in the same run.

    .venv/bin/python bench/bench_postprocess.py  ->  bench/results/postprocess.md

PoseNet: our decoder on the boundary tensors of test_couple.jpg (LiteRT cannot run PosenetDecoderOp, so the
baseline column shows LiteRT's backbone for scale). SSD: our decoder vs LiteRT invoking the CPU head model
(RESHAPE/CONCATENATION/LOGISTIC/TFLite_Detection_PostProcess) on the same random raw inputs. DeepLab: our tail
vs LiteRT's full CPU model minus the same model cut at the Edge TPU boundary. Classification: top-5 only.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.backends.twin import cut_at_tensors
from libredgetpu_ros.fixtures import fixture
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.postprocess.classify import Classifier
from libredgetpu_ros.postprocess.deeplab import DeepLabTail
from libredgetpu_ros.postprocess.posenet import PoseDecoder
from libredgetpu_ros.postprocess.ssd import SsdDecoder

REPEATS = 30
OUT = Path(__file__).resolve().parent / "results" / "postprocess.md"


def median_ms(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


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
    return median_ms(lambda: decoder.decode(outputs)), median_ms(invoke_fn(interpreter), 5)


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
    ours = median_ms(lambda: tail(outputs), 15)
    litert_tail = median_ms(invoke_fn(full), 15) - median_ms(invoke_fn(cut), 15)
    return ours, litert_tail


def bench_classify() -> float:
    model = load_model(fixture("classify/mobilenet_v2_1.0_224_quant.tflite"))
    classifier = Classifier.from_model(model, labels=fixture("labels/imagenet_labels.txt"))
    raw = np.random.default_rng(0).integers(0, 256, size=(1, classifier.num_classes), dtype=np.uint8)
    return median_ms(lambda: classifier.top_k({classifier.input_names[0]: raw}, k=5), 200)


def main() -> int:
    warnings.simplefilter("ignore")
    pose_ms, backbone_ms = bench_posenet()
    ssd_ms, ssd_litert = bench_ssd()
    deeplab_ms, deeplab_litert = bench_deeplab()
    classify_ms = bench_classify()
    rows = [
        ("PoseNet decode (test_couple.jpg, 2 poses)", pose_ms, None, "<= 2 ms",
         f"LiteRT backbone to the boundary: {backbone_ms:.1f} ms"),
        ("SSD decode + fast NMS (head, 1917 anchors)", ssd_ms, ssd_litert, "<= 1.5x LiteRT", ""),
        ("DeepLab CPU tail (513x513, 1 thread LiteRT)", deeplab_ms, deeplab_litert, "<= 1.0x LiteRT",
         "LiteRT = full model - model cut at the boundary"),
        ("Classification top-5 (1001 classes)", classify_ms, None, "", ""),
    ]
    lines = [
        "# Post-processing benchmark",
        "",
        f"`{' '.join(sys.argv)}`; median of repeated runs, milliseconds, this machine (2 shared cores), "
        "LiteRT measured in the same run.",
        "",
        "| step | ours (ms) | LiteRT same ops (ms) | ratio | target | note |",
        "|---|---:|---:|---:|---|---|",
    ]
    for name, ours, base, target, note in rows:
        base_s = f"{base:.2f}" if base is not None else "n/a"
        ratio = f"{ours / base:.2f}x" if base else "n/a"
        lines.append(f"| {name} | {ours:.2f} | {base_s} | {ratio} | {target} | {note} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
