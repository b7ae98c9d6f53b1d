"""Team Tensor codec: the seed's examples byte for byte, exact round trips, strict rejections."""

from __future__ import annotations

import tracemalloc
import zlib

import numpy as np
import pytest
from libredgetpu_ros.errors import ProtocolError
from libredgetpu_ros.teamtensor import datagrams, nn, packets
from libredgetpu_ros.teamtensor.model import (
    ModelSpec,
    conv2d,
    decode_descriptor,
    decode_model,
    encode_model,
    linear,
    plain,
)
from libredgetpu_ros.teamtensor.tensors import decode_samples, decode_tensor, encode_samples, encode_tensor
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, LayerCode, Metric, Reader, WireFormat

INT_WIRE = WireFormat(value_dtype=">i4")  # the seed's examples are integer tensors


def _words(text: str) -> bytes:
    """The seed's notation: '0x02 0x0003 ...', each token's digit count giving its width (2 hex per byte)."""
    out = bytearray()
    for token in text.split():
        digits = token[2:]
        width = {2: 1, 4: 2}.get(len(digits), 4)  # 8 or 9 digits: a 4-byte word (the seed has 9-digit typos)
        out += int(digits, 16).to_bytes(width, "big")
    return bytes(out)


# The seed's text, with one correction: its first value word reads "0x00000000" where the matrix shown has
# 10; the hex digit 'a' was lost in the seed's transcription, in both examples (the image's 19th word sits
# in the run 0x08 0x09 _ 0x0b). Everything else is verbatim.
SEED_MATRIX = "0x02 0x0003 0x0002 0x0000000a 0x00000004 0x00000006 0x00000010 0x000000008 0x00000003"
SEED_IMAGE = ("0x03 0x0004 0x0003 0x0002 0x0000000a 0x0000000b 0x0000000c 0x00000000d 0x00000004 0x00000005 "
              "0x00000006 0x00000007 0x00000006 0x00000007 0x00000008 0x00000009 0x00000010 0x00000011 "
              "0x00000012 0x00000013 0x00000008 0x00000009 0x0000000a 0x0000000b 0x00000003 0x00000004 "
              "0x00000005 0x00000006")


def test_seed_matrix_example_byte_for_byte():
    matrix = np.array([[10, 16], [4, 8], [6, 3]])  # the seed's matrix (16 = 0x10 in its stream)
    encoded = encode_tensor(matrix, INT_WIRE)
    assert encoded == _words(SEED_MATRIX)
    assert len(encoded) == 1 + 2 * 2 + 6 * 4
    back = decode_tensor(Reader(encoded, "matrix"), INT_WIRE)
    assert back.shape == (3, 2) and (back == matrix).all()


def test_seed_image_example_byte_for_byte():
    stream = _words(SEED_IMAGE)
    image = decode_tensor(Reader(stream, "image"), INT_WIRE)
    assert image.shape == (4, 3, 2)
    # Column-major: the value after T[i][j][k] is T[i+1][j][k].
    assert image[0, 0, 0] == 0x0A and image[1, 0, 0] == 0x0B and image[0, 1, 0] == 0x04
    assert image[0, 0, 1] == 0x10 and image[3, 2, 1] == 0x06
    assert encode_tensor(image, INT_WIRE) == stream


@pytest.mark.parametrize("dtype", [">f4", "<f4", ">f8", ">i4", ">u2", "<i1"])
def test_tensor_round_trip_every_value_type(dtype):
    wire = WireFormat(value_dtype=dtype)
    rng = np.random.default_rng(1)
    for shape in [(), (1,), (7,), (3, 5), (2, 3, 4), (1, 2, 1, 3, 2)]:
        values = (rng.normal(size=shape) * 50).astype(np.dtype(dtype).newbyteorder("="))
        encoded = encode_tensor(values, wire)
        r = Reader(encoded, "t")
        back = decode_tensor(r, wire)
        r.done()
        assert back.shape == values.shape and back.dtype == values.dtype
        assert np.array_equal(back, values)


def test_batch_round_trip_and_layout_matches_single_tensors():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, 2, 3, 4)).astype(np.float32)
    t = rng.normal(size=(5, 3)).astype(np.float32)
    encoded = encode_samples(x, t)
    assert encoded == b"".join(encode_tensor(x[i]) + encode_tensor(t[i]) for i in range(5))
    r = Reader(encoded, "batch")
    bx, bt = decode_samples(r, 5)
    r.done()
    assert np.array_equal(bx, x) and np.array_equal(bt, t)


def _all_layers_model() -> ModelSpec:
    rng = np.random.default_rng(3)
    return ModelSpec([
        conv2d(rng.normal(size=(4, 2, 3, 3)), rng.normal(size=4), pad=1, stride=1, out_width=6, out_height=6),
        plain(LayerCode.RELU), plain(LayerCode.MAXPOOL), plain(LayerCode.FLATTEN),
        linear(rng.normal(size=(3, 36)), rng.normal(size=3)), plain(LayerCode.SOFTMAX),
    ], [Metric.CROSS_ENTROPY, Metric.ACCURACY])


