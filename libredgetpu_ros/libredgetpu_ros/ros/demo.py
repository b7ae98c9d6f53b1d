"""``make demo``: the perception node on the CPU backend, fed the fixture images as a 10 Hz camera stream.

    python -m libredgetpu_ros.ros.demo [--out DIR] [--frames N] [--segment]

Starts, in this process, a camera publisher (rgb8 ``sensor_msgs/Image``, frame_id ``camera_optical_frame``,
stamped), the perception lifecycle node (PoseNet; DeepLab too with ``--segment``) driven to active, and a
listener that prints what the node publishes per frame and saves the annotated images to ``--out`` (default
out/demo/).
Its participants talk only among themselves, so DDS is confined to this machine whatever the environment says
(``environment.confine_to_localhost`` before rclpy starts; ``make demo`` also runs it in the sandbox's private
network namespace). Ends by itself.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from libredgetpu_ros.ros.environment import confine_to_localhost

POSENET = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"
DEEPLAB = "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite"
VOC_LABELS = "labels/pascal_voc_segmentation_labels.txt"
IMAGES = ("images/test_couple.jpg", "images/grace_hopper.bmp", "images/cat.bmp")
RATE_HZ = 10.0
NAMESPACE = "demo"

# REP-103 optical frame (x right, y down), as make-bag writes and the rviz config displays.
CAMERA_FRAME = "camera_optical_frame"


@dataclass
class _Frame:
    index: int
    name: str
    sent: float
    poses: Any = None
    mask_histogram: dict[str, int] | None = None
    annotated: Path | None = None
    latency_ms: float | None = None
    printed: set[str] = field(default_factory=set)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m libredgetpu_ros.ros.demo",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("out/demo"), help="folder for annotated images")
    parser.add_argument("--frames", type=int, default=15, help="camera frames to publish (default 15)")
    parser.add_argument("--segment", action="store_true", help="also run DeepLab segmentation")
    parser.add_argument("--timeout", type=float, default=50.0, help="give up after this many seconds")
    args = parser.parse_args(argv)
    if args.frames < 1:
        parser.error("--frames must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    confine_to_localhost()  # the demo is self-contained: nothing of it needs to leave this machine

    import cv2
    import numpy as np
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.postprocess.labels import read_labels
    from libredgetpu_ros.ros.bringup import Bringup, NodeSpec
    from libredgetpu_ros.ros.image_msgs import image_to_rgb, rgb_to_image
    from libredgetpu_ros.ros.perception_node import RESULT_QOS
    from libredgetpu_ros_interfaces.msg import PersonPoseArray

    images = [(Path(rel).name, load_image(fixture(rel))) for rel in IMAGES]
    specs = [NodeSpec("perception", "pose", NAMESPACE, {
        "model": str(fixture(POSENET)), "backend": "cpu", "task": "pose", "score_threshold": 0.3,
        "max_results": 5, "input_topic": "image_raw", "publish_annotated": True})]
    voc: dict[int, str] = {}
    if args.segment:
        voc = read_labels(fixture(VOC_LABELS))
        specs.append(NodeSpec("perception", "segment", NAMESPACE, {
            "model": str(fixture(DEEPLAB)), "backend": "cpu", "task": "segment",
            "labels": str(fixture(VOC_LABELS)), "input_topic": "image_raw"}))
    args.out.mkdir(parents=True, exist_ok=True)

    # Our own Ctrl-C / SIGTERM handling: rclpy's would shut the context down under the nodes before they are
    # brought down; here both raise KeyboardInterrupt in this thread and the finally block below runs.
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    signal.signal(signal.SIGTERM, _interrupt)
    interrupted = False
    frames: dict[tuple[int, int], _Frame] = {}
    lock = threading.Lock()
    diag: dict[str, dict[str, str]] = {}
    bringup = Bringup(specs, log=lambda line: print(f"[bringup] {line}", flush=True))
    done = threading.Event()  # ends the spinner thread; joined before anything is destroyed
    spinner: threading.Thread | None = None
    io: Any = None
    try:
        bringup.start()
        io = Node("demo_camera", namespace=NAMESPACE)
        camera = io.create_publisher(Image, "image_raw", qos_profile_sensor_data)

        def key(msg: Any) -> tuple[int, int]:
            return (msg.header.stamp.sec, msg.header.stamp.nanosec)

        def report(frame: _Frame, what: str, text: str) -> None:
            if what not in frame.printed:
                frame.printed.add(what)
                print(f"frame {frame.index:3d} {frame.name:<17} {text}", flush=True)

        def on_poses(msg: PersonPoseArray) -> None:
            with lock:
                frame = frames.get(key(msg))
                if frame is None:
                    return
                frame.latency_ms = (time.monotonic() - frame.sent) * 1e3
                people = ", ".join(
                    f"{p.score:.2f} (nose {_nose(p)})" for p in msg.poses) or "nobody"
                report(frame, "poses", f"poses: {len(msg.poses)} [{people}]  "
                                       f"publish->result {frame.latency_ms:.1f} ms")

        def on_annotated(msg: Image) -> None:
            with lock:
                frame = frames.get(key(msg))
            if frame is None:
                return
            path = args.out / f"frame_{frame.index:03d}_{Path(frame.name).stem}.jpg"
            cv2.imwrite(str(path), cv2.cvtColor(image_to_rgb(msg), cv2.COLOR_RGB2BGR))
            with lock:
                frame.annotated = path

        def on_mask(msg: Image) -> None:
            mask = np.frombuffer(msg.data, np.uint8)
            counts = np.bincount(mask, minlength=1)
            ids = np.flatnonzero(counts)
            ids = ids[np.argsort(-counts[ids])][:4]
            hist = {voc.get(int(i), str(int(i))): round(100.0 * counts[i] / mask.size, 1) for i in ids}
            with lock:
                frame = frames.get(key(msg))
                if frame is None:
                    return
                frame.mask_histogram = hist
                report(frame, "mask", "segmentation: " + ", ".join(f"{k} {v}%" for k, v in hist.items()))

        def on_diagnostics(msg: DiagnosticArray) -> None:
            for st in msg.status:
                diag[st.name] = {kv.key: kv.value for kv in st.values}

        results = [io.create_subscription(PersonPoseArray, f"/{NAMESPACE}/poses", on_poses, RESULT_QOS),
                   io.create_subscription(Image, f"/{NAMESPACE}/annotated", on_annotated, RESULT_QOS)]
        if args.segment:
            results.append(io.create_subscription(Image, f"/{NAMESPACE}/segmentation", on_mask, RESULT_QOS))
        io.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
        bringup.executor.add_node(io)
        spinner = threading.Thread(target=bringup.spin_until, args=(done,), name="demo_spin", daemon=True)
        spinner.start()

        deadline = time.monotonic() + args.timeout
        # The node builds a result only for topics somebody subscribes to, and best-effort frames sent before
        # the camera is matched are lost: wait for every match (bounded), then a little for the far sides.
        while time.monotonic() < deadline and (camera.get_subscription_count() < len(specs)
                                               or any(sub.get_publisher_count() < 1 for sub in results)):
            time.sleep(0.05)
        time.sleep(0.3)
        print(f"publishing {args.frames} frames at {RATE_HZ:.0f} Hz on /{NAMESPACE}/image_raw", flush=True)
        period = 1.0 / RATE_HZ
        start = time.monotonic()
        for i in range(args.frames):
            name, rgb = images[i % len(images)]
            msg = rgb_to_image(rgb, _header(io, CAMERA_FRAME))
            with lock:
                frames[key(msg)] = _Frame(i, name, time.monotonic())
            camera.publish(msg)
            time.sleep(max(0.0, start + (i + 1) * period - time.monotonic()))
        # Results of the last frames still in flight: wait a little, bounded.
        settle = time.monotonic() + 3.0
        while time.monotonic() < min(settle, deadline):
            with lock:
                if all(f.latency_ms is not None for f in frames.values()):
                    break
            time.sleep(0.05)
        time.sleep(max(0.0, min(1.2, deadline - time.monotonic())))  # one more diagnostics period
        _summary(frames, diag, args.out)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: stopping ...", flush=True)
    finally:
        # Nothing may be spinning while nodes are destroyed: tearing down DDS entities under a running
        # executor thread can abort the process at exit ("terminate called without an active exception").
        done.set()
        if spinner is not None:
            spinner.join(timeout=5.0)
        if io is not None:
            if bringup.executor is not None:
                bringup.executor.remove_node(io)
            io.destroy_node()
        bringup.stop()
        rclpy.try_shutdown()
    return 130 if interrupted else 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _nose(pose: Any) -> str:
    for k in pose.keypoints:
        if k.id == 0:
            return f"{k.x:.0f},{k.y:.0f}"
    return "-"


def _header(node: Any, frame_id: str) -> Any:
    from std_msgs.msg import Header

    return Header(stamp=node.get_clock().now().to_msg(), frame_id=frame_id)


def _summary(frames: dict[Any, _Frame], diag: dict[str, dict[str, str]], out: Path) -> None:
    done = [f for f in frames.values() if f.latency_ms is not None]
    saved = [f for f in frames.values() if f.annotated is not None]
    print(f"\n{len(done)}/{len(frames)} frames answered (the node keeps only the newest frame: the rest were "
          f"dropped, not queued); {len(saved)} annotated images in {out}/")
    if done:
        lat = sorted(f.latency_ms for f in done)
        print(f"publish->poses latency: median {lat[len(lat) // 2]:.1f} ms, max {lat[-1]:.1f} ms")
        answers = sorted(f.sent + f.latency_ms / 1000.0 for f in done)
        if len(answers) > 1 and answers[-1] > answers[0]:
            print(f"results: {(len(answers) - 1) / (answers[-1] - answers[0]):.1f} per second over the run")
    for name, values in sorted(diag.items()):
        # Not fps_out: a rate over the node's last 2 s, read after the stream ended, it would say 0.
        keys = ("backend", "frames_processed", "frames_dropped", "inference_ms", "total_ms",
                "node_latency_ms")
        print(f"diagnostics {name}: " + ", ".join(f"{k}={values[k]}" for k in keys if k in values))


if __name__ == "__main__":
    sys.exit(main())
