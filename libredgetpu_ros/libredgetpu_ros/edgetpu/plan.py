"""The exact transfer schedule of one inference, computed by running the real executor against the recording
double (a dry run: no device). Used by ``libredgetpu-ros plan``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.edgetpu.executor import execute, schedule
from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator
from libredgetpu_ros.edgetpu.transport import Call, RecordingTransport
from libredgetpu_ros.errors import ModelFormatError

MAX_PLAN_ACTIVATION_BYTES = 256 << 20  # the DarwiNN reader's cap for one executable, for a whole model


def _transfers(calls: list[Call]) -> list[dict[str, Any]]:
    rows = []
    for call in calls:
        if call.kind == "bulk_write" and call.length == r.HEADER_SIZE and call.data:
            length = int.from_bytes(call.data[:4], "little")
            rows.append(
                {"op": "header", "endpoint": call.endpoint, "tag": call.data[4] & 0xF, "length": length}
            )
        elif call.kind == "bulk_write":
            rows.append({"op": "bulk_out", "endpoint": call.endpoint, "bytes": call.length})
        elif call.kind == "bulk_read":
            rows.append({"op": "bulk_in", "endpoint": call.endpoint, "requested": call.length})
    return rows


def plan_executable(executable: Any, input_sizes: list[int] | None = None) -> dict[str, Any]:
    """Steps of one executable plus the USB transfers the executor issued for it against the double."""
    sizes = input_sizes or [layer.size_bytes for layer in executable.input_layers]
    steps = schedule(executable, input_sizes=sizes)
    out_bytes = sum(s.size for s in steps if s.action == "read")
    sim = SimulatedAccelerator(outputs=bytes(out_bytes))
    transport = RecordingTransport(sim, keep_payloads=False)
    inputs = [np.zeros(n, np.uint8) for n in sizes]
    execute(transport, executable, inputs)
    return {
        "type": executable.type.name,
        "name": executable.name,
        "parameter_caching_token": f"0x{executable.parameter_caching_token:016x}",
        "steps": [
            {
                "step": s.index,
                "action": s.action,
                "tag": None if s.tag is None else int(s.tag),
                "source": s.source,
                "layer": s.layer,
                "chunk": s.layer_index if s.source == "instructions" else None,
                "offset": s.offset,
                "size": s.size,
                "padded": s.padded,
                "text": s.describe(),
            }
            for s in steps
        ],
        "transfers": _transfers(transport.calls),
    }


def _input_sizes(model: Any, op: Any, layers: list[Any]) -> list[int] | None:
    """Sizes of the op's input tensors in the executable's layer order, each checked to fit its layer
    before anything is allocated; None when the names differ (then the layer sizes are used)."""
    what = f"{model.path or 'model bytes'}: operator {op.index} ({op.opcode_name})"
    if len(op.inputs) != len(layers) or any(i < 0 for i in op.inputs):
        raise ModelFormatError(f"{what} has input tensors {list(op.inputs)}, but its executable has "
                               f"{len(layers)} input layers {[layer.name for layer in layers]}")
    by_name = {model.tensors[i].name: model.tensors[i] for i in op.inputs}
    if set(by_name) != {layer.name for layer in layers}:
        return None  # names differ (renamed tensors): the executable's own layer sizes
    sizes = []
    for layer in layers:  # executor order is the executable's layer order
        tensor = by_name[layer.name]
        if tensor.nbytes > layer.size_bytes:
            raise ModelFormatError(f"{what}: input tensor {tensor.name!r} of shape {list(tensor.shape)} "
                                   f"holds {tensor.nbytes} bytes, more than its layer's size_bytes "
                                   f"{layer.size_bytes}")
        sizes.append(int(tensor.nbytes))
    return sizes


def plan_model(source: Path | str | bytes, cached: bool = False) -> dict[str, Any]:
    """One inference of every Edge TPU op in ``source`` (a path or the file's bytes); ``cached`` assumes
    the parameters are on chip."""
    from libredgetpu_ros.formats import load_model

    model = load_model(source)
    name = str(model.path) if model.path is not None else "model bytes"
    if not model.edgetpu_ops():
        raise ModelFormatError(
            f"{name}: no edgetpu-custom-op in this model (a CPU-only model has no USB schedule; "
            "compile it with edgetpu_compiler)"
        )
    packages = [(op, model.darwinn(op)) for op in model.edgetpu_ops()]
    # Each executable's activations are capped by the reader; many ops could still add up (the dry run
    # allocates them all in turn), so the whole plan gets the same cap.
    total = sum(layer.size_bytes for _, package in packages for exe in package.executables
                for layer in exe.input_layers + exe.output_layers)
    if total > MAX_PLAN_ACTIVATION_BYTES:
        raise ModelFormatError(f"{name}: its {len(packages)} Edge TPU ops move {total} bytes of activations "
                               f"in one inference, more than {MAX_PLAN_ACTIVATION_BYTES}")
    ops = []
    for op, package in packages:
        sizes = _input_sizes(model, op, package.runnable.input_layers)
        executables = []
        if package.parameter_caching is not None and package.execution_only is not None:
            if not cached:
                executables.append(plan_executable(package.parameter_caching))
            executables.append(plan_executable(package.execution_only, sizes))
        else:
            executables.append(plan_executable(package.runnable, sizes))
        ops.append({"operator": op.index, "executables": executables})
    return {"model": name, "cached": cached, "operators": ops}


def format_plan(plan: dict[str, Any]) -> str:
    lines = [f"{plan['model']} ({'parameters cached' if plan['cached'] else 'cold start'})"]
    for op in plan["operators"]:
        for exe in op["executables"]:
            lines.append(
                f"operator {op['operator']}: {exe['type']} {exe['name']!r} "
                f"token {exe['parameter_caching_token']}"
            )
            for step in exe["steps"]:
                lines.append(f"  {step['step']:3d}  {step['text']}")
            reads = [
                t["requested"] for t in exe["transfers"] if t["op"] == "bulk_in" and t["endpoint"] == 0x81
            ]
            if reads:
                lines.append(
                    f"       output reads: {len(reads)} bulk-in requests of {r.BULK_IN_CHUNK} bytes"
                )
    return "\n".join(lines)