def _models_equal(a: ModelSpec, b: ModelSpec) -> bool:
    if a.metrics != b.metrics or len(a.layers) != len(b.layers):
        return False
    for x, y in zip(a.layers, b.layers, strict=True):
        if (x.code, x.pad, x.stride, x.out_width, x.out_height) != (y.code, y.pad, y.stride, y.out_width,
                                                                     y.out_height):
            return False
        if x.trainable and not (np.array_equal(x.weights, y.weights) and np.array_equal(x.bias, y.bias)):
            return False
    return True


def test_model_descriptor_round_trip_and_layout():
    model = _all_layers_model()
    desc = encode_model(model)
    assert desc[0] == 6 and desc[1] == LayerCode.CONV2D
    assert desc[2:18] == bytes.fromhex("00000001" "00000001" "00000006" "00000006")  # pad, stride, W, H
    assert desc[-3:] == bytes([2, Metric.CROSS_ENTROPY, Metric.ACCURACY])
    r = Reader(desc, "model")
    back = decode_model(r)
    r.done()
    assert _models_equal(back, model)


def test_a_bias_less_descriptor_is_the_seed_framings_only():
    """The seed's Linear/Conv2D bytes (weights only): decoded with a zero, untrained bias under the seed
    framing and encoded back the same way (issue 30, failure 10); the reliable framing keeps one layout."""
    seed = WireFormat(framing="seed")
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    f = np.ones((2, 1, 3, 3), np.float32)
    desc = (bytes([3, LayerCode.CONV2D]) + bytes.fromhex("00000001" "00000001" "00000004" "00000004")
            + encode_tensor(f, seed) + bytes([LayerCode.FLATTEN, LayerCode.LINEAR]) + encode_tensor(w, seed)
            + bytes([1, Metric.MSE]))
    model = decode_descriptor(Reader(desc, "m"), seed)
    assert [ly.has_bias for ly in model.layers if ly.trainable] == [False, False]
    assert not model.layers[2].bias.any() and model.layers[2].bias.shape == (2,)
    assert encode_model(model, seed) == desc
    with pytest.raises(ProtocolError):
        decode_descriptor(Reader(desc, "m"), DEFAULT_WIRE)
    x, t = np.ones((4, 3), np.float32), np.full((4, 2), 5.0, np.float32)
    nn.train_step(model := ModelSpec([linear(w)], [Metric.MSE]), x, t, 0.1, 2)
    assert model.layers[0].bias.any()  # ours trains its bias ...
    seed_linear = bytes([1, LayerCode.LINEAR]) + encode_tensor(w, seed) + bytes([1, Metric.MSE])
    seed_model = decode_descriptor(Reader(seed_linear, "m"), seed)
    nn.train_step(seed_model, x, t, 0.1, 2)
    assert not seed_model.layers[0].bias.any()  # ... the seed's Linear computes W·x: its bias stays zero


def _every_request() -> list[packets.Request]:
    rng = np.random.default_rng(4)
    return [packets.Hello(), packets.AssignPipeline(513), packets.AssignModel(513, 7, _all_layers_model()),
            packets.ProbeManagers(), packets.ProbeQueue(),
            packets.Batch(rng.normal(size=(3, 4)).astype(np.float32),
                          rng.normal(size=(3, 2)).astype(np.float32)),
            packets.Batch(np.ones((2, 1), np.float32), np.zeros((2, 1), np.float32), evaluate=True),
            packets.GetMetric(7, Metric.ACCURACY), packets.GetModel(65535)]


def test_every_request_round_trips_and_has_the_seed_layout():
    for req in _every_request():
        encoded = packets.encode_request(req)
        back = packets.decode_request(encoded)
        assert type(back) is type(req)
        assert packets.encode_request(back) == encoded
    assert packets.encode_request(packets.AssignPipeline(513)) == bytes([0x04, 0x02, 0x01])
    assert packets.encode_request(packets.GetModel(7)) == bytes([0x0A, 0x00, 0x07])
    asn = packets.encode_request(packets.AssignModel(1, 2, _all_layers_model()))
    desc = encode_model(_all_layers_model())
    assert asn[:13] == bytes([0x05, 0, 1, 0, 2]) + len(desc).to_bytes(4, "big") + (6).to_bytes(4, "big")
    assert asn[13:13 + len(desc)] == desc and asn[13 + len(desc):] == bytes([2, 2, 3])
    assert packets.encode_request(packets.Batch(np.ones((2, 1)), np.ones((2, 1)), True))[0] == 0x0B


