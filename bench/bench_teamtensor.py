"""Team Tensor protocol: codec throughput against a ``bytes`` copy, and a 1,000-sample batch on loopback.

    .venv/bin/python bench/bench_teamtensor.py   ->  bench/results/teamtensor.md

Codec: encode / decode of a BATCH packet and of a model descriptor, and cutting a packet into datagrams plus
reassembling it, in MB/s of packet bytes from the median thread CPU time (``time.thread_time_ns``) of
``REPEATS`` calls; the baseline is ``bytes(bytearray(packet))`` (two copies of the same bytes) timed the same
way in the same run. Round trip: a Data Source in this process, ``libredgetpu-ros tt-worker`` in a child
process, wall time of ``send_batch`` (fragments out, ACK back) and of ``send_batch`` + ``GET_MT`` (the read
waits for the worker to train the batch), median over ``ROUND_TRIPS`` batches.
"""

from __future__ import annotations

import asyncio
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _timing import median_ns, ratio, write_report  # beside this script (its folder is on sys.path)
from libredgetpu_ros.teamtensor import DataSource, datagrams, packets
from libredgetpu_ros.teamtensor.model import ModelSpec, conv2d, decode_model, encode_model, linear, plain
from libredgetpu_ros.teamtensor.wire import LayerCode, Metric, Reader

REPEATS = 30
FRAMER = datagrams.Framer()  # reliable framing, no key: CRC-32 tags
ROUND_TRIPS = 40
SAMPLES = 1000
OUT = Path(__file__).resolve().parent / "results" / "teamtensor.md"
ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "_training", ROOT / "libredgetpu_ros" / "test" / "teamtensor" / "_training.py")
training = importlib.util.module_from_spec(_spec)
sys.modules["_training"] = training
_spec.loader.exec_module(training)


def median_s(fn: Callable[[], object]) -> float:
    return median_ns(fn, REPEATS) / 1e9


def batch(inputs: int, rng: np.random.Generator) -> packets.Batch:
    return packets.Batch(rng.normal(size=(SAMPLES, inputs)).astype(np.float32),
                         rng.normal(size=(SAMPLES, 2)).astype(np.float32))


def model() -> ModelSpec:
    rng = np.random.default_rng(1)
    return ModelSpec([
        conv2d(rng.normal(size=(32, 16, 3, 3)), None, pad=1, stride=1, out_width=16, out_height=16),
        plain(LayerCode.RELU), plain(LayerCode.MAXPOOL), plain(LayerCode.FLATTEN),
        linear(rng.normal(size=(40, 32 * 8 * 8))), plain(LayerCode.SOFTMAX),
    ], [Metric.CROSS_ENTROPY, Metric.ACCURACY])


def codec_rows() -> list[tuple[str, int, float, float]]:
    """(what, packet bytes, codec MB/s, bytes-copy MB/s)."""
    rng = np.random.default_rng(0)
    rows = []
    for inputs in (8, 64):
        req = batch(inputs, rng)
        packet = packets.encode_request(req)
        copy = median_s(lambda p=packet: bytes(bytearray(p)))
        rows.append((f"BATCH encode, {SAMPLES} × ({inputs} in, 2 out)", len(packet),
                     len(packet) / median_s(lambda r=req: packets.encode_request(r)), len(packet) / copy))
        rows.append((f"BATCH decode, {SAMPLES} × ({inputs} in, 2 out)", len(packet),
                     len(packet) / median_s(lambda p=packet: packets.decode_request(p)), len(packet) / copy))

        def fragments(p: bytes = packet, framer: datagrams.Framer = FRAMER) -> None:
            r = datagrams.Reassembler()
            for d in framer.seal(p, 7, 1):  # as the source and the worker do: one Framer, CRC-32 tags
                sealed = framer.open(d)
                r.feed(sealed.rid, sealed.body)

        rows.append((f"to datagrams (CRC-32) + reassembly, {SAMPLES} × ({inputs} in, 2 out)", len(packet),
                     len(packet) / median_s(fragments), len(packet) / copy))
    m = model()
    desc = encode_model(m)
    copy = median_s(lambda: bytes(bytearray(desc)))
    rows.append(("model descriptor encode (conv 32×16×3×3 + linear 40×2048)", len(desc),
                 len(desc) / median_s(lambda: encode_model(m)), len(desc) / copy))
    rows.append(("model descriptor decode (same)", len(desc),
                 len(desc) / median_s(lambda: decode_model(Reader(desc, "bench"))), len(desc) / copy))
    return rows


async def round_trips(address: tuple[str, int], inputs: int) -> dict[str, float]:
    rng = np.random.default_rng(2)
    req = batch(inputs, rng)
    targets = req.targets
    async with DataSource(address, timeout=0.2) as src:
        await src.hello(timeout=20.0)
        await src.assign_pipeline(inputs)
        await src.assign_model(inputs, 1, ModelSpec([linear(np.zeros((2, inputs), np.float32))]))
        send, trained = [], []
        for i in range(2 * ROUND_TRIPS):
            t0 = time.perf_counter()
            await src.send_batch(req.inputs, targets)
            t1 = time.perf_counter()
            if i % 2:
                await src.metric(1, Metric.MSE)
                trained.append(time.perf_counter() - t0)
            else:
                send.append(t1 - t0)
        sent = src.stats.datagrams_sent
        return {"send_ms": statistics.median(send) * 1e3, "trained_ms": statistics.median(trained) * 1e3,
                "datagrams": len(datagrams.to_datagrams(packets.encode_request(req), 1)),
                "bytes": len(packets.encode_request(req)), "retransmissions": src.stats.retransmissions,
                "all_datagrams": sent}


def main() -> None:
    rows = codec_rows()
    with training.worker_process() as worker:
        trips = {n: asyncio.run(round_trips(worker.address, n)) for n in (8, 64)}
    lines = [
        "# Team Tensor protocol",
        "",
        "`python bench/bench_teamtensor.py`; 2 shared cores. Codec: MB/s of packet bytes from the median "
        f"thread CPU time of {REPEATS} calls; baseline `bytes(bytearray(packet))` (two copies) timed the "
        "same way in the same run.",
        "",
        "| operation | packet bytes | codec MB/s | bytes copy MB/s | codec / copy |",
        "|---|---:|---:|---:|---:|",
    ]
    for what, size, codec, copy in rows:
        lines.append(f"| {what} | {size:,} | {codec / 1e6:,.0f} | {copy / 1e6:,.0f} "
                     f"| {ratio(codec, copy, 3)} |")
    lines += [
        "",
        f"Round trip of a {SAMPLES}-sample batch on loopback: this process is the Data Source, "
        "`libredgetpu-ros tt-worker` runs in a child process; wall time, median of "
        f"{ROUND_TRIPS} batches each. *send* = all fragments out, ACK back (queued); *send + train* = the "
        "same followed by GET_MT, which the worker answers after training the batch.",
        "",
        "| sample | packet bytes | datagrams (≤ 1400 B) | send (ms) | send + train (ms) | retransmissions |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n, r in trips.items():
        lines.append(f"| {n} in, 2 out | {r['bytes']:,} | {r['datagrams']} | {r['send_ms']:.2f} | "
                     f"{r['trained_ms']:.2f} | {r['retransmissions']} |")
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
