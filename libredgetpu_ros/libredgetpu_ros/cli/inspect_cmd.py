"""``libredgetpu-ros inspect MODEL [--json]``: what a .tflite file contains, Edge TPU parts included."""

from __future__ import annotations

import argparse
import json
from typing import Any

HELP = "show a model's tensors, operators, Edge TPU executables and DMA hint sequence"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a .tflite file (Edge TPU compiled or CPU)")
    parser.add_argument("--json", action="store_true", help="print JSON instead (schema: docs/formats.md)")


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.formats import load_model

    summary = summarize(load_model(args.model))
    print(to_json(summary) if args.json else render_text(summary))
    return 0


def _plain(value: Any) -> Any:
    """JSON for what FlexBuffers custom options can hold beyond JSON's types: blobs as "0x..." hex."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "0x" + bytes(value).hex()
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_json(summary: dict[str, Any]) -> str:
    """The ``--json`` text of a summary; any decoded custom option (blob, number, string) serializes."""
    return json.dumps(summary, indent=2, default=_plain)


def _tensor(model: Any, index: int) -> dict[str, Any]:
    t = model.tensors[index]
    return {
        "index": t.index,
        "name": t.name,
        "shape": list(t.shape),
        "dtype": t.type_name,
        "quantization": None if t.quantization is None else t.quantization.to_dict(),
    }


def _operator(op: Any) -> dict[str, Any]:
    return {
        "index": op.index,
        "opcode": op.opcode_name,
        "inputs": list(op.inputs),
        "outputs": list(op.outputs),
        "builtin_options": op.builtin_options,
        "custom_options": op.custom_options,
    }


def _executable(exe: Any) -> dict[str, Any]:
    return {
        "type": exe.type.name,
        "name": exe.name,
        "parameter_caching_token": f"0x{exe.parameter_caching_token:016x}",
        "parameter_bytes": len(exe.parameters),
        "instruction_chunk_bytes": [len(b.data) for b in exe.instruction_bitstreams],
        "scratch_bytes": exe.scratch_size,
        "batch_size": exe.batch_size,
        "chip": exe.chip,
        "input_layers": [la.to_dict() for la in exe.input_layers],
        "output_layers": [la.to_dict() for la in exe.output_layers],
        "dma_hints_fully_deterministic": exe.dma_hints_fully_deterministic,
        "dma_hints": [h.to_dict() for h in exe.dma_hints],
    }


def summarize(model: Any) -> dict[str, Any]:
    """The inspect report as plain JSON-able data (keys documented in docs/formats.md)."""
    edgetpu = []
    for op in model.edgetpu_ops():
        package = model.darwinn(op)
        before, after = model.cpu_ops_before(op), model.cpu_ops_after(op)
        edgetpu.append({
            "operator": op.index,
            "inputs": [_tensor(model, i) for i in op.inputs if i >= 0],
            "outputs": [_tensor(model, i) for i in op.outputs],
            "cpu_ops_before": [o.index for o in before],
            "cpu_ops_after": [o.index for o in after],
            "compiler_version": package.compiler_version,
            "executables": [_executable(e) for e in package.executables],
        })
    return {
        "path": str(model.path) if model.path else None,
        "file_bytes": len(model.data),
        "version": model.version,
        "description": model.description,
        "subgraphs": model.num_subgraphs,
        "inputs": [_tensor(model, i) for i in model.inputs],
        "outputs": [_tensor(model, i) for i in model.outputs],
        "operators": [_operator(op) for op in model.operators],
        "edgetpu": edgetpu,
    }


def _fmt_tensor(t: dict[str, Any]) -> str:
    q = t["quantization"]
    quant = ""
    if q:
        if len(q["scale"]) == 1:
            quant = f"  scale={q['scale'][0]:.6g} zero_point={q['zero_point'][0]}"
        else:
            quant = f"  per-channel({len(q['scale'])}, axis {q['quantized_dimension']})"
    return f"[{t['index']}] {t['name']}  {t['dtype']}{t['shape']}{quant}"


def render_text(s: dict[str, Any]) -> str:
    lines = [f"model: {s['path'] or '<bytes>'} ({s['file_bytes']} bytes, schema v{s['version']}, "
             f"{s['subgraphs']} subgraph(s))"]
    lines.append("inputs:")
    lines += [f"  {_fmt_tensor(t)}" for t in s["inputs"]]
    lines.append("outputs:")
    lines += [f"  {_fmt_tensor(t)}" for t in s["outputs"]]
    lines.append(f"operators ({len(s['operators'])}):")
    for op in s["operators"]:
        opts = op["custom_options"] or op["builtin_options"]
        detail = f"  {opts}" if opts else ""
        lines.append(f"  #{op['index']} {op['opcode']}  in={op['inputs']} out={op['outputs']}{detail}")
    for tpu in s["edgetpu"]:
        lines.append(f"edge tpu op #{tpu['operator']} (compiler {tpu['compiler_version'] or '?'}):")
        before, after = tpu["cpu_ops_before"] or "none", tpu["cpu_ops_after"] or "none"
        lines.append(f"  cpu ops before: {before}; after: {after}")
        lines.append("  boundary inputs:")
        lines += [f"    {_fmt_tensor(t)}" for t in tpu["inputs"]]
        lines.append("  boundary outputs:")
        lines += [f"    {_fmt_tensor(t)}" for t in tpu["outputs"]]
        for exe in tpu["executables"]:
            lines.append(f"  executable {exe['type']} token={exe['parameter_caching_token']} "
                         f"parameters={exe['parameter_bytes']} B "
                         f"instruction chunks={exe['instruction_chunk_bytes']} "
                         f"scratch={exe['scratch_bytes']} B chip={exe['chip']}")
            for kind in ("input_layers", "output_layers"):
                for la in exe[kind]:
                    _, y, x, z = la["shape"]
                    lines.append(f"    {kind[:-7]} layer {la['name']}: {y}x{x}x{z} {la['data_type']} "
                                 f"{la['size_bytes']} B zp={la['zero_point']} dq={la['dequant_factor']:.6g}"
                                 f"{' tiled' if la['tiled'] else ''}")
            lines.append("    dma hints:")
            for i, h in enumerate(exe["dma_hints"]):
                if h["kind"] == "descriptor":
                    target = f"{h['buffer_type']}" + (f" {h['layer_name']}" if h["layer_name"] else "")
                    lines.append(f"      {i}: {h['direction']} {target} [{h['offset']}, +{h['size']})")
                elif h["kind"] == "instruction":
                    lines.append(f"      {i}: {h['direction']} instructions chunk {h['chunk_index']}")
                elif h["kind"] == "interrupt":
                    lines.append(f"      {i}: interrupt {h['interrupt_type']}")
                else:
                    lines.append(f"      {i}: fence")
    return "\n".join(lines)
