"""The CPU twin of a compiled model, cut so that it ends exactly at the Edge TPU boundary.

``edgetpu_compiler`` keeps the tensor names of the model it compiled, so the uncompiled model (the "twin")
contains tensors named like the ``edgetpu-custom-op`` outputs. LiteRT runs the twin, but the twin also holds
the ops that follow the boundary: CPU custom ops LiteRT cannot resolve (``PosenetDecoderOp``) and tails we
re-implement in post-processing (DeepLab's resize + argmax). We drop them without rebuilding the flatbuffer:

- the ops after the boundary are a suffix of subgraph 0's ``operators`` vector, so shrinking the vector's
  length field in place removes them;
- subgraph 0's ``outputs`` field is pointed at a new int32 vector appended to the end of the buffer
  (flatbuffer offsets are unsigned and point forward, so an appended vector is reachable from any field).

Everything else (tensors, buffers, the dropped ops' bytes) stays where it was; LiteRT ignores what nothing
references. The byte positions come from ``TfliteModel.subgraph_layout()`` (see docs/formats.md).
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from libredgetpu_ros.backends.base import BoundaryInfo
from libredgetpu_ros.errors import InputError, ModelFormatError
from libredgetpu_ros.paths import check_regular, file_kind


def find_twin(model_path: Path, cpu_model_path: Path | None = None) -> Path:
    """The CPU twin of ``model_path``: the explicit path, or the compiled name without ``_edgetpu``."""
    if cpu_model_path is not None:
        path = Path(cpu_model_path)
        check_regular(path, "CPU model")  # a FIFO or a device is named by its kind (read later, bounded)
        return path
    model_path = Path(model_path)
    stem = model_path.stem
    if "_edgetpu" not in stem:
        raise InputError(f"{model_path}: cannot derive the CPU twin's name (no '_edgetpu' in the file name); "
                         f"pass the uncompiled model with --cpu-model")
    guess = model_path.with_name(stem.replace("_edgetpu", "", 1) + model_path.suffix)
    if file_kind(guess) != "missing":
        check_regular(guess, f"{model_path}: CPU twin")
    else:
        raise InputError(f"{model_path}: CPU twin {guess.name} not found beside it; the CPU backend needs "
                         f"the uncompiled model (pass it with --cpu-model)")
    return guess


@dataclass(frozen=True, slots=True)
class CutTwin:
    """A twin cut at the boundary: bytes LiteRT can load plus what was done to them."""

    path: Path
    content: bytes
    output_names: tuple[str, ...]
    kept_ops: int
    dropped_ops: tuple[str, ...]


def cut_at_tensors(content: bytes, output_names: Sequence[str], where: str = "twin",
                   expected_dropped: Sequence[str] | None = None) -> tuple[bytes, int, tuple[str, ...]]:
    """Cut a TFLite model so subgraph 0 ends at the named tensors.

    Returns ``(new_bytes, kept_op_count, dropped_opcode_names)``. Raises ModelFormatError when a tensor is
    missing, when keeping every producer of the outputs would keep an op that depends on nothing but
    what is dropped, or when ``expected_dropped`` (the compiled model's CPU ops after the boundary) does not
    match the dropped ops as a multiset.
    """
    from libredgetpu_ros.formats import load_model

    model = load_model(content)
    indices = []
    for name in output_names:
        tensor = _tensor_named(model, name)
        if tensor is None:
            raise ModelFormatError(f"{where}: no tensor named {name!r} (the Edge TPU op's output); is it the "
                                   f"uncompiled version of this model?")
        indices.append(int(tensor.index))

    producers = [model.producer(i) for i in indices]
    missing = [name for name, op in zip(output_names, producers, strict=True) if op is None]
    if missing:
        raise ModelFormatError(f"{where}: tensor(s) {missing} are not produced by any op")
    kept = max(op.index for op in producers) + 1
    dropped_ops = list(model.operators)[kept:]
    dropped = tuple(op.opcode_name for op in dropped_ops)

    # Every dropped op must lie after the boundary: it consumes only boundary tensors, constants/graph
    # inputs, or outputs of other dropped ops. Otherwise the graph is not "prefix then tail".
    reachable = set(indices) | {int(t) for op in dropped_ops for t in op.outputs}
    kept_outputs = {int(t) for op in list(model.operators)[:kept] for t in op.outputs}
    for op in dropped_ops:
        stray = [int(t) for t in op.inputs if int(t) in kept_outputs and int(t) not in reachable]
        if stray:
            raise ModelFormatError(f"{where}: op {op.index} ({op.opcode_name}) after the boundary reads "
                                   f"tensor(s) {stray} computed before it; the boundary is not a clean cut")
    if expected_dropped is not None and Counter(dropped) != Counter(expected_dropped):
        raise ModelFormatError(f"{where}: cutting at {list(output_names)} drops {list(dropped)}, but the "
                               f"compiled model runs {list(expected_dropped)} after its Edge TPU op")

    layout = model.subgraph_layout()
    if layout.operators_count != len(model.operators):
        raise ModelFormatError(f"{where}: operators vector holds {layout.operators_count} ops, the reader "
                               f"saw {len(model.operators)}")
    buf = bytearray(content)
    struct.pack_into("<I", buf, layout.operators_vector, kept)
    buf.extend(b"\0" * (-len(buf) % 4))  # vectors of 32-bit scalars are 4-byte aligned
    vector_pos = len(buf)
    buf.extend(struct.pack(f"<I{len(indices)}i", len(indices), *indices))
    struct.pack_into("<I", buf, layout.outputs_field, vector_pos - layout.outputs_field)
    return bytes(buf), kept, dropped


def _tensor_named(model, name: str):
    try:
        return model.tensor_by_name(name)
    except ModelFormatError:
        return None


def cut_twin(boundary: BoundaryInfo, twin_path: Path) -> CutTwin:
    """Read ``twin_path`` and cut it at the boundary's output tensors (checked against the compiled model)."""
    from libredgetpu_ros.formats.tflite import MAX_MODEL_BYTES
    from libredgetpu_ros.paths import read_regular

    content = read_regular(twin_path, "CPU model", MAX_MODEL_BYTES, ModelFormatError)
    if boundary.cpu_ops_before:
        raise ModelFormatError(f"{boundary.model_path}: CPU ops {list(boundary.cpu_ops_before)} run before "
                               f"the Edge TPU op; the CPU backend only supports models whose Edge TPU op "
                               f"reads the graph inputs")
    new, kept, dropped = cut_at_tensors(content, boundary.output_names, where=str(twin_path),
                                        expected_dropped=boundary.cpu_ops_after)
    return CutTwin(path=Path(twin_path), content=new, output_names=boundary.output_names, kept_ops=kept,
                   dropped_ops=dropped)
