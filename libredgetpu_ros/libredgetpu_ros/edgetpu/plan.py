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


def plan_model(path: Path, cached: bool = False) -> dict[str, Any]:
    """One inference of every Edge TPU op in ``path``; ``cached`` assumes the parameters are on chip."""
    from libredgetpu_ros.formats import load_model

    model = load_model(path)
    if not model.edgetpu_ops():
        raise ModelFormatError(
            f"{path}: no edgetpu-custom-op in this model (a CPU-only model has no USB schedule; "
            "compile it with edgetpu_compiler)"
        )
    ops = []
    for op in model.edgetpu_ops():
        package = model.darwinn(op)
        by_name = {layer.name: layer.size_bytes for layer in package.runnable.input_layers}
        tensors = [model.tensors[i] for i in op.inputs]
        sizes = [int(t.nbytes) for t in tensors] if all(t.name in by_name for t in tensors) else None
        if sizes is not None:  # executor order is the executable's layer order
            order = {t.name: int(t.nbytes) for t in tensors}
            sizes = [order[layer.name] for layer in package.runnable.input_layers]
        executables = []
        if package.parameter_caching is not None and package.execution_only is not None:
            if not cached:
                executables.append(plan_executable(package.parameter_caching))
            executables.append(plan_executable(package.execution_only, sizes))
        else:
            executables.append(plan_executable(package.runnable, sizes))
        ops.append({"operator": op.index, "executables": executables})
    return {"model": str(path), "cached": cached, "operators": ops}


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
