"""Perception node across processes: publish -> result latency, sustained rate, ROS overhead, node RSS.

    .venv/bin/python bench/bench_perception_node.py [--seconds 8] [--rate 30] [--models pose,segment]

For each model (PoseNet pose, DeepLab segmentation; CPU backend) it first measures the baseline in this
process: ``PerceptionPipeline.process`` on the same 640x480 frame, back to back. Then it starts the node as a
separate process (localhost-only DDS, its own domain), drives it to active, publishes 640x480 rgb8 frames at
``--rate`` Hz for ``--seconds`` and timestamps every result on arrival. Reported per model:

- publish -> result latency p50/p99 (the frame's stamp to the result's arrival, same host clock);
- ROS overhead = that latency minus the backend's own time (the node's per-stage timings from /diagnostics
  of the same run, and the in-process baseline), as a difference and a ratio;
- result age in frame periods (no result should be older than two), results/s, frames dropped by the
  newest-frame policy; node RSS (VmRSS, VmHWM of the node process).

Writes bench/results/perception_node.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from libredgetpu_ros.ros.environment import localhost_only_environ

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "perception_node.md"
MODELS = {
    "pose": ("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite", "poses",
             "PersonPoseArray"),
    "segment": ("deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite", "segmentation", "Image"),
}
TARGET_OVERHEAD_P50_MS, TARGET_OVERHEAD_P99_MS, TARGET_RSS_MB = 2.0, 5.0, 400.0


@dataclass
class Run:
    task: str
    rate: float
    baseline_ms: np.ndarray
    latency_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    published: int = 0
    duration_s: float = 0.0
    diags: list[dict[str, str]] = field(default_factory=list)  # one per diagnostics period with results
    rss_mb: float = 0.0
    hwm_mb: float = 0.0


def _frame() -> np.ndarray:
    import cv2
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.perception.images import load_image

    return cv2.resize(load_image(fixture("images/test_couple.jpg")), (640, 480), interpolation=cv2.INTER_AREA)


def baseline(task: str, rgb: np.ndarray, n: int) -> np.ndarray:
    """In-process ``process()`` times (ms) on the same frame: the backend + pre/post-processing alone."""
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

    with PerceptionPipeline.from_config(PipelineConfig(model=fixture(MODELS[task][0]), backend="cpu",
                                                       task=task)) as pipeline:
        for _ in range(3):
            pipeline.process(rgb)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            pipeline.process(rgb)
            times.append((time.perf_counter() - t0) * 1e3)
    return np.array(times)


def _rss(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = float(value.split()[0]) / 1024.0
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)


def node_run(run: Run, rgb: np.ndarray, env: dict[str, str], seconds: float, work: Path) -> None:
    from diagnostic_msgs.msg import DiagnosticArray
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.ros.image_msgs import rgb_to_image
    from libredgetpu_ros.ros.perception_node import RESULT_QOS
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    from libredgetpu_ros_interfaces import msg as our_msgs

    model, topic, type_name = MODELS[run.task]
    result_type = Image if type_name == "Image" else getattr(our_msgs, type_name)
    params = work / f"{run.task}.yaml"
    params.write_text(f"/**:\n  ros__parameters:\n    model: {fixture(model)}\n    backend: cpu\n"
                      f"    task: {run.task}\n    publish_markers: false\n    diagnostics_period: 1.0\n")
    name = f"bench_{run.task}_{int(run.rate)}hz"
    log = (work / f"{name}.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "libredgetpu_ros.ros.perception_node", "--ros-args",
                             "-r", f"__node:={name}", "--params-file", str(params)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    node = Node("bench_camera")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    arrivals: list[tuple[float, float]] = []  # (stamp s, arrival s) on the same wall clock
    lock = threading.Lock()
    measuring = threading.Event()

    def on_result(msg: object) -> None:
        now = time.time()
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        with lock:
            arrivals.append((stamp, now))

    def on_diag(msg: DiagnosticArray) -> None:
        for st in msg.status:
            values = {kv.key: kv.value for kv in st.values}
            if name in st.name and measuring.is_set():
                run.diags.append(values)

    try:
        camera = node.create_publisher(Image, "image_raw", qos_profile_sensor_data)
        node.create_subscription(result_type, topic, on_result, RESULT_QOS)
        node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
        change = node.create_client(ChangeState, f"/{name}/change_state")
        if not change.wait_for_service(timeout_sec=30.0):
            raise RuntimeError(f"node did not come up; see {log.name}")
        for tid in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            future = change.call_async(ChangeState.Request(transition=Transition(id=tid)))
            executor.spin_until_future_complete(future, timeout_sec=30.0)
            if not (future.done() and future.result().success):
                raise RuntimeError(f"transition {tid} failed; see {log.name}")
        deadline = time.monotonic() + 10.0
        while (camera.get_subscription_count() < 1 or node.count_publishers(topic) < 1) and \
                time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        spinner = threading.Thread(target=executor.spin, daemon=True)
        spinner.start()
        time.sleep(1.0)
        period = 1.0 / run.rate
        measuring.set()
        start = time.monotonic()
        n = int(seconds * run.rate)
        for i in range(n):
            msg = rgb_to_image(rgb, _header(node))
            camera.publish(msg)
            time.sleep(max(0.0, start + (i + 1) * period - time.monotonic()))
        run.duration_s = time.monotonic() - start
        run.published = n
        time.sleep(1.5)  # last results and one more diagnostics period
        run.rss_mb, run.hwm_mb = _rss(proc.pid)
        with lock:
            run.latency_ms = np.array([(a - s) * 1e3 for s, a in arrivals])
    finally:
        executor.shutdown()
        node.destroy_node()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _header(node: object) -> object:
    from std_msgs.msg import Header

    t = time.time()
    h = Header(frame_id="bench_camera")
    h.stamp.sec, h.stamp.nanosec = int(t), int((t % 1.0) * 1e9)
    return h


def _p(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def _diag_mean(run: Run, key: str) -> float:
    values = [float(d[key]) for d in run.diags if key in d and float(d.get("fps_out", 0)) > 0]
    return float(np.mean(values)) if values else float("nan")


def report(runs: list[Run]) -> str:
    lines = [
        "# Perception node: publish -> result across processes",
        "",
        f"`bench/bench_perception_node.py`, {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()} "
        f"({os.cpu_count()} cores, shared with other jobs; load average {os.getloadavg()[0]:.1f}), CPU "
        "backend (LiteRT), 640x480 rgb8 frames, localhost-only Fast DDS (16 MB shared-memory segments), "
        "node in its own process.",
        "",
        "- latency: result arrival minus the frame's stamp (same clock), p50 / p99 over all results;",
        "- backend: the node's own `total_ms` (pre-process + inference + post-process) from /diagnostics of",
        "  the same run; baseline: `PerceptionPipeline.process` in the benchmark process, back to back;",
        "- in-node: frame received -> results published, from /diagnostics (includes the wait for the",
        "  worker);",
        "- overhead = latency - backend; transport = mean latency - mean in-node (DDS both ways + the",
        "  subscription callback), so queueing behind a busy worker is not counted as ROS overhead;",
        "- paced rows publish at half the baseline rate, so no frame waits for the previous one.",
        "",
        "| model | input Hz | baseline p50 / p99 ms | backend ms | in-node ms | latency p50 / p99 ms "
        "| overhead p50 / p99 ms | transport ms | latency / backend | results/s | dropped "
        "| max age (periods) | node RSS / peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for r in runs:
        backend, in_node = _diag_mean(r, "total_ms"), _diag_mean(r, "node_latency_ms")
        lat50, lat99 = _p(r.latency_ms, 50), _p(r.latency_ms, 99)
        over50, over99 = lat50 - backend, lat99 - backend
        transport = float(np.mean(r.latency_ms)) - in_node if len(r.latency_ms) else float("nan")
        period_ms = 1e3 / r.rate
        max_age = (r.latency_ms.max() / period_ms) if len(r.latency_ms) else float("nan")
        dropped = r.diags[-1].get("frames_dropped", "?") if r.diags else "?"
        lines.append(
            f"| {r.task} | {r.rate:.1f} | {_p(r.baseline_ms, 50):.1f} / {_p(r.baseline_ms, 99):.1f} "
            f"| {backend:.1f} | {in_node:.1f} | {lat50:.1f} / {lat99:.1f} | {over50:.1f} / {over99:.1f} "
            f"| {transport:.1f} | {lat50 / backend:.2f} | {len(r.latency_ms) / r.duration_s:.1f} "
            f"| {dropped} of {r.published} | {max_age:.2f} | {r.rss_mb:.0f} / {r.hwm_mb:.0f} |")
        verdicts.append(
            f"- {r.task} at {r.rate:.1f} Hz: overhead p50 {over50:.1f} ms (target <= "
            f"{TARGET_OVERHEAD_P50_MS:g}): {_met(over50 <= TARGET_OVERHEAD_P50_MS)}; p99 {over99:.1f} ms "
            f"(target <= {TARGET_OVERHEAD_P99_MS:g}): {_met(over99 <= TARGET_OVERHEAD_P99_MS)}; max age "
            f"{max_age:.2f} frame periods (target <= 2): {_met(max_age <= 2)}"
            + (f"; node peak RSS {r.hwm_mb:.0f} MB (target <= {TARGET_RSS_MB:g}): "
               f"{_met(r.hwm_mb <= TARGET_RSS_MB)}" if r.task == "segment" else ""))
    lines += ["", "## Targets", "", *verdicts, "",
              "When the backend time exceeds the frame period the node cannot keep up by design: it",
              "processes the newest frame and drops the others (counted in `frames_dropped`), so latency",
              "stays near one backend time plus at most one more (the frame that arrived mid-inference)",
              "instead of growing. The age target of two frame periods needs a backend faster than the",
              "camera; on a loaded 2-core machine the CPU backend is not, which the rows above show.",
              "The p99 overhead subtracts the *mean* backend time (per-frame backend times are not",
              "published), so on a busy host it mostly measures backend jitter; the transport column is the",
              "clean ROS cost.",
              ""]
    return "\n".join(lines)


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--models", default="pose,segment")
    parser.add_argument("--baseline-frames", type=int, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    tasks = [t for t in args.models.split(",") if t]
    work = Path(tempfile.mkdtemp(prefix="bench_perception_node_"))
    env = localhost_only_environ(domain_id=random.randint(200, 232), log_dir=str(work / "ros_log"))
    os.environ.update(env)  # before rclpy reads it: this process talks DDS too

    import rclpy

    rgb = _frame()
    runs = []
    for task in tasks:
        print(f"{task}: baseline ...", flush=True)
        base = baseline(task, rgb, args.baseline_frames)
        paced = min(args.rate, 1e3 / (2.0 * float(np.median(base))))
        runs += [Run(task, args.rate, base), Run(task, paced, base)]
    rclpy.init()
    try:
        for run in runs:
            print(f"{run.task}: node run {args.seconds:g} s at {run.rate:.1f} Hz ...", flush=True)
            node_run(run, rgb, env, args.seconds, work)
    finally:
        rclpy.try_shutdown()
    text = report(runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
