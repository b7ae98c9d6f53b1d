"""Detection on the CPU fallback against LiteRT's full CPU model, on photos no detection test uses.

    .venv/bin/python bench/bench_detect.py  ->  bench/results/detect.md

Model: catalogue ``ssd_mobilenet_v2_coco`` (the fixtures' single-file pair). Photos: scikit-image's sample
photos (in the pinned wheel; no detection test uses them, scenes/ uses some as textures). For each photo,
``libredgetpu-ros infer --json --backend cpu`` (the CPU twin cut at the Edge TPU boundary, then our SSD decode
+ NMS) is compared with LiteRT running the complete CPU model, TFLite_Detection_PostProcess included, on the
photo resized to 300x300 by OpenCV's INTER_AREA (the pipeline's resize for shrinking): detections above 0.3,
same classes in the same order, box corners in image pixels, scores. Then thread CPU time of one frame both
ways (LiteRT with one thread), interleaved, median and spread of the repeats, and the ratio.
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
import time
from pathlib import Path

import cv2
import numpy as np
from _timing import write_report  # beside this script (run as a script: its folder is on sys.path)
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.cli.main import main as cli
from libredgetpu_ros.fixtures import fixture
from libredgetpu_ros.perception.images import load_image
from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

OUT = Path(__file__).resolve().parent / "results" / "detect.md"
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png", "rocket.jpg")
THRESHOLD = 0.3
REPEATS = 15
COMPILED = fixture("ssd/mobilenet_ssd_v2_coco_quant_postprocess_edgetpu.tflite")
FULL_CPU = fixture("ssd/mobilenet_ssd_v2_coco_quant_postprocess.tflite")
LABELS = fixture("labels/coco_labels_edgetpu_2019.txt")


def photos() -> list[Path]:
    import skimage

    folder = Path(skimage.__file__).parent / "data"
    return [folder / name for name in PHOTOS]


def ours(photo: Path) -> list[tuple[int, str, float, tuple[float, ...]]]:
    """``libredgetpu-ros infer --json`` on the CPU backend."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli(["infer", "--model", str(COMPILED), "--image", str(photo), "--backend", "cpu",
                    "--labels", str(LABELS), "--threshold", str(THRESHOLD), "--json"])
    assert code == 0, code
    found = json.loads(out.getvalue())["detections"]
    return [(d["class_id"], d["label"], d["score"],
             tuple(d["box"][k] for k in ("xmin", "ymin", "xmax", "ymax"))) for d in found]


def litert(interpreter: Interpreter, rgb: np.ndarray) -> list[tuple[int, float, tuple[float, ...]]]:
    h, w = rgb.shape[:2]
    resized = cv2.resize(rgb, (300, 300), interpolation=cv2.INTER_AREA)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], resized[None])
    interpreter.invoke()
    boxes, classes, scores, count = (interpreter.get_tensor(d["index"])
                                     for d in interpreter.get_output_details())
    found = []
    for i in range(int(count[0])):
        if scores[0, i] < THRESHOLD:
            continue
        ymin, xmin, ymax, xmax = (float(v) for v in np.clip(boxes[0, i], 0.0, 1.0))
        found.append((int(classes[0, i]), float(scores[0, i]), (xmin * w, ymin * h, xmax * w, ymax * h)))
    return found


def thread_ms(fn) -> float:
    start = time.thread_time_ns()
    fn()
    return (time.thread_time_ns() - start) / 1e6


def main() -> int:
    interpreter = Interpreter(model_path=str(FULL_CPU), num_threads=1)
    interpreter.allocate_tensors()
    lines = ["# Detection: CPU fallback vs LiteRT's full CPU model", "",
             "`bench/bench_detect.py`: catalogue model `ssd_mobilenet_v2_coco`, scikit-image's sample "
             "photos (no detection test uses them). *Ours*: `libredgetpu-ros infer --backend cpu --json` "
             "(LiteRT on the CPU twin cut where the Edge TPU op ends, then our SSD box decoding + NMS). "
             "*LiteRT*: the complete CPU model, TFLite_Detection_PostProcess included, on the same photo "
             "resized by "
             f"OpenCV's INTER_AREA. Detections with score >= {THRESHOLD}; box error = largest difference of "
             "a corner coordinate, in pixels of the photo.", "",
             "| photo | size | detections (ours) | same classes, same order | max box error px | "
             "max score error |", "|---|---|---|---|---:|---:|"]
    worst_box = worst_score = 0.0
    all_same = True
    for photo in photos():
        rgb = load_image(photo)
        a, b = ours(photo), litert(interpreter, rgb)
        same = [d[0] for d in a] == [d[0] for d in b]
        all_same &= same
        pairs = list(zip(a, b, strict=True)) if same else []  # compared one to one when the classes agree
        box_err = max((float(np.max(np.abs(np.subtract(x[3], y[2])))) for x, y in pairs), default=0.0)
        score_err = max((abs(x[2] - y[1]) for x, y in pairs), default=0.0)
        worst_box, worst_score = max(worst_box, box_err), max(worst_score, score_err)
        names = ", ".join(f"{d[1]} {d[2]:.2f}" for d in a) or "none"
        verdict = "yes" if same else "NO"
        lines.append(f"| {photo.name} | {rgb.shape[1]}x{rgb.shape[0]} | {names} | {verdict} | "
                     f"{box_err:.2f} | {score_err:.4f} |")
    lines += ["", f"All photos: same classes {'yes' if all_same else 'NO'}, largest box error "
              f"{worst_box:.2f} px (bound 2), largest score error {worst_score:.4f} (bound 0.02).", ""]

    # One frame both ways, thread CPU time, interleaved so the machine's load hits both alike.
    rgb = load_image(photos()[0])
    config = PipelineConfig(model=str(COMPILED), backend="cpu", labels=str(LABELS), score_threshold=THRESHOLD,
                            cpu_threads=1)
    with PerceptionPipeline.from_config(config) as pipeline:
        pipeline.process(rgb)
        litert(interpreter, rgb)
        mine, theirs = [], []
        for _ in range(REPEATS):
            mine.append(thread_ms(lambda: pipeline.process(rgb)))
            theirs.append(thread_ms(lambda: litert(interpreter, rgb)))
    spread = (f"{min(mine):.1f}-{max(mine):.1f}", f"{min(theirs):.1f}-{max(theirs):.1f}")
    lines += ["## One frame, thread CPU time (ms)", "",
              f"{REPEATS} interleaved repeats on astronaut.png (512x512), LiteRT with one thread both ways, "
              "on a shared 2-core machine with other jobs running (thread CPU time counts this thread "
              "only).", "",
              "| path | median | min-max | ratio of medians |", "|---|---:|---:|---:|",
              f"| ours: resize + cut twin + SSD decode/NMS | {statistics.median(mine):.1f} | {spread[0]} | "
              f"{statistics.median(mine) / statistics.median(theirs):.3f} |",
              "| LiteRT full model: resize + invoke (PostProcess op inside) | "
              f"{statistics.median(theirs):.1f} | {spread[1]} | 1 |"]
    write_report(OUT, lines)
    return 0 if all_same and worst_box <= 2.0 and worst_score <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
