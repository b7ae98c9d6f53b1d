"""Render docs/images/: what each node produces, drawn from the shared fixtures, and the bench charts.

    make pictures                                   # = .venv/bin/python tools/pictures.py
    .venv/bin/python tools/pictures.py --only detect pose --json
    .venv/bin/python tools/pictures.py --out /tmp/images     # render elsewhere (the test compares with docs/)

Node pictures are the nodes' own drawing on the frame they would get: ``perception.draw.annotate`` (the
perception node's ``annotated`` topic: PoseNet skeletons, SSD boxes, the DeepLab overlay, classes) on the
fixture photos, on the CPU backend; the tracker's and looming node's ``annotated`` drawings
(``ros/robotics/messages.py``) on rendered scenes with a known answer (``scenes/``: a red disc on a wall, a
camera approaching a textured target); the flow node's velocity as an arrow over the second frame of a
sideways-moving scene (the node publishes it as an rviz arrow marker; the picture draws the same vector).
Bench charts read ``bench/results/*.md``: for each row, the measured time as a ratio beside its anchor (the
baseline measured in the same run, 1.0) and the target line where the results state one.

The test ``libredgetpu_ros/test/tools/test_pictures.py`` renders everything again and compares it with the
committed files (tolerant to tiny raster differences), so a picture that no longer shows what the code
produces fails it. Needs the fixtures (``../shared/fixtures``) and matplotlib (pinned in
requirements.lock.txt).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images"
RESULTS = ROOT / "bench" / "results"
WIDTH = 480  # node pictures are scaled to this width (docs show them side by side)


# -- node pictures ------------------------------------------------------------------------------------------
def _perception(model: str, photo: str, labels: str | None = None, **options: object) -> np.ndarray:
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.perception.draw import annotate
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

    rgb = load_image(fixture(photo))
    config = PipelineConfig(model=str(fixture(model)), backend="cpu", cpu_threads=1,
                            labels=str(fixture(labels)) if labels else None, **options)
    with PerceptionPipeline.from_config(config) as pipeline:
        return annotate(rgb, pipeline.process(rgb), pipeline.labels)


def pose() -> np.ndarray:
    return _perception("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite",
                       "images/test_couple.jpg", score_threshold=0.35)


def detect() -> np.ndarray:
    return _perception("ssd/mobilenet_ssd_v2_coco_quant_postprocess_edgetpu.tflite",
                       "images/grace_hopper.bmp",
                       "labels/coco_labels_edgetpu_2019.txt", score_threshold=0.4)


def segment() -> np.ndarray:
    return _perception("deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite", "images/test_couple.jpg",
                       "labels/pascal_voc_segmentation_labels.txt")


def classify() -> np.ndarray:
    return _perception("classify/mobilenet_v2_1.0_224_quant_edgetpu.tflite", "images/cat.bmp",
                       "labels/imagenet_labels.txt", top_k=3)


def tracker() -> np.ndarray:
    from libredgetpu_ros.robotics.spot import SpotTracker
    from libredgetpu_ros.robotics.template import load_template
    from libredgetpu_ros.ros.robotics.messages import annotate_tracker
    from libredgetpu_ros.scenes.presets import spot_scene
    from libredgetpu_ros.scenes.textures import natural

    frame = spot_scene((220.0, 30.0, 30.0), 22.0, natural(3, 256), start_px=(70.0, -40.0), frames=1)[0]
    with SpotTracker(load_template("color_red_64x64"), backend="cpu") as spot:
        found = spot.track(frame.image)
        size = spot.width, spot.height
    return annotate_tracker(frame.image, found, *size)


def looming() -> np.ndarray:
    from libredgetpu_ros.robotics.looming import LoomingDetector
    from libredgetpu_ros.robotics.template import load_template
    from libredgetpu_ros.ros.robotics.messages import annotate_looming
    from libredgetpu_ros.scenes.presets import motion_scene
    from libredgetpu_ros.scenes.textures import checkerboard

    frames = motion_scene("approach", checkerboard(8, 256), size=(320, 240), target_m=1.0, start_m=3.0,
                          speed=1.0, frames=40)
    with LoomingDetector(load_template("looming_64x64_3x3"), backend="cpu") as detector:
        results = [detector.detect(f.image, f.stamp_s) for f in frames]
    return annotate_looming(frames[-1].image, results[-1])  # 1.3 s in, 1.7 s from contact: a TTC


def flow() -> np.ndarray:
    import cv2
    from libredgetpu_ros.robotics.flow import OpticalFlow
    from libredgetpu_ros.scenes.presets import motion_scene
    from libredgetpu_ros.scenes.textures import natural

    frames = motion_scene("lateral", natural(5, 256), size=(320, 240), start_m=3.0, speed=3.0, frames=2)
    with OpticalFlow.from_template("gabor_64x64_p4", backend="cpu") as estimator:
        estimator.step(frames[0].image, frames[0].stamp_s)
        found = estimator.step(frames[1].image, frames[1].stamp_s)
    out = frames[1].image.copy()
    h, w = out.shape[:2]
    centre = (w // 2, h // 2)
    gain = 8.0  # the arrow is 8x the per-frame motion so that a few pixels show
    tip = (round(centre[0] + gain * found.vx), round(centre[1] + gain * found.vy))
    colour = (255, 200, 0) if found.valid else (160, 160, 160)
    cv2.arrowedLine(out, centre, tip, colour, 3, tipLength=0.25)
    text = f"flow {found.vx:+.1f}, {found.vy:+.1f} px/frame" if found.valid else f"no flow ({found.reason})"
    cv2.putText(out, text, (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, colour, 1, cv2.LINE_AA)
    return out


NODE_PICTURES: dict[str, Callable[[], np.ndarray]] = {
    "pose": pose, "detect": detect, "segment": segment, "classify": classify,
    "tracker": tracker, "looming": looming, "flow": flow,
}


# -- bench charts -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Chart:
    """One table of a results file drawn as ratio bars beside their anchor (1.0)."""

    results: str  # file under bench/results/
    header: str  # text of the header row of the table (a column header it contains)
    label: str  # the row label: a format string over the row's cells by column header, "{model}"
    ratio: str  # column header of the ratio (ours / anchor)
    anchor: str  # what the ratio is relative to
    ours: str  # what was measured
    title: str
    target: float | None = None  # the results' target, as a ratio
    speedup: bool = False  # the ratio is anchor / ours (higher is faster), not ours / anchor


CHARTS: dict[str, Chart] = {
    "bench_backends": Chart("backends.md", "ratio (CPU medians)", "{model}", "ratio (CPU medians)",
                            "bare LiteRT invoke", "CpuBackend.run", "CPU backend overhead (thread CPU time)",
                            1.05),
    "bench_postprocess": Chart("postprocess.md", "now / LiteRT", "{step}", "now / LiteRT",
                               "LiteRT running the same ops", "our post-processing",
                               "Post-processing vs LiteRT (thread CPU time)"),
    "bench_detect": Chart("detect.md", "ratio of medians", "{path}", "ratio of medians",
                          "LiteRT full model", "cut twin + our SSD decode/NMS",
                          "Detection frame, CPU fallback"),
    "bench_matmul": Chart("matmul.md", "blob / copy", "Dense({N})", "blob / copy",
                          "np.copyto of the blob's bytes",
                          "parameter blob build", "MatMul weight swap: blob build vs a copy", 10.0),
    "bench_reservoir_embedding": Chart("reservoir_embedding.md", "LibrEdgeTPU / ours", "Dense({N})",
                                       "LibrEdgeTPU / ours", "LibrEdgeTPU quantize + blob", "our set_weights",
                                       "Weight swap: speed-up over LibrEdgeTPU", speedup=True),
    "bench_relayout": Chart("relayout.md", "before / now", "{layer}", "before / now",
                            "the relayout before", "the relayout now", "Edge TPU output relayout: speed-up",
                            speedup=True),
    "bench_textdata": Chart("textdata.md", "textdata / baseline", "{input}", "textdata / baseline",
                            "yaml.safe_load (pure Python)", "textdata (checked, budgets)",
                            "Reading user YAML/JSON with budgets"),
    "bench_bags": Chart("bags.md", "offline / pipeline", "{config}", "offline / pipeline (median)",
                        "the pipeline alone", "process-bag offline (rate)",
                        "process-bag: offline rate vs the pipeline's", speedup=True),
    "bench_femto": Chart("femto.md", "exact / dict", "{IOSpec}", "exact / dict", "a dict update per event",
                         "the femtorun-exact engine", "SPU sequence engine cost per cycle"),
    "bench_control_node": Chart("control_node.md", "round trip / in-process", "Dense({N}), {node allocator}",
                                "round trip / in-process", "in-process set_weights",
                                "set_weights round trip over DDS", "Control node: service round trip"),
    "bench_bag_checks": Chart("bag_checks.md", "checked path", "{case}: {checked path}", "ratio",
                              "the unchecked baseline", "checked path",
                              "Bag reading: checks vs the unchecked path"),
}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def read_table(path: Path, header: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in ``path`` whose header row contains ``header``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        separator = i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: ")
        if line.startswith("|") and header in line and separator:
            names = _cells(line)
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(dict(zip(names, _cells(row), strict=False)))
            return rows
    raise ValueError(f"{path}: no table with {header!r} in its header")


# A ratio cell: a number, optionally "x" / "×" and a remark ("0.96 (0.96)", "1.4x faster"); "n/a" is none.
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*[x×]?(\s.*)?$")


def ratio_rows(chart: Chart) -> list[tuple[str, float]]:
    """(label, ratio) of every row whose ratio cell is a number ("1.006", "0.77x"); others ("n/a") and the
    anchor's own row (a ratio of exactly "1") are skipped."""
    out = []
    for row in read_table(RESULTS / chart.results, chart.header):
        cell = row.get(chart.ratio, "")
        match = _NUMBER.match(cell)
        if match and cell.strip() != "1":
            out.append((chart.label.format_map(row).replace("`", ""), float(match.group(1))))
    return out