def test_replies_decode_against_their_request():
    model = _all_layers_model()
    assert packets.decode_reply(packets.Hello(), packets.ack()) is None
    assert packets.decode_reply(packets.AssignPipeline(9), packets.ack_u16(9)) == 9
    assert packets.decode_reply(packets.ProbeManagers(), packets.ack_u16(3)) == 3
    assert packets.decode_reply(packets.ProbeQueue(), packets.ack()) is True
    assert packets.decode_reply(packets.ProbeQueue(), packets.nack(packets.Refusal.QUEUE_FULL)) is False
    assert packets.decode_reply(packets.GetMetric(1, 1), packets.ack_metric(0.25)) == 0.25
    assert _models_equal(packets.decode_reply(packets.GetModel(1), packets.ack_model(model)), model)
    with pytest.raises(packets.Refused, match="UNKNOWN_MODEL"):
        packets.decode_reply(packets.GetModel(1), packets.nack(packets.Refusal.UNKNOWN_MODEL))
    with pytest.raises(ProtocolError, match="pipeline id 8"):
        packets.decode_reply(packets.AssignPipeline(9), packets.ack_u16(8))
    with pytest.raises(ProtocolError, match="trailing"):
        packets.decode_reply(packets.Hello(), packets.ack(b"x"))


def test_every_truncation_and_extension_of_every_request_is_rejected():
    for req in _every_request():
        encoded = packets.encode_request(req)
        for cut in range(len(encoded)):
            with pytest.raises(ProtocolError):
                packets.decode_request(encoded[:cut])
        with pytest.raises(ProtocolError, match="trailing"):
            packets.decode_request(encoded + b"\0")


def test_inconsistent_assign_model_fields_are_rejected():
    good = bytearray(packets.encode_request(packets.AssignModel(1, 2, _all_layers_model())))
    wrong_layers = good[:9] + (5).to_bytes(4, "big") + good[13:]
    with pytest.raises(ProtocolError, match="number of layers = 5"):
        packets.decode_request(bytes(wrong_layers))
    with pytest.raises(ProtocolError, match="differ from the descriptor"):
        packets.decode_request(bytes(good[:-1]) + bytes([Metric.MSE]))
    huge = good[:5] + (0xFFFFFFF0).to_bytes(4, "big") + good[9:]
    with pytest.raises(ProtocolError, match="model descriptor needs"):
        packets.decode_request(bytes(huge))


