"""Every packet of the seed: typed requests, their encoders, one strict decoder, and reply codecs.

A packet is the seed's byte layout exactly; on the wire (reliable framing) each datagram also carries our
trailer of session, request id and integrity tag (see ``datagrams.py``). Replies are decoded against the
request they answer (the seed's ACK payload depends on it). Decoders accept exactly the seed's length:
missing or extra bytes, a count that points past the end, an unknown code are all a ``ProtocolError``
naming the field.

Under ``WireFormat.framing == "seed"`` packets take the seed's literal form: GET_MT is ``[09][metric id]``
(no model id: the worker answers for its lowest model id), a NACK may be the bare ``03`` (B_FULL's "no
room", and any NACK to a 1-byte request), RELEASE does not exist; a model descriptor may carry weight
tensors without biases, and a BATCH of one tensor per sample is recognised (:class:`MissingTargets`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from libredgetpu_ros.errors import ProtocolError
from libredgetpu_ros.teamtensor.model import ModelSpec, decode_descriptor, decode_metric_codes, encode_model
from libredgetpu_ros.teamtensor.tensors import decode_samples, encode_samples, single_tensors
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, Metric, Op, Reader, Refusal, WireFormat

ASN_MD_HEAD = struct.Struct(">BHHII")  # opcode, pipeline, model id, descriptor size, number of layers


@dataclass(frozen=True)
class Hello:
    pass


@dataclass(frozen=True)
class AssignPipeline:
    pipeline: int


@dataclass
class AssignModel:
    pipeline: int
    model_id: int
    model: ModelSpec


@dataclass(frozen=True)
class ProbeManagers:  # M_FULL
    pass


@dataclass(frozen=True)
class ProbeQueue:  # B_FULL
    pass


@dataclass
class Batch:
    inputs: np.ndarray
    targets: np.ndarray
    evaluate: bool = False  # True: sent with WireFormat.eval_opcode (0x0b), no weight update


@dataclass(frozen=True)
class GetMetric:
    model_id: int | None  # None: the seed's GET_MT, which names no model
    metric: int


@dataclass(frozen=True)
class GetModel:
    model_id: int


@dataclass(frozen=True)
class Release:  # ours (reliable framing): the Data Source ends its session on the worker
    pass


Request = (Hello | AssignPipeline | AssignModel | ProbeManagers | ProbeQueue | Batch | GetMetric | GetModel
           | Release)
# Requests whose reply is stored for repeats: executing them twice would change the worker twice.
STATE_CHANGING = (AssignPipeline, AssignModel, Batch, Release)


def _u16(value: int, field: str) -> bytes:
    if not 0 <= value <= 0xFFFF:
        raise ProtocolError(f"{field} = {value} does not fit 2 bytes")
    return value.to_bytes(2, "big")


def encode_request(req: Request, wire: WireFormat = DEFAULT_WIRE) -> bytes:
    if isinstance(req, Hello):
        return bytes([Op.HELLO])
    if isinstance(req, AssignPipeline):
        return bytes([Op.ASN_DP]) + _u16(req.pipeline, "pipeline id")
    if isinstance(req, AssignModel):
        desc = encode_model(req.model, wire)
        _u16(req.pipeline, "pipeline id")
        _u16(req.model_id, "model id")
        metrics = req.model.metrics
        return (ASN_MD_HEAD.pack(Op.ASN_MD, req.pipeline, req.model_id, len(desc), len(req.model.layers))
                + desc + bytes([len(metrics), *(int(m) for m in metrics)]))
    if isinstance(req, ProbeManagers):
        return bytes([Op.M_FULL])
    if isinstance(req, ProbeQueue):
        return bytes([Op.B_FULL])
    if isinstance(req, Batch):
        n = len(req.inputs)
        op = wire.eval_opcode if req.evaluate else Op.BATCH
        return bytes([op]) + _u16(n, "number of inputs") + encode_samples(req.inputs, req.targets, wire)
    if isinstance(req, GetMetric):
        if wire.seed:
            return bytes([Op.GET_MT, req.metric & 0xFF])
        if req.model_id is None:
            raise ProtocolError("GET_MT: the reliable framing names the model (model id is None)")
        return bytes([Op.GET_MT]) + _u16(req.model_id, "model id") + bytes([req.metric & 0xFF])
    if isinstance(req, GetModel):
        return bytes([Op.GET_MD]) + _u16(req.model_id, "model id")
    if isinstance(req, Release):
        if wire.seed:
            raise ProtocolError("RELEASE: not a packet of the seed framing")
        return bytes([wire.release_opcode])
    raise ProtocolError(f"not a request: {type(req).__name__}")


def decode_request(packet: bytes | memoryview, wire: WireFormat = DEFAULT_WIRE) -> Request:
    if not len(packet):
        raise ProtocolError("request: empty packet")
    op = packet[0]
    r = Reader(packet, f"request {op:#04x}", 1)
    if op == Op.HELLO:
        req: Request = Hello()
    elif op == Op.ASN_DP:
        r.what = "ASN_DP"
        req = AssignPipeline(r.u16("pipeline id"))
    elif op == Op.ASN_MD:
        req = _decode_assign_model(r, wire)
    elif op == Op.M_FULL:
        req = ProbeManagers()
    elif op == Op.B_FULL:
        req = ProbeQueue()
    elif op in (Op.BATCH, wire.eval_opcode):
        r.what = "BATCH" if op == Op.BATCH else "EVAL BATCH"
        n = r.u16("number of inputs")
        if wire.seed and single_tensors(r, n, wire):
            raise MissingTargets(f"{r.what}: {n} samples of one tensor each (the seed's layout): a sample "
                                 "here is an input tensor then its target tensor")
        x, t = decode_samples(r, n, wire)
        req = Batch(x, t, evaluate=op != Op.BATCH)
    elif op == Op.GET_MT:
        r.what = "GET_MT"
        req = GetMetric(None if wire.seed else r.u16("model id"), r.u8("metric id"))
    elif op == Op.GET_MD:
        r.what = "GET_MD"
        req = GetModel(r.u16("model id"))
    elif op == wire.release_opcode and not wire.seed:
        req = Release()
    else:
        raise ProtocolError(f"request: opcode {op:#04x} is not a request")
    r.done()
    return req


def _decode_assign_model(r: Reader, wire: WireFormat) -> AssignModel:
    r.what = "ASN_MD"
    pipeline, model_id = r.u16("pipeline id"), r.u16("model id")
    size, n_layers = r.u32("size of model descriptor"), r.u32("number of layers")
    desc = Reader(r.take(size, "model descriptor"), "ASN_MD model descriptor")
    model = decode_descriptor(desc, wire)
    if n_layers != len(model.layers):
        raise ProtocolError(f"ASN_MD: number of layers = {n_layers}, the descriptor has {len(model.layers)}")
    metrics = decode_metric_codes(r)
    if metrics != model.metrics:
        raise ProtocolError(f"ASN_MD: metrics {[int(m) for m in metrics]} differ from the descriptor's "
                            f"{[int(m) for m in model.metrics]}")
    return AssignModel(pipeline, model_id, model)


class MissingTargets(ProtocolError):
    """A seed framing BATCH of one tensor per sample: well formed by the seed, but nothing to train on."""


# --------------------------------------------------------------------------------------------------
# Replies: ACK [payload] or NACK [reason].


class Refused(ProtocolError):
    """The worker answered NACK; ``reason`` says why."""

    def __init__(self, request: str, reason: int, nonce: int | None = None) -> None:
        try:
            name = Refusal(reason).name
        except ValueError:
            name = "no reason given (seed framing)" if reason == 0 else f"reason {reason:#04x}"
        super().__init__(f"worker refused {request}: {name}")
        self.reason = reason
        self.nonce = nonce  # CHALLENGE: the session number to claim with


def ack(payload: bytes = b"") -> bytes:
    return bytes([Op.ACK]) + payload


def nack(reason: Refusal) -> bytes:
    """``03 [reason]``; under the seed framing B_FULL's "no room" is the seed's bare ``03`` (the worker
    makes that one), and no NACK is longer than the packet it answers (a 1-byte request gets ``03``)."""
    return bytes([Op.NACK, int(reason)])


def nack_challenge(nonce: int) -> bytes:
    """NACK CHALLENGE (keyed worker, reliable framing): claim again with session number ``nonce``."""
    return bytes([Op.NACK, Refusal.CHALLENGE]) + nonce.to_bytes(4, "big")


def ack_u16(value: int) -> bytes:
    return ack(_u16(value, "ACK value"))


def ack_metric(value: float, wire: WireFormat = DEFAULT_WIRE) -> bytes:
    return ack(np.array([value], wire.metric).tobytes())


def ack_model(model: ModelSpec, wire: WireFormat = DEFAULT_WIRE) -> bytes:
    return ack(encode_model(model, wire))


def decode_reply(req: Request, packet: bytes | memoryview, wire: WireFormat = DEFAULT_WIRE):
    """The value an ACK to ``req`` carries (None when it carries none); NACK raises :class:`Refused`,
    except for B_FULL where NACK is the answer "no space" (False)."""
    name = type(req).__name__
    if not len(packet):
        raise ProtocolError(f"reply to {name}: empty packet")
    r = Reader(packet, f"reply to {name}", 1)
    if packet[0] == Op.NACK:
        reason = r.u8("NACK reason") if r.remaining or not wire.seed else 0  # seed: bare 03 too
        nonce = r.u32("challenge nonce") if reason == Refusal.CHALLENGE and not wire.seed else None
        r.done()
        if isinstance(req, ProbeQueue):
            return False
        raise Refused(name, reason, nonce)
    if packet[0] != Op.ACK:
        raise ProtocolError(f"reply to {name}: opcode {packet[0]:#04x} is neither ACK nor NACK")
    value: object = None
    if isinstance(req, AssignPipeline):
        value = r.u16("pipeline id")
        if value != req.pipeline:
            raise ProtocolError(f"reply to ASN_DP: pipeline id {value}, asked for {req.pipeline}")
    elif isinstance(req, AssignModel | ProbeManagers):
        value = r.u16("number of models" if isinstance(req, AssignModel) else "available model managers")
    elif isinstance(req, ProbeQueue):
        value = True
    elif isinstance(req, GetMetric):
        value = float(np.frombuffer(r.take(wire.metric.itemsize, "metric value"), wire.metric)[0])
    elif isinstance(req, GetModel):
        value = decode_descriptor(r, wire)
    r.done()
    return value


def metric_of(code: int) -> Metric:
    try:
        return Metric(code)
    except ValueError:
        raise ProtocolError(f"metric id {code:#04x} is not a known metric") from None