def render_chart(chart: Chart) -> np.ndarray:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = ratio_rows(chart)
    if not rows:
        raise ValueError(f"{chart.results}: no numeric {chart.ratio!r} cells")
    labels = [textwrap.fill(label, 34) for label, _ in rows]
    values = [v for _, v in rows]
    y = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7.6, 1.5 + 0.55 * len(rows)), dpi=100)
    ax.barh(y - 0.18, [1.0] * len(rows), height=0.34, color="#b0b0b0", label=f"anchor: {chart.anchor} (1.0)")
    ax.barh(y + 0.18, values, height=0.34, color="#2a7ab9", label=chart.ours)
    for yi, v in zip(y, values, strict=True):
        ax.text(v, yi + 0.18, f" {v:.3g}", va="center", fontsize=8)
    if chart.target is not None:
        ax.axvline(chart.target, color="#c0392b", linestyle="--", linewidth=1,
                   label=f"target {chart.target:g}")
    if max(values) / max(min(values), 1e-9) > 20:
        ax.set_xscale("log")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up over the anchor (higher is faster)" if chart.speedup
                  else "ratio to the anchor (lower is faster)", fontsize=8)
    ax.set_title(f"{chart.title}\n(bench/results/{chart.results})", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.margins(x=0.12)
    fig.legend(fontsize=7, loc="lower center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return image


# -- output -------------------------------------------------------------------------------------------------
def _scaled(rgb: np.ndarray) -> np.ndarray:
    import cv2

    h, w = rgb.shape[:2]
    if w == WIDTH:
        return rgb
    size = (WIDTH, round(h * WIDTH / w))
    return cv2.resize(rgb, size, interpolation=cv2.INTER_AREA if w > WIDTH else cv2.INTER_LINEAR)


def names() -> list[str]:
    return [*NODE_PICTURES, *CHARTS]


def render(name: str) -> np.ndarray:
    """The picture ``name`` (a node picture or a chart) as RGB uint8."""
    if name in NODE_PICTURES:
        return _scaled(NODE_PICTURES[name]())
    return render_chart(CHARTS[name])


def file_name(name: str) -> str:
    """Photos as JPEG (a tenth of the PNG's size), charts as PNG (sharp lines and text)."""
    return f"{name}.jpg" if name in NODE_PICTURES else f"{name}.png"


def encode(name: str, rgb: np.ndarray) -> bytes:
    """The file bytes of picture ``name`` (OpenCV's encoders: the same bytes for the same pixels)."""
    import cv2

    ext = Path(file_name(name)).suffix
    params = [cv2.IMWRITE_JPEG_QUALITY, 85] if ext == ".jpg" else [cv2.IMWRITE_PNG_COMPRESSION, 9]
    ok, data = cv2.imencode(ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), params)
    if not ok:
        raise RuntimeError(f"cannot encode {name}")
    return data.tobytes()


def decode(data: bytes) -> np.ndarray:
    import cv2

    return cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/pictures.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder to write into (default {OUT})")
    parser.add_argument("--only", nargs="+", choices=names(), metavar="NAME",
                        help=f"render only these: {', '.join(names())}")
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")
    args = parser.parse_args(argv)
    from libredgetpu_ros.atomicio import atomic_write_bytes

    written = []
    for name in args.only or names():
        rgb = render(name)
        path = args.out / file_name(name)
        atomic_write_bytes(path, encode(name, rgb))
        written.append({"name": name, "path": str(path), "width": int(rgb.shape[1]),
                        "height": int(rgb.shape[0])})
        if not args.json:
            print(f"{path}: {rgb.shape[1]}x{rgb.shape[0]}")
    if args.json:
        print(json.dumps({"written": written}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
