"""``libredgetpu-ros infer``: run a model on one image, on the Edge TPU or the CPU, and report the results."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from libredgetpu_ros.backend_kinds import BACKEND_KINDS

HELP = "run a model on one image (pose / segment / detect / classify) on the Edge TPU or the CPU"
EXAMPLES = (
    "libredgetpu-ros infer --model mobilenet_v1_0.25_128 --labels mobilenet_v1_0.25_128 --image cat.jpg",
    "libredgetpu-ros infer --model posenet_mobilenet_v1_075_481_641 --image people.jpg --annotate out.png",
    "libredgetpu-ros infer --model deeplabv3_mnv2_pascal --image street.jpg --mask-out mask.png",
    "libredgetpu-ros infer --model model_edgetpu.tflite --image frame.png --json   # any compiled model path",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True,
                        help="compiled *_edgetpu.tflite; segments of a pipelined model as 'seg0,seg1'")
    parser.add_argument("--cpu-model", help="CPU twin for the CPU backend (default: name without _edgetpu)")
    parser.add_argument("--image", required=True,
                        help="image file (PNG, JPEG, BMP, TIFF, WebP, PNM; at most 4096x4096 pixels)")
    parser.add_argument("--backend", choices=BACKEND_KINDS, default="auto",
                        help="auto = the Edge TPU if one is attached, else the CPU (default)")
    parser.add_argument("--device", help="which Edge TPU (index or USB bus path) for the edgetpu backend")
    parser.add_argument("--task", choices=("auto", "pose", "segment", "detect", "classify"), default="auto",
                        help="what the model does (default: read from the model)")
    parser.add_argument("--labels", help="label file (one per line, or 'id label')")
    parser.add_argument("--threshold", type=float, help="minimum score of poses / detections / classes")
    parser.add_argument("--top-k", type=int, default=5, help="classes to report (classification; default 5)")
    parser.add_argument("--max-results", type=int, help="at most this many poses / detections")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--annotate", metavar="OUT.png", help="write the image with the results drawn on it")
    parser.add_argument("--mask-out", metavar="MASK.png", help="write the class-id mask (uint8 PNG)")


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.errors import InputError
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

    rgb = load_image(args.image)
    cfg = PipelineConfig(model=args.model, cpu_model=args.cpu_model, backend=args.backend, device=args.device,
                         task=args.task, labels=args.labels, score_threshold=args.threshold,
                         max_results=args.max_results, top_k=args.top_k)
    with PerceptionPipeline.from_config(cfg) as pipeline:
        if args.mask_out and pipeline.task != "segment":
            raise InputError(f"--mask-out needs a segmentation model; this one does {pipeline.task!r}")
        result = pipeline.process(rgb)
        labels = pipeline.labels
        description = pipeline.describe()

    if args.annotate:
        from libredgetpu_ros.perception.draw import annotate

        _write_png(Path(args.annotate), annotate(rgb, result, labels), rgb_image=True)
    if args.mask_out:
        _write_png(Path(args.mask_out), result.mask, rgb_image=False)

    report = result.to_dict(labels)
    if args.json:
        report["model"] = description["models"]
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_text(report, description)
    return 0


def _write_png(path: Path, image: Any, rgb_image: bool) -> None:
    import cv2

    from libredgetpu_ros.errors import InputError

    data = cv2.cvtColor(image, cv2.COLOR_RGB2BGR) if rgb_image else image
    try:
        ok = cv2.imwrite(str(path), data)
    except cv2.error as exc:
        raise InputError(f"cannot write {path}: {exc}") from exc
    if not ok:
        raise InputError(f"cannot write {path} (missing folder, or not a .png/.jpg name?)")


def _print_text(report: dict[str, Any], description: dict[str, Any]) -> None:
    size = report["image_size"]
    print(f"{report['task']} on {report['backend']} | model input {description['input_size'][0]}x"
          f"{description['input_size'][1]} | image {size['width']}x{size['height']}")
    for i, pose in enumerate(report.get("poses", [])):
        print(f"pose {i}: score {pose['score']:.3f}")
        for name, kp in pose["keypoints"].items():
            print(f"  {name:<15} x {kp['x']:8.1f}  y {kp['y']:8.1f}  score {kp['score']:.3f}")
    for det in report.get("detections", []):
        box = det["box"]
        print(f"{det['label']:<20} {det['score']:.3f}  box ({box['xmin']:.0f}, {box['ymin']:.0f}) - "
              f"({box['xmax']:.0f}, {box['ymax']:.0f})")
    for cls in report.get("classes", []):
        print(f"{cls['score']:.4f}  {cls['label']} (id {cls['class_id']})")
    if "segmentation" in report:
        total = size["width"] * size["height"]
        for label, count in report["segmentation"]["histogram"].items():
            print(f"{label:<20} {count:9d} px  {100.0 * count / total:5.1f} %")
    if not any(report.get(k) for k in ("poses", "detections", "classes", "segmentation")):
        print("nothing found")
    timings = report["timings_ms"]
    print("timings (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
