"""Perception node across processes: publish -> result latency, sustained rate, ROS overhead, node RSS.

    .venv/bin/python bench/bench_perception_node.py [--seconds 8] [--rate 30] [--models classify,pose,segment]
                                [--baseline REV] [--echo] [--rounds N] [--out FILE] [--raw F]
    .venv/bin/python bench/bench_perception_node.py --render F [--out FILE]   (report from saved data)

For each model (MobileNet v1 0.25 classification, PoseNet pose, DeepLab segmentation; CPU backend) it
first measures ``PerceptionPipeline.process`` in this process on the same 640x480 frame, back to back. Then it
starts the node as a separate process (localhost-only DDS, its own domain), drives it to active, publishes
640x480 rgb8 frames at ``--rate`` Hz for ``--seconds`` and timestamps every result on arrival. The node
publishes where each frame's time went on ``~/timing`` (stamped like the frame), so every result is paired
with *its own* backend time:

- latency: result callback in this process minus the frame's stamp (taken just before ``publish``);
- overhead = latency - that frame's backend time (``total_ms``: pre-process + inference + post-process), and
  the same minus the time the frame queued behind the previous one (``queued_ms``: by design when the backend
  is slower than the camera, not ROS cost); also at this process's DDS reader, i.e. without this process's
  own executor (reported separately as 'bench take': a consumer's cost, not the node's);
- the overhead split: DDS in, the node's take, hand-off, conversion, publish, the way back, this process's
  take;
- result age in frame periods (no result should be older than two), results/s, frames dropped by the
  newest-frame policy; node RSS (VmRSS, VmHWM of the node process).

The receive side is a bare node (no parameter services, no rosout) holding only the result subscription,
on its own ``SingleThreadedExecutor`` thread: the cheapest rclpy consumer.

With ``--echo`` the classify rows also run ``bench/_echo_node.py`` (a bare node answering each frame with an
empty result), interleaved: the DDS floor the node's own cost is held to. With ``--baseline REV`` each row
is measured with the node as of git revision REV too (run from an extracted
copy; it may not publish ``~/timing``, then the overhead uses the run's mean backend time from /diagnostics),
interleaved run by run with the working tree's node; ``--rounds N`` repeats the whole interleaved plan N times
and pools the frames per row. Writes bench/results/perception_node.md (or ``--out``).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _perception_node_report import Run, echo_spread, load_raw, merge, report, save_raw
from _revisions import package_at  # beside this script (run as a script: its folder is on sys.path)
from libredgetpu_ros.ros.environment import localhost_only_environ

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "perception_node.md"
ECHO_NODE = ROOT / "bench" / "_echo_node.py"  # the DDS floor: full image in, empty result out (--echo)
MODELS = {
    "classify": ("classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite", "classification", "Classification"),
    "pose": ("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite", "poses",
             "PersonPoseArray"),
    "segment": ("deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite", "segmentation", "Image"),
}


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


def _node_env(env: dict[str, str], package_path: Path | None) -> dict[str, str]:
    env = {**os.environ, **env}
    if package_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(package_path), env.get("PYTHONPATH", "")) if p)
        origin = subprocess.run([sys.executable, "-c", "import libredgetpu_ros.ros.perception_node as m; "
                                 "print(m.__file__)"], env=env, check=True, capture_output=True, text=True)
        if not origin.stdout.strip().startswith(str(package_path)):
            raise RuntimeError(f"the baseline node would import {origin.stdout.strip()}")
    return env


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
    from std_msgs.msg import Header
    from vision_msgs import msg as vision_msgs

    from libredgetpu_ros_interfaces import msg as our_msgs

    model, topic, type_name = MODELS[run.task]
    # Classification is vision_msgs now (a --baseline from before that switch published a look-alike).
    result_type = (Image if type_name == "Image" else getattr(vision_msgs, type_name, None)
                   or getattr(our_msgs, type_name))
    params = work / f"{run.task}.yaml"
    params.write_text(f"/**:\n  ros__parameters:\n    model: {fixture(model)}\n    backend: cpu\n"
                      f"    task: {run.task}\n    publish_markers: false\n    diagnostics_period: 1.0\n")
    echo = run.node == "echo"
    name = f"bench_{run.task}_{int(run.rate)}hz_{'cur' if run.node == 'current' else run.node[:4]}"
    log = (work / f"{name}.log").open("wb")
    command = [str(ECHO_NODE)] if echo else ["-m", "libredgetpu_ros.ros.perception_node"]
    proc = subprocess.Popen([sys.executable, *command, "--ros-args", "-r", f"__node:={name}",
                             "--params-file", str(params)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    # The receive side as cheap as rclpy allows (it is part of the measured latency): the result subscription
    # alone on a bare node (no parameter services, no rosout) with its own executor thread, so each wake-up
    # walks one entity; camera, lifecycle client, ~/timing and /diagnostics on a second bare node.
    bare = {"enable_rosout": False, "start_parameter_services": False}
    node = Node("bench_camera", **bare)
    rx_node = Node("bench_results", **bare)
    executor, rx_executor = SingleThreadedExecutor(), SingleThreadedExecutor()
    executor.add_node(node)
    rx_executor.add_node(rx_node)
    lock = threading.Lock()
    measuring = threading.Event()
    spinners: list[threading.Thread] = []

    def on_result(msg: object, info: dict) -> None:
        now = time.time()
        stamp = msg.header.stamp
        at_reader = (info.get("received_timestamp") or 0) * 1e-9 or now
        with lock:
            run.arrivals[(stamp.sec, stamp.nanosec)] = (stamp.sec + stamp.nanosec * 1e-9, now, at_reader)

    def on_timing(msg: DiagnosticArray) -> None:
        stamp = msg.header.stamp
        with lock:
            run.timing[(stamp.sec, stamp.nanosec)] = {kv.key: float(kv.value) for kv in msg.status[0].values}

    def on_diag(msg: DiagnosticArray) -> None:
        for st in msg.status:
            values = {kv.key: kv.value for kv in st.values}
            if name in st.name and measuring.is_set():
                run.diags.append(values)

    try:
        camera = node.create_publisher(Image, "image_raw", qos_profile_sensor_data)
        rx_node.create_subscription(result_type, topic, on_result, RESULT_QOS)
        node.create_subscription(DiagnosticArray, f"/{name}/timing", on_timing, RESULT_QOS)
        node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
        change = node.create_client(ChangeState, f"/{name}/change_state")
        if not echo and not change.wait_for_service(timeout_sec=30.0):
            raise RuntimeError(f"node did not come up; see {log.name}")
        for tid in () if echo else (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            future = change.call_async(ChangeState.Request(transition=Transition(id=tid)))
            executor.spin_until_future_complete(future, timeout_sec=30.0)
            if not (future.done() and future.result().success):
                raise RuntimeError(f"transition {tid} failed; see {log.name}")
        deadline = time.monotonic() + (30.0 if echo else 10.0)
        while (camera.get_subscription_count() < 1 or node.count_publishers(topic) < 1) and \
                time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        spinners = [threading.Thread(target=ex.spin, daemon=True) for ex in (executor, rx_executor)]
        for t in spinners:
            t.start()
        time.sleep(1.0)
        # One message, re-stamped per frame: building it is the camera driver's cost, not the node's.
        msg = rgb_to_image(rgb, Header(frame_id="bench_camera"))
        period = 1.0 / run.rate
        measuring.set()
        start = time.monotonic()
        n = int(seconds * run.rate)
        for i in range(n):
            t = time.time_ns()
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t, 10**9)
            camera.publish(msg)
            time.sleep(max(0.0, start + (i + 1) * period - time.monotonic()))
        run.duration_s = time.monotonic() - start
        run.published = n
        time.sleep(1.5)  # last results and one more diagnostics period
        run.rss_mb, run.hwm_mb = _rss(proc.pid)
        run.dropped = int(run.diags[-1].get("frames_dropped", 0)) if run.diags else 0
    finally:
        rx_executor.shutdown()
        executor.shutdown()
        for t in spinners:  # out of their wait before the nodes go (else a spinner finalizes them)
            t.join(timeout=5.0)
        rx_node.destroy_node()
        node.destroy_node()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--models", default="classify,pose,segment")
    parser.add_argument("--baseline-frames", type=int, default=30)
    parser.add_argument("--baseline", help="git revision of the node to compare against (interleaved)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat every run this often (interleaved round by round; frames pooled)")
    parser.add_argument("--echo", action="store_true",
                        help="also run bench/_echo_node.py (full image in, empty result out) interleaved "
                             "with the node on the classify rows: the DDS floor for the node's overhead")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--raw", type=Path, help="also save every run's per-frame data (JSON) here")
    parser.add_argument("--render", type=Path, help="no measuring: write the report from a --raw file")
    args = parser.parse_args()
    if args.render:
        runs, rev, rounds = load_raw(args.render)
        args.out.write_text(report(merge(runs), rev, rounds))
        return 0
    tasks = [t for t in args.models.split(",") if t]
    work = Path(tempfile.mkdtemp(prefix="bench_perception_node_"))
    env = localhost_only_environ(domain_id=random.randint(200, 232), log_dir=str(work / "ros_log"))
    os.environ.update(env)  # before rclpy reads it: this process talks DDS too
    rev = None
    nodes: list[tuple[str, dict[str, str]]] = [("current", _node_env(env, None))]
    if args.baseline:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline], check=True,
                             capture_output=True, text=True).stdout.strip()
        nodes.insert(0, (rev, _node_env(env, package_at(args.baseline, work / "baseline"))))

    # The camera side as a C++ driver would be: its ~1 MB serialization buffer reused from the heap instead
    # of mmap'd fresh (page-faulted in) per frame; the node does the same in its main().
    from libredgetpu_ros.ros.memory import retain_large_allocations

    retain_large_allocations()
    import rclpy

    rgb = _frame()
    plan: list[tuple[Run, dict[str, str]]] = []
    for task in tasks:
        print(f"{task}: baseline ...", flush=True)
        base = baseline(task, rgb, args.baseline_frames)
        rates = [args.rate]
        paced = 1e3 / (2.0 * float(np.median(base)))
        if paced < args.rate:
            rates.append(paced)
        with_echo = nodes + ([("echo", nodes[-1][1])] if args.echo and task == "classify" else [])
        plan += [(Run(task, rate, node, base), node_env) for rate in rates for node, node_env in with_echo]
    plan = [(Run(r.task, r.rate, r.node, r.baseline_ms), e) for _ in range(args.rounds) for r, e in plan]
    rclpy.init()
    # Keeps this process's DDS participant alive across runs: destroying the last node tears it down, and
    # Fast DDS 3.2 can spin forever in that teardown while discovery is busy (seen here once, hung).
    keep_alive = rclpy.create_node("bench_keep_alive", enable_rosout=False, start_parameter_services=False)
    try:
        for run, node_env in plan:
            print(f"{run.task}: node {run.node}, {args.seconds:g} s at {run.rate:.1f} Hz ...", flush=True)
            node_run(run, rgb, node_env, args.seconds, work)
    finally:
        keep_alive.destroy_node()
        rclpy.try_shutdown()
    if args.raw:
        save_raw(args.raw, [run for run, _ in plan], rev, args.rounds)
    spread = echo_spread([run for run, _ in plan], args.rounds) if args.echo else ""
    text = report(merge([run for run, _ in plan]), rev, args.rounds, spread)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
