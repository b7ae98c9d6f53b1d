"""Fuzz target of the Team Tensor worker's model acceptance and its memory budget (issue 27).

``teamtensor_model``: a mutated ASN_MD packet (seeds: a Linear model, an MLP, the classification ConvNet and a
strided, padded Conv2D) goes to a fresh ``WorkerCore`` from the session's owner; if the worker accepts the
model, a batch of two samples of the largest input its descriptor admits is trained and the model read
back. The worker answers every datagram (it never raises); what it must not do is fail *inside*: an
``internal error`` or a batch it could not train (a MemoryError under the harness's address-space cap, from
an under-estimated budget) is raised here as an untyped error and reported. A model refused as BAD_MODEL
(over the 64 MiB budget, or inconsistent) counts as refused. Before issue 27 a 1x1 Conv2D with pad 20000
asked for 6 GB at its first batch.

``test_fuzz_teamtensor.py`` runs a bounded budget in CI; for a long run::

    nice -n 19 .venv/bin/python libredgetpu_ros/test/fuzz/teamtensor_targets.py --cases 100000 --seed 1
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

try:
    from .harness import FuzzTarget, long_run
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import FuzzTarget, long_run

from libredgetpu_ros.errors import InputError, ProtocolError
from libredgetpu_ros.teamtensor import datagrams, nn, packets
from libredgetpu_ros.teamtensor.model import ModelSpec, conv2d, linear, plain
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, LayerCode, Metric, Op, Refusal
from libredgetpu_ros.teamtensor.worker import MiB, WorkerConfig, WorkerCore

BUDGET = 64 * MiB
PEER = ("127.0.0.1", 40000)


def _seeds() -> list[bytes]:
    rng = np.random.default_rng(0)
    models = [
        ModelSpec([linear(rng.normal(size=(2, 3)))], [Metric.MSE, Metric.MAE]),
        ModelSpec([linear(rng.normal(size=(8, 4))), plain(LayerCode.RELU), linear(rng.normal(size=(2, 8)))],
                  [Metric.MSE]),
        ModelSpec([conv2d(rng.normal(size=(4, 1, 3, 3)), None, pad=1, stride=1, out_width=6, out_height=6),
                   plain(LayerCode.RELU), plain(LayerCode.MAXPOOL), plain(LayerCode.FLATTEN),
                   linear(rng.normal(size=(2, 36))), plain(LayerCode.SOFTMAX)],
                  [Metric.CROSS_ENTROPY, Metric.ACCURACY]),
        ModelSpec([conv2d(rng.normal(size=(2, 3, 5, 5)), None, pad=2, stride=2, out_width=8, out_height=4),
                   plain(LayerCode.RELU), plain(LayerCode.FLATTEN)], [Metric.MSE]),
    ]
    return [packets.encode_request(packets.AssignModel(1, 1, m)) for m in models]


def consume_model(data: bytes) -> None:
    req = packets.decode_request(data)  # a malformed packet: typed ProtocolError (refused)
    if not isinstance(req, packets.AssignModel):
        raise ProtocolError(f"not an ASN_MD: {type(req).__name__}")
    core = WorkerCore(WorkerConfig(memory_budget=BUDGET))
    rids = iter(range(1, 100))

    def send(packet: bytes) -> bytes:
        out = []
        for d in core.framer.seal(packet, 1, next(rids)):
            out += core.handle(PEER, d)
        reassembler = datagrams.Reassembler()
        for d in out:
            body = core.framer.open(d).body
            reply = reassembler.feed("r", body) if reassembler.is_fragment(body) else bytes(body)
        return reply

    send(packets.encode_request(packets.AssignPipeline(req.pipeline)))
    if send(data) == bytes([Op.NACK, Refusal.BAD_MODEL]):
        raise ProtocolError("worker refused the model (BAD_MODEL)")
    shape = nn.largest_input(req.model)
    if shape is not None:
        out_shape = nn.output_shape(req.model, shape, DEFAULT_WIRE.maxpool_window)
        if 2 * 4 * (int(np.prod(shape)) + int(np.prod(out_shape))) > DEFAULT_WIRE.max_packet:
            raise ProtocolError(f"a batch of {shape} samples does not fit a packet")
        batch = packets.Batch(np.zeros((2, *shape), np.float32), np.zeros((2, *out_shape), np.float32))
        send(packets.encode_request(batch))
        send(packets.encode_request(packets.GetModel(req.model_id)))  # trains the batch first
    stats = core.stats
    if stats.rejected.get("internal error") or stats.batch_errors:
        raise AssertionError(f"worker failed inside: {dict(stats.rejected)}, "
                             f"{stats.batch_errors} batch errors")


def _hot(seed: bytes) -> list[tuple[int, int]]:
    return [(0, min(len(seed), 96))]  # header, layer codes, Conv2D words, the first tensor's dimensions


def targets() -> dict[str, FuzzTarget]:
    return {"teamtensor_model": FuzzTarget("teamtensor_model", _seeds(), consume_model, (InputError,), _hot)}


def main() -> int:
    return long_run("long fuzz run of the Team Tensor model acceptance", lambda names: targets(),
                    cases=100_000, time_limit_s=5.0, memory_limit_mb=1024)


if __name__ == "__main__":
    sys.exit(main())
