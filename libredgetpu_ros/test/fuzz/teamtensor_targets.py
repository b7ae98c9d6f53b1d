"""Fuzz targets of the Team Tensor worker: model acceptance and memory budget (issue 27), the seed framing's
answers and keyed claims under replay (issue 30).

``teamtensor_model``: a mutated ASN_MD packet (seeds: a Linear model, an MLP, the classification ConvNet and a
strided, padded Conv2D) goes to a fresh ``WorkerCore`` from the session's owner; if the worker accepts the
model, a batch of two samples of the largest input its descriptor admits is trained and the model read
back. The worker answers every datagram (it never raises); what it must not do is fail *inside*: an
``internal error`` or a batch it could not train (a MemoryError under the harness's address-space cap, from
an under-estimated budget) is raised here as an untyped error and reported. A model refused as BAD_MODEL
(over the 64 MiB budget, or inconsistent) counts as refused. Before issue 27 a 1x1 Conv2D with pad 20000
asked for 6 GB at its first batch.

``teamtensor_seed``: a mutated seed framing packet (seeds: every request of the seed, a bias-less Linear and
MLP, a BATCH of one tensor per sample) to a seed framing worker, first from another address, then from the
owner (who holds a bias-less model). Nothing may be answered with silence but an empty datagram and a BATCH
the owner's worker queued; no reply to the other address and no NACK may be longer than the packet; the
worker never fails inside. A NACK to the owner counts as refused.

``teamtensor_claim``: a keyless attacker's replay plan against a keyed worker whose owner B went silent past
the session timeout after session A released: each byte replays one of A's or B's captured datagrams from
the attacker's, A's or B's address, or advances the clock. B's session must survive every plan (no "taken
over", same session number, B's model intact), and no reply to an address without the session may exceed
twice its datagram. A plan the worker answered (challenges, BUSY) counts as accepted, one it dropped
entirely (integrity, stale ids) as refused.

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
from libredgetpu_ros.teamtensor.tensors import encode_tensor
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, LayerCode, Metric, Op, Refusal, WireFormat
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


# ----- seed framing ------------------------------------------------------------------------------------

SEED_WIRE = WireFormat(framing="seed")
STRANGER = ("127.0.0.1", 40001)


def _seed_linear(*weights: np.ndarray) -> bytes:
    """ASN_MD (pipeline 1, model 1) of Linear layers with ReLU between, weights only (the seed's bytes)."""
    desc = bytearray([2 * len(weights) - 1])
    for i, w in enumerate(weights):
        if i:
            desc.append(LayerCode.RELU)
        desc += bytes([LayerCode.LINEAR]) + encode_tensor(w, SEED_WIRE)
    desc += bytes([1, Metric.MSE])
    head = packets.ASN_MD_HEAD.pack(Op.ASN_MD, 1, 1, len(desc), desc[0])
    return head + bytes(desc) + bytes([1, Metric.MSE])


def _seed_seeds() -> list[bytes]:
    rng = np.random.default_rng(1)
    x, t = rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=(2, 2)).astype(np.float32)
    batch = packets.encode_request(packets.Batch(x, t), SEED_WIRE)
    singles = bytes([Op.BATCH, 0, 2]) + b"".join(encode_tensor(xi, SEED_WIRE) for xi in x)
    return [bytes([Op.HELLO]), bytes([Op.M_FULL]), bytes([Op.B_FULL]), bytes([Op.ASN_DP, 0, 1]),
            _seed_linear(rng.normal(size=(2, 3))),
            _seed_linear(rng.normal(size=(4, 3)), rng.normal(size=(2, 4))),
            packets.encode_request(packets.AssignModel(1, 2, ModelSpec([linear(rng.normal(size=(2, 3)))])),
                                   SEED_WIRE),
            batch, bytes([SEED_WIRE.eval_opcode]) + batch[1:], singles, bytes([Op.GET_MT, Metric.MSE]),
            bytes([Op.GET_MD, 0, 1])]


def consume_seed(data: bytes) -> None:
    core = WorkerCore(WorkerConfig(memory_budget=BUDGET), SEED_WIRE)
    core.handle(PEER, bytes([Op.ASN_DP, 0, 1]))
    core.handle(PEER, _seed_linear(np.ones((2, 3), np.float32)))
    refusal = None
    for who in (STRANGER, PEER):
        queued = len(core.queue)
        replies = core.handle(who, data)
        if not replies:
            if data and not (who == PEER and len(core.queue) > queued):
                raise AssertionError(f"silence to {'the owner' if who == PEER else 'another address'}")
            continue
        (reply,) = replies
        if reply[0] == Op.NACK and len(reply) > len(data):
            raise AssertionError(f"NACK of {len(reply)} bytes to a {len(data)}-byte packet")
        if who == STRANGER and len(reply) > len(data):
            raise AssertionError(f"{len(reply)} bytes to another address for {len(data)}: amplification")
        if who == PEER and reply[0] == Op.NACK:
            refusal = reply
    core.drain()
    if core.stats.rejected.get("internal error") or core.stats.batch_errors:
        raise AssertionError(f"worker failed inside: {dict(core.stats.rejected)}, "
                             f"{core.stats.batch_errors} batch errors")
    if refusal is not None:
        raise ProtocolError(f"owner's packet refused: NACK {refusal[1:].hex() or '(bare)'}")


