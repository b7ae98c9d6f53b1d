"""CPU backend overhead vs a bare LiteRT invoke, and per-stage times of the full perception pipeline.

Run: ``.venv/bin/python bench/bench_backends.py [--repeats N]``; writes bench/results/backends.md.

Baseline: LiteRT on the same cut twin bytes, doing only set_tensor / invoke / get_tensor per output. Both are
measured interleaved in the same run so machine load affects them alike; the report gives medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter
from libredgetpu_ros.backends.cpu import CpuBackend
from libredgetpu_ros.fixtures import fixture
from libredgetpu_ros.perception.images import load_image
from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

MODELS = {
    "PoseNet 481x641": ("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite",
                        "images/test_couple.jpg", None),
    "DeepLab v3 513": ("deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite", "images/grace_hopper.bmp",
                       "labels/pascal_voc_segmentation_labels.txt"),
    "MobileNet v1 0.25 128": ("classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite", "images/cat.bmp",
                              "labels/imagenet_labels.txt"),
    "MobileNet v2 224": ("classify/mobilenet_v2_1.0_224_quant_edgetpu.tflite", "images/cat.bmp",
                         "labels/imagenet_labels.txt"),
}
OUT = Path(__file__).resolve().parent / "results" / "backends.md"


def bench_overhead(model: str, repeats: int) -> tuple[float, float]:
    """(median ms of CpuBackend.run, median ms of the bare LiteRT sequence)."""
    backend = CpuBackend()
    backend.load(fixture(model))
    bare = Interpreter(model_content=backend.twin.content)
    bare.allocate_tensors()
    in_index = bare.get_input_details()[0]["index"]
    out_indices = [d["index"] for d in bare.get_output_details()]
    x = np.random.default_rng(0).integers(0, 256, backend.boundary.inputs[0].shape, dtype=np.uint8)
    ours, base = [], []
    for _ in range(3):  # warm-up
        backend.run([x])
        bare.set_tensor(in_index, x)
        bare.invoke()
    def run_ours() -> float:
        t0 = time.perf_counter()
        backend.run([x])
        return (time.perf_counter() - t0) * 1e3

    def run_bare() -> float:
        t0 = time.perf_counter()
        bare.set_tensor(in_index, x)
        bare.invoke()
        [bare.get_tensor(i) for i in out_indices]
        return (time.perf_counter() - t0) * 1e3

    for i in range(repeats):  # alternate which goes first so neither gets a systematically warmer cache
        if i % 2:
            ours.append(run_ours())
            base.append(run_bare())
        else:
            base.append(run_bare())
            ours.append(run_ours())
    backend.close()
    return statistics.median(ours), statistics.median(base)


def bench_pipeline(model: str, image: str, labels: str | None, repeats: int) -> dict[str, float]:
    cfg = PipelineConfig(model=fixture(model), backend="cpu", labels=fixture(labels) if labels else None)
    rgb = load_image(fixture(image))
    stages: dict[str, list[float]] = {}
    with PerceptionPipeline.from_config(cfg) as pipeline:
        pipeline.process(rgb)
        for _ in range(repeats):
            for key, value in pipeline.process(rgb).timings.items():
                stages.setdefault(key, []).append(value)
    return {k: statistics.median(v) for k, v in stages.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    lines = ["# CPU backend benchmark", "",
             "`bench/bench_backends.py`, LiteRT (XNNPACK) on this machine, medians of "
             f"{args.repeats} runs. Ratio = `CpuBackend.run` / bare LiteRT set_tensor+invoke+get_tensor on "
             "the same cut twin, measured interleaved in the same run (target <= 1.05).", "",
             "| model | CpuBackend.run ms | bare LiteRT ms | ratio |", "|---|---:|---:|---:|"]
    for label, (model, _, _) in MODELS.items():
        ours, base = bench_overhead(model, args.repeats)
        lines.append(f"| {label} | {ours:.2f} | {base:.2f} | {ours / base:.3f} |")
        print(lines[-1], flush=True)
    lines += ["", "## Full pipeline on the CPU backend (ms per frame)", "",
              "| model (image) | preprocess | inference | postprocess | total |", "|---|---:|---:|---:|---:|"]
    for label, (model, image, labels) in MODELS.items():
        try:
            t = bench_pipeline(model, image, labels, args.repeats)
        except ImportError as exc:  # a post-processor not in this build yet
            lines.append(f"| {label} ({Path(image).name}) | n/a: {exc} | | | |")
        else:
            lines.append(f"| {label} ({Path(image).name}) | {t['preprocess']:.2f} | {t['inference']:.2f} | "
                         f"{t['postprocess']:.2f} | {t['total']:.2f} |")
        print(lines[-1], flush=True)
    lines += ["", "The machine is shared (2 cores, other jobs running), so absolute times vary between runs; "
              "the ratio is the number to read.", ""]
    OUT.write_text("\n".join(lines))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