def test_huge_declared_sizes_allocate_nothing():
    """A header declaring ~10^19 values or 65535 samples in a 40-byte packet fails before any allocation."""
    bomb = bytes([0x08, 0xFF, 0xFF, 8]) + b"\xff\xff" * 8 + b"\0" * 20
    tracemalloc.start()
    with pytest.raises(ProtocolError, match="larger than any array"):
        packets.decode_request(bomb)
    with pytest.raises(ProtocolError, match="needs"):  # a large shape that NumPy could describe
        packets.decode_request(bytes([0x08, 0xFF, 0xFF, 3]) + b"\xff\xff" * 3 + b"\0" * 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 1024


def test_shapes_numpy_cannot_hold_are_protocol_errors():
    """Found by test/fuzz/test_fuzz_teamtensor.py: 191 dimensions, or a zero next to dimensions whose product
    overflows, made NumPy raise ValueError inside the decoder (the worker counted an internal error)."""
    many = bytes([0x08, 0x00, 0x01, 191]) + b"\x00\x01" * 191 + b"\0" * 8
    with pytest.raises(ProtocolError, match="191 dimensions"):
        packets.decode_request(many)
    empty = Reader(bytes([20]) + b"\x00\x00" + b"\xff\xff" * 19, "test")
    with pytest.raises(ProtocolError, match="larger than any array"):
        decode_tensor(empty)


def test_samples_of_different_shapes_are_rejected():
    a = encode_tensor(np.ones(3, np.float32)) + encode_tensor(np.ones(1, np.float32))
    b = encode_tensor(np.ones((3, 1), np.float32)) + encode_tensor(np.ones(1, np.float32))
    with pytest.raises(ProtocolError, match="sample 1 has a different input shape"):
        packets.decode_request(bytes([0x08, 0, 2]) + a + b[:len(a)])


def test_model_validation_names_the_problem():
    with pytest.raises(ProtocolError, match="not a loss"):
        encode_model(ModelSpec([linear(np.ones((1, 1)))], [Metric.ACCURACY]))
    with pytest.raises(ProtocolError, match="final Softmax"):
        encode_model(ModelSpec([linear(np.ones((1, 1)))], [Metric.CROSS_ENTROPY]))
    bad = bytearray(encode_model(ModelSpec([linear(np.ones((2, 2)))])))
    bad[1] = 0x42
    with pytest.raises(ProtocolError, match="layer 0 code = 0x42"):
        decode_model(Reader(bytes(bad), "m"))


def test_wire_format_is_validated():
    with pytest.raises(ProtocolError, match="collide"):
        WireFormat(eval_opcode=0x08)
    with pytest.raises(ProtocolError, match="max_datagram"):
        WireFormat(max_datagram=10)
    with pytest.raises(ProtocolError, match="numeric"):
        WireFormat(value_dtype="U4")


# --------------------------------------------------------------------------------------------------
# Datagrams: fragments and reassembly.


def _fragmented(size: int, rid: int = 77) -> tuple[bytes, list[bytes]]:
    packet = bytes([0x08]) + np.random.default_rng(size).integers(0, 256, size - 1, dtype=np.uint8).tobytes()
    return packet, datagrams.to_datagrams(packet, rid)


def test_fragments_fit_the_datagram_and_reassemble_in_any_order_with_duplicates():
    packet, parts = _fragmented(20_000)
    assert len(parts) > 10 and all(len(p) <= DEFAULT_WIRE.max_datagram for p in parts)
    order = np.random.default_rng(5).permutation(len(parts))
    r = datagrams.Reassembler()
    got = None
    for i in [*order, *order[:3]][: len(parts) + 3]:
        rid, body = datagrams.split(parts[i])
        assert rid == 77
        out = r.feed(("peer", rid), body)
        if out is not None:
            got = out
            break
        r.feed(("peer", rid), body)  # an immediate duplicate changes nothing
    assert got == packet and r.pending_bytes == 0


def test_reliable_trailer_layout_and_every_single_byte_corruption_is_caught():
    single = datagrams.to_datagrams(b"\x01", 5, session=0x0A0B0C0D)
    head = b"\x01" + bytes.fromhex("0a0b0c0d") + bytes.fromhex("00000005")
    assert single == [head + zlib.crc32(head).to_bytes(4, "big")]  # [packet][session][request id][CRC-32]
    framer = datagrams.Framer()
    for packet in (b"\x01", b"\x08\x00\x01" + bytes(range(40)), _fragmented(3000)[0]):
        for d in framer.seal(packet, 7, 9):
            assert framer.open(d).rid == 9
            for pos in range(len(d)):  # every position, every other byte value
                for xor in range(1, 256):
                    bad = bytearray(d)
                    bad[pos] ^= xor
                    with pytest.raises(datagrams.IntegrityError):
                        framer.open(bytes(bad))
    keyed = datagrams.Framer(key=b"robot-cell-7")
    d = keyed.seal(b"\x04\x00\x01", 1, 2)[0]
    assert len(d) == 3 + 8 + 16 and keyed.open(d).body.tobytes() == b"\x04\x00\x01"
    for other in (datagrams.Framer(key=b"robot-cell-8"), framer):  # wrong key, or no key at all
        with pytest.raises(ProtocolError):
            other.open(d)
    seed = datagrams.Framer(WireFormat(framing="seed"))
    assert seed.seal(b"\x01") == [b"\x01"] and seed.open(b"\x02").body.tobytes() == b"\x02"
    with pytest.raises(ProtocolError, match="no fragments"):
        seed.seal(b"\x08" * 70_000)


def test_corrupt_or_inconsistent_fragments_are_rejected():
    packet, parts = _fragmented(5000)
    r = datagrams.Reassembler()
    _, body0 = datagrams.split(parts[0])
    r.feed("k", body0)
    forged = bytearray(body0)
    forged[-1] ^= 0xFF
    with pytest.raises(ProtocolError, match="different bytes"):
        r.feed("k", memoryview(bytes(forged)))
    # A packet whose chunks all arrive but whose CRC does not match.
    bad = bytearray(packet)
    bad[10] ^= 1
    head = datagrams.FRAGMENT_HEADER
    r2 = datagrams.Reassembler()
    chunk = 1000
    with pytest.raises(ProtocolError, match="CRC"):
        for off in range(0, len(bad), chunk):
            header = head.pack(0x0C, len(bad), off, zlib.crc32(packet))
            r2.feed("k", memoryview(header + bad[off:off + chunk]))
    with pytest.raises(ProtocolError, match="past total"):
        r2.feed("x", memoryview(head.pack(0x0C, 10, 8, 0) + b"abc"))
    with pytest.raises(ProtocolError, match="total length"):
        r2.feed("x", memoryview(head.pack(0x0C, DEFAULT_WIRE.max_packet + 1, 0, 0) + b"abc"))


def test_reassembly_memory_is_bounded_by_max_pending():
    r = datagrams.Reassembler(max_pending=4)
    head = datagrams.FRAGMENT_HEADER
    for key in range(100):
        r.feed(key, memoryview(head.pack(0x0C, 10_000, 0, 0) + b"x" * 1000))
    assert len(r._partials) == 4 and r.pending_bytes == 4000 and r.dropped == 96
