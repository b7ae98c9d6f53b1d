"""``libredgetpu-ros blob``: quantize weights with a template's scales and write the parameter blob."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "quantize W.npy with a Dense template's per-row scales and write the Edge TPU parameter blob"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--template", required=True, type=Path,
                        help="the template's dense_N_edgetpu.tflite (dense_N.tflite and the .json beside it)")
    parser.add_argument("--weights", required=True, type=Path, help="float weights, .npy of shape (N, N)")
    parser.add_argument("--bias", type=Path, help="float bias .npy, shape (N,), added on the host")
    parser.add_argument("--out", required=True, type=Path, help="where to write the blob")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _load_npy(path: Path, what: str) -> object:
    """The .npy at ``path``, its header checked against the file's size before anything is allocated."""
    from libredgetpu_ros.errors import WeightsError
    from libredgetpu_ros.npyfile import read_npy

    return read_npy(path, what, max_bytes=1 << 30, error=WeightsError)


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.atomicio import atomic_write_bytes
    from libredgetpu_ros.matmul import MatMulEngine

    engine = MatMulEngine.from_template(args.template, backend="cpu")
    weights = _load_npy(args.weights, "weights")
    bias = _load_npy(args.bias, "bias") if args.bias else None
    report = engine.set_weights(weights, bias=bias)
    blob, _ = engine.current_blob()
    atomic_write_bytes(args.out, blob.tobytes())
    summary = {
        "template": engine.template.name, "rows": engine.rows, "cols": engine.cols, "out": str(args.out),
        "blob_bytes": int(blob.size), "clipped_count": report.clipped_count,
        "max_quantization_error": report.max_quantization_error, "max_clip_error": report.max_clip_error,
        "timings_ms": report.timings_ms,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['template']}: wrote {blob.size} bytes to {args.out}; {report.clipped_count} values "
              f"clipped; max quantization error {report.max_quantization_error:.3g} "
              f"(clip {report.max_clip_error:.3g}); {report.timings_ms['total']:.2f} ms")
    return 0
