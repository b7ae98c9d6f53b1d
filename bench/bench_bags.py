"""Bag processing throughput: offline (process-bag) vs live (replay -> perception node) vs the pipeline alone.

Same bag, same config, same run:

1. baseline: ``PerceptionPipeline.process`` alone on the bag's frames, already decoded in memory;
2. offline: ``process_bag`` end to end (read, CDR decode, pipeline, messages, CDR encode, write);
3. live: ``replay`` (its own process) into a perception node (``bringup``, its own process) over localhost
   DDS, camera at 2x the baseline rate; the node keeps only the newest frame, so the rate it publishes is
   its real sustained throughput, measured between its first and last result in this process.

Target: offline within 10% of the baseline. Run (network-isolated):
``unshare -n sh -c 'ip link set lo up; .venv/bin/python bench/bench_bags.py'`` -> bench/results/bags.md
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "bags.md"
CONFIGS = {
    "pose": ("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite", ["poses", "markers"],
             {"score_threshold": 0.2}),
    "classify": ("classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite", ["classification"],
                 {"score_threshold": 0.0, "top_k": 3, "max_results": 3}),
}
REPEATS = 3  # best of
MAX_CAMERA_FPS = 60.0  # live input rate cap (fast models): a camera rate one replay process sustains
NOTES = """Notes. The machine's 2 cores are shared with other jobs: ratios move by +-10-15% from run to run
(a ratio above 1 is such noise). Live classification is capped by its input (60 fps camera), not by the
node. Offline, the bag read (rosbags' pure-Python reader, ~1 ms per 640x480 frame) and inference share the
GIL, so the prefetch thread hides reading only partly; writing results (CDR + mcap) adds the rest.
PoseNet-sized models meet the target; a 0.25-width MobileNet at 400+ fps (~2 ms per frame) does not, as
the read is half its inference time (a reader process instead of a thread would be the next step).
rclpy's own Image deserializer (a copy into array.array, ~2 ms per 640x480 frame) is kept off the hot
path: well-formed little-endian Images are viewed in place (`bags/cdr_image.py`), anything else goes
through rclpy."""
IMAGES = ["images/cat.bmp", "images/grace_hopper.bmp", "images/test_couple.jpg"]


def _bringup(tmp: Path, task: str) -> Path:
    import yaml

    model, _, extra = CONFIGS[task]
    params = {"model": f"$(fixture {model})", "backend": "cpu", "task": task, "input_topic": "image_raw",
              **extra}
    path = tmp / f"{task}.yaml"
    path.write_text(yaml.safe_dump({"nodes": [{"type": "perception", "name": "perception", "namespace": "cam",
                                               "parameters": params}]}))
    return path


def _frames(bag: Path) -> list[np.ndarray]:
    from libredgetpu_ros.bags.storage import open_reader
    from libredgetpu_ros.ros.image_msgs import to_rgb
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image

    reader = open_reader(bag)
    try:
        return [to_rgb(deserialize_message(bytes(raw), Image)).copy() for _, _, raw in reader.messages()]
    finally:
        reader.close()


def _camera_frames(tmp: Path, size: str) -> list[Path]:
    """The fixture images resized to a camera's frame size (PNG, lossless)."""
    import cv2
    from libredgetpu_ros.fixtures import fixture

    width, height = (int(v) for v in size.split("x"))
    paths = []
    for name in IMAGES:
        path = tmp / f"{Path(name).stem}.png"
        cv2.imwrite(str(path), cv2.resize(cv2.imread(str(fixture(name))), (width, height),
                                          interpolation=cv2.INTER_AREA))
        paths.append(path)
    return paths


def read_decode_fps(bag: Path) -> float:
    """Bag read + CDR decode + pixels, no inference: the I/O bound of any offline run."""
    from libredgetpu_ros.bags.storage import open_reader
    from libredgetpu_ros.ros.image_msgs import to_rgb
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image

    reader = open_reader(bag)
    try:
        start, n = time.perf_counter(), 0
        for _, _, raw in reader.messages():
            to_rgb(deserialize_message(raw, Image))
            n += 1
        return n / (time.perf_counter() - start)
    finally:
        reader.close()


def baseline_fps(config: Path, frames: list[np.ndarray]) -> float:
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline
    from libredgetpu_ros.ros.bag_processing import load_node_config
    from libredgetpu_ros.ros.perception_node import pipeline_config

    with PerceptionPipeline.from_config(pipeline_config(load_node_config(config).params)) as pipeline:
        for rgb in frames[:2]:
            pipeline.process(rgb)  # warm-up (LiteRT allocates on the first runs)
        start = time.perf_counter()
        for rgb in frames:
            pipeline.process(rgb)
        return len(frames) / (time.perf_counter() - start)


def offline_fps(bag: Path, config: Path, out: Path) -> float:
    from libredgetpu_ros.ros.bag_processing import process_bag

    summary = process_bag(bag, out, config, progress=False)
    assert summary.processed == summary.frames, summary.text()
    return summary.fps


def live_fps(bag: Path, config: Path, task: str, rate: float, frames: int, env: dict[str, str],
             tmp: Path) -> tuple[float, int]:
    """(results per second between the first and last result, results received)."""
    import rclpy
    import rclpy.context
    from libredgetpu_ros.ros.conversions import output_topics
    from libredgetpu_ros.ros.perception_node import RESULT_QOS
    from rclpy.executors import SingleThreadedExecutor

    cli = [sys.executable, "-m", "libredgetpu_ros.cli.main"]
    topic, cls = output_topics(task)[0]
    procs = []
    context = rclpy.context.Context()
    rclpy.init(context=context, domain_id=int(env["ROS_DOMAIN_ID"]))
    try:
        with (tmp / f"node_{task}.log").open("wb") as log:
            procs.append(subprocess.Popen([*cli, "bringup", str(config)], env=env, stdout=log, stderr=log,
                                          cwd=tmp))
        node = rclpy.create_node("bench_recorder", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        arrivals: list[float] = []
        node.create_subscription(cls, f"/cam/{topic}", lambda _: arrivals.append(time.perf_counter()),
                                 RESULT_QOS, raw=True)
        deadline = time.monotonic() + 60
        while not node.count_publishers(f"/cam/{topic}") and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        with (tmp / f"replay_{task}.log").open("wb") as log:
            replay = subprocess.Popen([*cli, "replay", str(bag), "--rate", f"{rate:g}", "--wait-subscribers",
                                       "1", "--start-delay", "1"], env=env, stdout=log, stderr=log, cwd=tmp)
        procs.append(replay)
        while replay.poll() is None and time.monotonic() < deadline + 120:
            executor.spin_once(timeout_sec=0.05)
        end = time.monotonic() + 2.0  # the node finishes its last frame
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        node.destroy_node()
    finally:
        context.try_shutdown()
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=10)
    if len(arrivals) < 2:
        raise RuntimeError(f"live run of {task} produced {len(arrivals)} results; see {tmp}")
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]), len(arrivals)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=90,
                        help="frames in the bag (the 3 fixture images looped)")
    parser.add_argument("--size", default="640x480", help="camera frame size WxH (the images are resized)")
    args = parser.parse_args()

    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.ros.environment import localhost_only_environ

    tmp = Path(tempfile.mkdtemp(prefix="bench_bags_"))
    env = localhost_only_environ(domain_id=150 + os.getpid() % 50, log_dir=str(tmp / "ros_log"))
    os.environ.update(env)
    loops = max(1, args.frames // len(IMAGES))
    bag = tmp / "camera"
    options = MakeBagOptions(topic="/cam/image_raw", rate=10.0, loop=loops, start_ns=0)
    make_bag(_camera_frames(tmp, args.size), bag, options, progress=False)
    frames = _frames(bag)
    io_fps = read_decode_fps(bag)
    rows = []
    for task in CONFIGS:
        config = _bringup(tmp, task)
        # Alternate the two measurements and keep each one's best: other jobs share the 2 cores, and any
        # single run can land in a busy moment.
        base = baseline_fps(config, frames)
        off = offline_fps(bag, config, tmp / f"out_{task}_0")
        for i in range(1, REPEATS):
            base = max(base, baseline_fps(config, frames))
            off = max(off, offline_fps(bag, config, tmp / f"out_{task}_{i}"))
        rate = min(2.0 * base, MAX_CAMERA_FPS) / 10.0  # the bag is 10 Hz: 2x the pipeline's own rate
        live, received = live_fps(bag, config, task, rate, len(frames), env, tmp)
        rows.append((task, base, off, live, received, 10.0 * rate))
        print(f"{task}: pipeline {base:.1f} fps, offline {off:.1f} fps ({off / base:.0%}), "
              f"live {live:.1f} fps ({live / base:.0%}, {received}/{len(frames)} frames at "
              f"{10 * rate:.1f} fps in)")

    sizes = sorted({f"{f.shape[1]}x{f.shape[0]}" for f in frames})
    lines = [
        "# Bag processing: offline vs live vs the pipeline alone",
        "",
        f"`bench/bench_bags.py`, {time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores "
        f"(shared with other jobs), CPU backend (LiteRT), one bag of {len(frames)} rgb8 frames "
        f"({', '.join(sizes)}; the three fixture images looped).",
        "",
        f"Pipeline and offline measured alternately {REPEATS} times, best of each.",
        "",
        "- **pipeline**: `PerceptionPipeline.process` alone on frames already in memory (the baseline);",
        f"- **read + decode**: the bag read and CDR-decoded to pixels, no inference: {io_fps:.0f} fps",
        "  (the I/O bound; `process-bag` overlaps it with inference in a prefetch thread);",
        "- **offline**: `process-bag` end to end: read + CDR decode + pipeline + messages + CDR encode +",
        "  write;",
        "- **live**: `replay` (own process) -> perception node (`bringup`, own process) over localhost DDS,",
        f"  camera at 2x the baseline rate (at most {MAX_CAMERA_FPS:g} fps); the node keeps the newest",
        "  frame, so its output rate is its throughput.",
        "",
        "| config | pipeline fps | offline fps | offline / pipeline | live fps | live / pipeline "
        "| live results |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, base, off, live, received, fps_in in rows:
        lines.append(f"| {task} | {base:.1f} | {off:.1f} | {off / base:.2f} | {live:.1f} | {live / base:.2f} "
                     f"| {received} of {len(frames)} at {fps_in:.1f} fps in |")
    lines += ["", "Target: offline within 10% of the pipeline's own throughput:"]
    for task, base, off, *_ in rows:
        serial = 1.0 / (1.0 / base + 1.0 / io_fps)
        verdict = "met" if off / base >= 0.9 else "not met"
        lines.append(f"- {task}: {off / base:.2f} ({verdict}); read + decode + inference back to back, "
                     f"writing not counted: {serial:.1f} fps ({serial / base:.2f}).")
    lines += ["", NOTES, ""]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