# ----- keyed claims under replay --------------------------------------------------------------------------

KEY = b"fuzz-key"
A, B, ATTACKER = ("127.0.0.1", 40010), ("127.0.0.1", 40011), ("127.0.0.1", 40666)


class _Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def _keyed(core: WorkerCore, peer: tuple, session: int, requests: list) -> tuple[list[bytes], int]:
    """``requests`` from a key holder at ``peer`` (claims answered with the worker's challenge); the
    datagrams it sent (the capture) and its final session number."""
    framer, sent, rid = datagrams.Framer(key=KEY), [], 0
    for req in requests:
        for _ in range(2):
            rid += 1
            (d,) = framer.seal(packets.encode_request(req), session, rid)
            sent.append(d)
            (reply,) = core.handle(peer, d)
            body = framer.open(reply).body
            if body[0] == Op.NACK and body[1] == Refusal.CHALLENGE:
                session = int.from_bytes(body[2:6], "big")
                continue
            break
    return sent, session


def _claim_scene() -> tuple[WorkerCore, _Clock, list[bytes], int]:
    clock = _Clock()
    core = WorkerCore(WorkerConfig(session_timeout=10.0), key=KEY, clock=clock)
    model = ModelSpec([linear(np.full((2, 3), 0.25, np.float32))], [Metric.MSE])
    x, t = np.ones((2, 3), np.float32), np.zeros((2, 2), np.float32)
    captured, _ = _keyed(core, A, 111, [packets.Hello(), packets.AssignPipeline(1),
                                          packets.AssignModel(1, 3, model), packets.Batch(x, t),
                                          packets.GetModel(3), packets.Release()])
    sent, session = _keyed(core, B, 222, [packets.AssignPipeline(2), packets.AssignModel(2, 7, model),
                                          packets.Batch(x, t)])
    core.drain()
    clock.now += 11.0  # B silent past the timeout
    return core, clock, captured + sent, session


def consume_claim(plan: bytes) -> None:
    core, clock, captured, session = _claim_scene()
    weights = core.managers[7].model.layers[0].weights.copy()
    answered = 0
    for byte in plan:
        op, arg = byte & 3, byte >> 2
        if op == 3:
            clock.now += arg
            continue
        d = captured[arg % len(captured)]
        peer = (ATTACKER, A, B)[op]
        replies = core.handle(peer, d)
        answered += bool(replies)
        owner = core.session is not None and core.session.owns(peer, session)
        if not owner and sum(map(len, replies)) > 2 * len(d):
            raise AssertionError(f"{sum(map(len, replies))} bytes to {peer} for a {len(d)}-byte datagram")
    if core.stats.sessions.get("taken over") or core.session is None or core.session.number != session:
        raise AssertionError(f"B's session lost to a replay: {dict(core.stats.sessions)}")
    if core.pipeline != 2 or list(core.managers) != [7]:
        raise AssertionError(f"B's worker changed: pipeline {core.pipeline}, models {list(core.managers)}")
    core.drain()
    if not np.array_equal(core.managers[7].model.layers[0].weights, weights):
        raise AssertionError("B's model trained by a replayed batch")
    if not answered:
        raise ProtocolError("every replay dropped (integrity, stale ids)")


def _claim_seeds() -> list[bytes]:
    rng = np.random.default_rng(2)
    return [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in (4, 16, 64)] + [
        bytes([4 * i for i in range(16)]), bytes([4 * i + 1 for i in range(16)]),
        bytes([4 * i + 2 for i in range(16)]), bytes([3 + 4 * 63, 4 * 1, 3 + 4 * 63, 4 * 1]),
        bytes([3, 7, 11])]


def targets() -> dict[str, FuzzTarget]:
    return {"teamtensor_model": FuzzTarget("teamtensor_model", _seeds(), consume_model, (InputError,), _hot),
            "teamtensor_seed": FuzzTarget("teamtensor_seed", _seed_seeds(), consume_seed, (InputError,)),
            "teamtensor_claim": FuzzTarget("teamtensor_claim", _claim_seeds(), consume_claim, (InputError,))}


def main() -> int:
    return long_run("long fuzz run of the Team Tensor model acceptance", lambda names: targets(),
                    cases=100_000, time_limit_s=5.0, memory_limit_mb=1024)


if __name__ == "__main__":
    sys.exit(main())
