"""Run one DarwiNN executable over a transport, strictly in the order of its DMA hints.

``schedule(executable)`` turns the hints into transfer steps (pure, shared with ``plan``); ``execute``
performs them. What the hardware needs, learnt by libredgetpu on real devices and confirmed by libedgetpu's
``dma_info_extractor.cc``:

- every input hint addresses *its own* input layer (SSD segment 1 has three), and pieces may overlap;
- a hint may reach a few bytes past the end of the tensor (``allow_overflow``): those bytes are zeros;
- instruction chunks can be interleaved with input pieces (DeepLab);
- an EXECUTION_ONLY executable can carry parameters of its own, sent during inference;
- output data arrives on 0x81 in transfers that do not line up with the hint steps: every read asks for
  exactly 32 KiB (the piece size of the hardware-validated libredgetpu driver; libedgetpu keeps 32 reads of
  1 KiB in flight, the same 32 KiB), whatever comes back is kept and surplus bytes feed the next output step;
- the end of an executable is a 16-byte event on 0x82 (a scalar-core host interrupt).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.edgetpu.registers import DescriptorTag
from libredgetpu_ros.edgetpu.transport import DEFAULT_TIMEOUT_MS, Transport
from libredgetpu_ros.errors import DeviceLostError, InputError, ModelFormatError

MAX_EMPTY_READS = 64  # consecutive zero-length bulk-in completions before the device is declared lost


@dataclasses.dataclass(frozen=True)
class Step:
    """One transfer of an inference. ``padded`` counts zero bytes appended past the end of the source."""

    index: int
    action: str  # "write" | "read" | "status" | "fence"
    tag: DescriptorTag | None
    source: str  # "instructions", "input", "parameters", "output", "event"
    layer: str | None  # input/output layer name
    layer_index: int | None  # index into input_layers / output_layers, or the instruction chunk index
    offset: int
    size: int
    padded: int = 0

    def describe(self) -> str:
        if self.action == "fence":
            return "fence"
        if self.action == "status":
            return f"wait status on 0x{r.EP_EVENT_IN:02x} ({r.EVENT_PACKET_SIZE} bytes)"
        if self.source == "instructions":
            what = f"instructions chunk {self.layer_index}"
        elif self.source == "parameters":
            what = "parameters"
        else:
            what = f"{self.source} layer {self.layer!r}"
        verb = (
            "read"
            if self.action == "read"
            else f"write tag {int(self.tag)}"
            if self.tag is not None
            else "write"
        )
        pad = f" (+{self.padded} zero bytes)" if self.padded else ""
        return f"{verb} {what} [{self.offset}:{self.offset + self.size}] {self.size} bytes{pad}"


def _kind(hint: Any) -> str:
    return str(getattr(hint, "kind", "")).lower()


def _layer_index(layers: Sequence[Any], name: str | None, what: str, hint_no: int) -> int:
    if name:
        for i, layer in enumerate(layers):
            if layer.name == name:
                return i
    if len(layers) == 1:
        return 0
    names = [layer.name for layer in layers]
    raise ModelFormatError(f"DMA hint {hint_no} names {what} layer {name!r}, not one of {names}")


def schedule(
    executable: Any, parameters_size: int | None = None, input_sizes: Sequence[int] | None = None
) -> list[Step]:
    """Transfer steps of one run of ``executable``, following its DMA hints (or a plain order without hints).

    ``input_sizes`` are the real tensor sizes (default: the layer sizes); bytes a hint reaches past them are
    reported as ``padded``.
    """
    inputs = list(executable.input_layers)
    outputs = list(executable.output_layers)
    bitstreams = list(executable.instruction_bitstreams)
    n_params = len(executable.parameters) if parameters_size is None else parameters_size
    steps: list[Step] = []

    def add(**kw: Any) -> None:
        steps.append(Step(index=len(steps), **kw))

    hints = list(executable.dma_hints or [])
    if not hints:
        # No hints (never seen in compiler output, but allowed by the schema): instructions, parameters,
        # inputs,
        # outputs, status, like libedgetpu's first-instruction extractor would order them.
        for i, bs in enumerate(bitstreams):
            add(
                action="write",
                tag=DescriptorTag.INSTRUCTIONS,
                source="instructions",
                layer=None,
                layer_index=i,
                offset=0,
                size=len(bs.data),
            )
        if n_params:
            add(
                action="write",
                tag=DescriptorTag.PARAMETERS,
                source="parameters",
                layer=None,
                layer_index=None,
                offset=0,
                size=n_params,
            )
        for i, layer in enumerate(inputs):
            add(
                action="write",
                tag=DescriptorTag.INPUT_ACTIVATIONS,
                source="input",
                layer=layer.name,
                layer_index=i,
                offset=0,
                size=layer.size_bytes,
            )
        for i, layer in enumerate(outputs):
            add(
                action="read",
                tag=None,
                source="output",
                layer=layer.name,
                layer_index=i,
                offset=0,
                size=layer.size_bytes,
            )
        add(
            action="status",
            tag=None,
            source="event",
            layer=None,
            layer_index=None,
            offset=0,
            size=r.EVENT_PACKET_SIZE,
        )
        return steps

    for n, hint in enumerate(hints):
        kind = _kind(hint)
        if kind == "instruction":
            chunk = int(hint.chunk_index)
            if not 0 <= chunk < len(bitstreams):
                raise ModelFormatError(
                    f"DMA hint {n} asks for instruction chunk {chunk}; the executable has {len(bitstreams)}"
                )
            add(
                action="write",
                tag=DescriptorTag.INSTRUCTIONS,
                source="instructions",
                layer=None,
                layer_index=chunk,
                offset=0,
                size=len(bitstreams[chunk].data),
            )
        elif kind == "interrupt":
            add(
                action="status",
                tag=None,
                source="event",
                layer=None,
                layer_index=None,
                offset=0,
                size=r.EVENT_PACKET_SIZE,
            )
        elif kind == "fence":
            add(action="fence", tag=None, source="fence", layer=None, layer_index=None, offset=0, size=0)
        elif kind == "descriptor":
            buffer_type = str(hint.buffer_type).lower()
            offset, size = int(hint.offset), int(hint.size)
            if buffer_type == "input":
                i = _layer_index(inputs, hint.layer_name, "input", n)
                end = inputs[i].size_bytes if input_sizes is None else int(input_sizes[i])
                add(
                    action="write",
                    tag=DescriptorTag.INPUT_ACTIVATIONS,
                    source="input",
                    layer=inputs[i].name,
                    layer_index=i,
                    offset=offset,
                    size=size,
                    padded=max(0, offset + size - max(end, offset)),
                )
            elif buffer_type == "parameter":
                if offset + size > n_params:
                    raise ModelFormatError(
                        f"DMA hint {n} reads parameters [{offset}:{offset + size}] but the "
                        f"executable has {n_params} parameter bytes"
                    )
                add(
                    action="write",
                    tag=DescriptorTag.PARAMETERS,
                    source="parameters",
                    layer=None,
                    layer_index=None,
                    offset=offset,
                    size=size,
                )
            elif buffer_type == "output":
                i = _layer_index(outputs, hint.layer_name, "output", n)
                add(
                    action="read",
                    tag=None,
                    source="output",
                    layer=outputs[i].name,
                    layer_index=i,
                    offset=offset,
                    size=size,
                )
            else:
                raise ModelFormatError(f"DMA hint {n}: buffer type {buffer_type!r} cannot be moved over USB")
        else:
            raise ModelFormatError(f"DMA hint {n} has unknown kind {kind!r}")
    return steps


def as_bytes(value: bytes | bytearray | memoryview | np.ndarray) -> memoryview:
    if isinstance(value, np.ndarray):
        return memoryview(np.ascontiguousarray(value)).cast("B")
    return memoryview(value).cast("B")


def _header(length: int, tag: DescriptorTag) -> bytes:
    return struct.pack("<IBxxx", length, int(tag) & 0xF)


class OutputStream:
    """Bytes from the output endpoint, carried across hint steps; every request is one 32 KiB piece.

    A larger request would be split by libusb anyway; a request that is not a multiple of the endpoint's
    packet size can overflow when the device sends a full packet, and 32 KiB is a multiple of both USB2's
    512-byte and USB3's 1024-byte bulk packets.
    """

    def __init__(self, transport: Transport, timeout_ms: int) -> None:
        self.transport = transport
        self.timeout_ms = timeout_ms
        self.pending = bytearray()

    def take(self, size: int) -> bytes:
        empty = 0
        while len(self.pending) < size:
            missing = size - len(self.pending)
            got = self.transport.bulk_read(r.EP_BULK_IN_OUTPUT, r.BULK_IN_CHUNK, self.timeout_ms)
            if got:
                self.pending += got
                empty = 0
            else:
                empty += 1
                if empty >= MAX_EMPTY_READS:
                    raise DeviceLostError(
                        f"output endpoint returned no data {empty} times in a row "
                        f"({missing} bytes still expected)"
                    )
        out = bytes(self.pending[:size])
        del self.pending[:size]
        return out


def _padded_inputs(executable: Any, inputs: Sequence[Any], steps: Sequence[Step]) -> list[np.ndarray]:
    layers = list(executable.input_layers)
    if len(inputs) != len(layers):
        raise InputError(
            f"the executable has {len(layers)} input layers {[layer.name for layer in layers]}, "
            f"got {len(inputs)} inputs"
        )
    reach = [0] * len(layers)
    for step in steps:
        if step.source == "input":
            reach[step.layer_index] = max(reach[step.layer_index], step.offset + step.size)
    buffers = []
    for layer, value, need in zip(layers, inputs, reach, strict=True):
        data = np.frombuffer(as_bytes(value), dtype=np.uint8)
        if data.size > layer.size_bytes or data.size == 0:
            raise InputError(
                f"input layer {layer.name!r} takes up to {layer.size_bytes} bytes, got {data.size}"
            )
        if need > data.size:  # the DMA reads past the tensor end: zero padding, not garbage
            data = np.concatenate([data, np.zeros(need - data.size, np.uint8)])
        buffers.append(data)
    return buffers


def execute(
    transport: Transport,
    executable: Any,
    inputs: Sequence[Any] = (),
    parameters: bytes | memoryview | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> list[bytes]:
    """Run ``executable`` once; return the raw bytes of every output layer (in ``output_layers`` order)."""
    params = as_bytes(executable.parameters if parameters is None else parameters)
    sizes = [as_bytes(value).nbytes for value in inputs]
    steps = schedule(executable, parameters_size=params.nbytes, input_sizes=sizes if sizes else None)
    input_buffers = _padded_inputs(executable, inputs, steps)
    outputs = list(executable.output_layers)
    out_size = [layer.size_bytes for layer in outputs]
    for step in steps:
        if step.source == "output":
            out_size[step.layer_index] = max(out_size[step.layer_index], step.offset + step.size)
    out_buffers = [bytearray(n) for n in out_size]
    stream = OutputStream(transport, timeout_ms)

    for step in steps:
        if step.action == "write":
            if step.source == "instructions":
                payload = as_bytes(executable.instruction_bitstreams[step.layer_index].data)
            elif step.source == "parameters":
                payload = params[step.offset : step.offset + step.size]
            else:
                payload = memoryview(input_buffers[step.layer_index][step.offset : step.offset + step.size])
            transport.bulk_write(r.EP_BULK_OUT, _header(payload.nbytes, step.tag), timeout_ms)
            for start in range(0, payload.nbytes, r.MAX_BULK_OUT_CHUNK):
                transport.bulk_write(r.EP_BULK_OUT, payload[start : start + r.MAX_BULK_OUT_CHUNK], timeout_ms)
        elif step.action == "read":
            out_buffers[step.layer_index][step.offset : step.offset + step.size] = stream.take(step.size)
        elif step.action == "status":
            event = transport.bulk_read(r.EP_EVENT_IN, r.EVENT_PACKET_SIZE, timeout_ms)
            if len(event) != r.EVENT_PACKET_SIZE:
                raise DeviceLostError(f"status packet of {len(event)} bytes, expected {r.EVENT_PACKET_SIZE}")
            tag = event[12] & 0xF
            if not DescriptorTag.INTERRUPT0 <= tag <= DescriptorTag.INTERRUPT3:
                raise DeviceLostError(
                    f"unexpected event tag {tag} on 0x{r.EP_EVENT_IN:02x} (expected an "
                    "end-of-executable interrupt, 4..7)"
                )
        # "fence": transfers here are synchronous, so everything before it has completed already.
    return [bytes(buf[: layer.size_bytes]) for buf, layer in zip(out_buffers, outputs, strict=True)]
