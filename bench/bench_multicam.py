"""Several camera streams through one accelerator in one process: served rate, latency and fairness per
stream; and the cost of a model switch with the same caching token vs a different one.

Run: ``.venv/bin/python bench/bench_multicam.py [--seconds S]``; writes bench/results/multicam.md.

Each stream is what a camera node does (``ros/camera``): a camera publishes at 15 Hz, the node processes the
newest frame that arrived, one at a time, with its own ``PerceptionPipeline`` (one per node, as ``bringup``
runs them). Streams run on threads of one process:

- **simulated**: every pipeline's backend is ``EdgeTpuBackend`` on one ``edgetpu/broker.py`` broker over the
  real driver and the recording transport with ``simulated.TimingModel`` (bulk bytes at 300 MB/s, 20 us a
  transfer, a compute time per executable: 5 ms, and 20 ms for the saturated case, where 4 x 15 Hz asks more
  than the device gives);
- **CPU twin**: every pipeline on the cpu backend (LiteRT, one thread each), as ``auto`` runs without an
  accelerator.

Latency is wall time from the frame's arrival to its result, so it includes waiting for the device and, on
this shared 2-core machine, for a core (other engineers' jobs ran meanwhile: the CPU-twin figures swing with
that load). Fairness is max/min served rate over the streams. The switch costs are simulated device time
(the timing model's), measured as wall time of the run after each switch.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

import numpy as np
from _timing import write_report
from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend
from libredgetpu_ros.edgetpu import broker as brokers
from libredgetpu_ros.edgetpu.device import EdgeTpuDevice
from libredgetpu_ros.edgetpu.simulated import TimingModel, simulated_transport
from libredgetpu_ros.fixtures import fixture
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

MODEL = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
SEG0 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_0_of_2_edgetpu.tflite"
SEG1 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite"
MNV2 = "classify/mobilenet_v2_1.0_224_quant_edgetpu.tflite"
RATE_HZ = 15.0
FRAME = (480, 640, 3)


def _camera(pipeline: PerceptionPipeline, period: float, t0: float, stop_at: float, out: dict) -> None:
    """Frames arrive at t0 + k * period until stop_at; the newest is processed whenever the last is done."""
    rgb = np.random.default_rng(1).integers(0, 256, FRAME, dtype=np.uint8)
    latencies, served, skipped, last_k = [], [], 0, -1
    while True:
        now = time.monotonic()
        if now >= stop_at:
            break
        k = int((now - t0) / period)
        if k == last_k:  # wait for the next frame
            time.sleep(t0 + (k + 1) * period - now)
            continue
        skipped += max(0, k - last_k - 1)
        last_k = k
        arrived = t0 + k * period
        pipeline.process(rgb)
        done = time.monotonic()
        latencies.append((done - arrived) * 1e3)
        served.append(done)
    out.update(latencies=latencies, served=served, skipped=skipped)


def run_streams(pipelines: list[PerceptionPipeline], seconds: float, stop_first_at: float | None = None,
                ) -> list[dict]:
    t0 = time.monotonic() + 0.2
    results: list[dict] = [{} for _ in pipelines]
    threads = []
    for i, pipeline in enumerate(pipelines):
        end = t0 + (stop_first_at if (i == 0 and stop_first_at is not None) else seconds)
        threads.append(threading.Thread(target=_camera, args=(pipeline, 1.0 / RATE_HZ, t0, end, results[i])))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        r["t0"] = t0
    return results


def _summary(name: str, results: list[dict], seconds: float, extra: str = "") -> list[str]:
    rates = [len(r["served"]) / seconds for r in results]
    lines = []
    for i, r in enumerate(results):
        lat = sorted(r["latencies"])
        p50 = statistics.median(lat)
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        lines.append(f"| {name} | {i} | {rates[i]:.1f} | {p50:.1f} | {p99:.1f} | {r['skipped']} |")
    fairness = max(rates) / min(rates)
    lines.append(f"| {name}: fairness max/min | | **{fairness:.2f}** | | | {extra} |")
    return lines


def sim_pipelines(n: int, run_s: float, key: str) -> list[PerceptionPipeline]:
    timing = TimingModel(run_s=run_s)
    broker = brokers.shared(key, lambda: EdgeTpuDevice.open(
        transport_factory=lambda: simulated_transport(key, timing)))
    try:
        return [PerceptionPipeline.from_config(PipelineConfig(model=str(fixture(MODEL)), backend="edgetpu",
                                                              device=broker)) for _ in range(n)]
    finally:
        broker.release()  # the pipelines hold their own references


def cpu_pipelines(n: int) -> list[PerceptionPipeline]:
    return [PerceptionPipeline.from_config(PipelineConfig(model=str(fixture(MODEL)), backend="cpu",
                                                          cpu_threads=1)) for _ in range(n)]


def streams_table(seconds: float) -> list[str]:
    lines = ["| case | stream | served Hz | p50 ms | p99 ms | frames skipped |", "|---|---|---|---|---|---|"]
    for n, run_s, label in ((2, 0.005, "simulated, 2 streams"), (4, 0.005, "simulated, 4 streams"),
                            (4, 0.020, "simulated 20 ms/run (saturated), 4 streams")):
        pipelines = sim_pipelines(n, run_s, f"bench-multicam-{n}-{run_s}")
        try:
            results = run_streams(pipelines, seconds)
            broker = pipelines[0]._segments[0].backend.device
            fallback = sum(p.backend_name != "edgetpu" for p in pipelines)
            extra = (f"{broker._refs} users of one device, {fallback} on the CPU, "
                     f"{sum(s['superseded'] for s in broker.stats()['streams'].values())} superseded")
            lines += _summary(label, results, seconds, extra)
        finally:
            for p in pipelines:
                p.close()
    for n in (2, 4):
        pipelines = cpu_pipelines(n)
        try:
            lines += _summary(f"CPU twin, {n} streams", run_streams(pipelines, seconds), seconds)
        finally:
            for p in pipelines:
                p.close()
    # a stream that stops halfway: the others keep their rate
    pipelines = sim_pipelines(4, 0.005, "bench-multicam-stop")
    try:
        results = run_streams(pipelines, seconds, stop_first_at=seconds / 2)
        half = results[0]["t0"] + seconds / 2
        after = [sum(t >= half for t in r["served"]) / (seconds / 2) for r in results[1:]]
        lines.append(f"| simulated, 4 streams, stream 0 stops at {seconds / 2:.0f} s | 1-3 after the stop | "
                     f"{', '.join(f'{a:.1f}' for a in after)} | | | stream 0 served "
                     f"{len(results[0]['served'])} before |")
    finally:
        for p in pipelines:
            p.close()
    return lines


def _inputs(rel: str) -> list[np.ndarray]:
    model = load_model(fixture(rel))
    op = model.edgetpu_ops()[0]
    return [np.zeros(model.tensors[i].shape, model.tensors[i].dtype) for i in op.inputs]


def switch_table(rounds: int) -> list[str]:
    """Alternate two models on one timed device: same caching token (SSD's two segments, compiled
    together) vs different tokens (MobileNet v2 and v1 0.25, compiled apart)."""
    timing = TimingModel(run_s=0.005)
    lines = ["| pair | caching tokens | parameters (bytes) | switches | uploads per switch | ms per run "
             "after a switch (median) | ms per run, no switch (median) |", "|---|---|---|---|---|---|---|"]
    for label, pair in (("SSD segment 0 <-> segment 1", (SEG0, SEG1)),
                        ("MobileNet v2 <-> v1 0.25", (MNV2, MODEL))):
        key = f"bench-switch-{label}"
        backends = [EdgeTpuBackend(transport_factory=lambda key=key: simulated_transport(key, timing),
                                   stream=Path(rel).name) for rel in pair]
        try:
            for b, rel in zip(backends, pair, strict=True):
                b.load(fixture(rel))
            inputs = [_inputs(rel) for rel in pair]
            tokens, sizes = [], []
            for rel in pair:
                m = load_model(fixture(rel))
                pc = m.darwinn(m.edgetpu_ops()[0]).parameter_caching
                tokens.append(pc.parameter_caching_token)
                sizes.append(len(pc.parameters))
            for b, x in zip(backends, inputs, strict=True):  # first loads
                b.run(x)
            after_switch, same = [], []
            for _ in range(rounds):
                for b, x in zip(backends, inputs, strict=True):
                    start = time.perf_counter()
                    b.run(x)
                    after_switch.append((time.perf_counter() - start) * 1e3)
                    start = time.perf_counter()
                    b.run(x)
                    same.append((time.perf_counter() - start) * 1e3)
            switches = backends[0].device.stats()["switches"]
            count = sum(s["count"] for s in switches)
            uploads = sum(s["uploads"] for s in switches)
            same_token = "same" if tokens[0] == tokens[1] else "different"
            lines.append(f"| {label} | {same_token} | {sizes[0]} + {sizes[1]} | {count} | "
                         f"{uploads / count:.2f} | {statistics.median(after_switch):.2f} | "
                         f"{statistics.median(same):.2f} |")
        finally:
            for b in backends:
                b.close()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    lines = ["# Several camera streams, one accelerator (bench/bench_multicam.py)", "",
             f"Each stream: a camera at {RATE_HZ:g} Hz ({FRAME[1]}x{FRAME[0]} rgb8), newest frame processed "
             f"by its own perception pipeline ({Path(MODEL).name}), {args.seconds:g} s per case, streams on "
             f"threads of one process. Simulated: one Edge TPU broker over the real driver and the timed "
             f"recording transport; CPU twin: LiteRT, one thread per pipeline. Wall-clock figures on a "
             f"shared, loaded 2-core machine (other jobs ran meanwhile).", ""]
    lines += streams_table(args.seconds)
    lines += ["", "## Model switch on one device (timed recording transport, 5 ms per executable, 300 MB/s)",
              ""]
    lines += switch_table(args.rounds)
    print(write_report(Path(__file__).parent / "results" / "multicam.md", lines))


if __name__ == "__main__":
    main()
