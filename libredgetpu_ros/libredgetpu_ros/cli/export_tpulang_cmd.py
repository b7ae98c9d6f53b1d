"""``libredgetpu-ros export-tpulang``: this package's models as Sophgo TpuLang graphs (Top MLIR + npz)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HELP = "export the Dense controller or the MobileNet classifier as a TpuLang graph (origin MLIR + weights)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", metavar="WHAT", required=True)
    dense = sub.add_parser("dense", help="a Dense(N) controller: template scales + weights (int8 graph)")
    dense.add_argument("--template", required=True,
                       help="template size N or path to dense_N_edgetpu.tflite (scales and zero points)")
    dense.add_argument("--weights", type=Path, help="float weights .npy (rows, cols); a smaller controller "
                       "is placed top-left like the control node does; default: the template's")
    dense.add_argument("--bias", type=Path, help="float bias .npy (rows,)")
    dense.add_argument("--batch", type=int, default=1, help="input rows per call (graph input is batch x N)")
    dense.add_argument("--strict", action="store_true", help="refuse weights outside the template's int8 "
                       "range (default: clip them and report the count and the largest error on stderr)")
    classifier = sub.add_parser("classifier", help="a uint8 TFLite classifier (e.g. MobileNet v1 CPU twin)")
    classifier.add_argument("model", type=Path, help="the .tflite model (CONV_2D, DEPTHWISE_CONV_2D, "
                            "AVERAGE_POOL_2D, RESHAPE, SOFTMAX)")
    for p in (dense, classifier):
        p.add_argument("--out", required=True, type=Path, help="output directory")
        p.add_argument("--name", help="module name (file prefix); default dense_N / the model's stem")
        p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _embed(weights, bias, rows: int, cols: int):
    """A controller smaller than the template sits top-left, zeros elsewhere (as the control node runs it)."""
    import numpy as np

    w = np.asarray(weights)
    if w.ndim == 2 and w.shape != (rows, cols) and w.shape[0] <= rows and w.shape[1] <= cols:
        full = np.zeros((rows, cols), np.float32)
        full[:w.shape[0], :w.shape[1]] = w
        w = full
    if bias is not None and np.ndim(bias) == 1 and 0 < len(bias) < rows:
        bias = np.concatenate([np.asarray(bias, np.float32), np.zeros(rows - len(bias), np.float32)])
    return w, bias


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.errors import ConfigError
    from libredgetpu_ros.paths import check_regular
    from libredgetpu_ros.sophgo.emitter import save_module

    clipped = None  # dense with --weights/--bias: {"count", "max_error"} of the weights set_weights clipped
    if args.what == "dense":
        from libredgetpu_ros.cli.blob_cmd import _load_npy
        from libredgetpu_ros.matmul import MatMulEngine
        from libredgetpu_ros.sophgo.export_dense import export_engine

        if args.batch < 1:
            raise ConfigError(f"--batch must be >= 1, got {args.batch}")
        template = int(args.template) if str(args.template).isdigit() else Path(args.template)
        engine = MatMulEngine.from_template(template, backend="cpu")
        if args.weights is not None or args.bias is not None:
            weights = _load_npy(args.weights, "weights") if args.weights else engine.get_weights()[0]
            bias = _load_npy(args.bias, "bias") if args.bias else None
            report = engine.set_weights(*_embed(weights, bias, engine.rows, engine.cols))
            clipped = {"count": report.clipped_count, "max_error": float(report.max_clip_error)}
            if clipped["count"] and args.strict:
                raise ConfigError(f"--weights: {clipped['count']} weight(s) outside the template's int8 "
                                  f"range would be clipped (largest error {clipped['max_error']:.6g}); "
                                  f"--strict refuses (the control node's clip_policy=refuse does too)")
        module, weights = export_engine(engine, batch=args.batch, name=args.name or engine.template.name)
    else:
        from libredgetpu_ros.sophgo.export_tflite import export_classifier

        check_regular(args.model, "model", error=ConfigError)
        name = args.name or re.sub(r"^(?=\d)|\W", "_", args.model.stem, flags=re.ASCII)  # a bare identifier
        module, weights = export_classifier(args.model, name=name)
    mlir_path, npz_path = save_module(module, weights, args.out)
    summary = {"module": module.name, "state": module.state, "mlir": str(mlir_path), "weights": str(npz_path),
               "inputs": {n: list(t.shape or ()) for n, t in module.inputs}, "outputs": module.outputs,
               "ops": sum(1 for node in module.ops if node.kind not in ("top.Input", "top.Weight")),
               "weight_arrays": len(weights)}
    if clipped is not None:
        summary["clipped_weights"] = clipped
        if clipped["count"]:  # the graph computes with the clipped values: say so, whatever the format
            print(f"warning: {clipped['count']} weight(s) outside the template's int8 range were clipped "
                  f"(largest error {clipped['max_error']:.6g}); --strict refuses them", file=sys.stderr)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{module.name}: {summary['ops']} ops, {len(weights)} weights -> {mlir_path}, {npz_path}")
    return 0
