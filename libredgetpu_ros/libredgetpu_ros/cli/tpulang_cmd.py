"""``libredgetpu-ros tpulang``: conformance tooling for Sophgo TpuLang graphs.

``tpulang replay CASE.json --out DIR`` rebuilds a case from the TpuLang calls it lists and writes the origin
MLIR + weight npz; ``tpulang run MLIR WEIGHTS.npz INPUTS.npz --out OUT.npz`` parses a Top MLIR file, runs it
with the NumPy executor and writes the outputs keyed by name.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_BUDGET_MB = 2048  # = sophgo.memory_plan.DEFAULT_BUDGET (not imported: keeps `--help` light)
HELP = "TpuLang tools: replay a CASE.json into MLIR + npz, or run a Top MLIR file on the CPU"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    replay = sub.add_parser("replay", help="rebuild a conformance case through the Python API")
    replay.add_argument("case", type=Path, help="CASE.json (weights come from the case's weight npz)")
    replay.add_argument("--out", required=True, type=Path, help="output directory")
    run_p = sub.add_parser("run", help="execute a Top MLIR file with NumPy")
    run_p.add_argument("mlir", type=Path, help="the *_origin.mlir file")
    run_p.add_argument("weights", type=Path, help="its weight .npz")
    run_p.add_argument("inputs", type=Path, help=".npz of inputs keyed by input name")
    run_p.add_argument("--out", required=True, type=Path, help="where to write the outputs (.npz)")
    run_p.add_argument("--all", action="store_true", help="also write every intermediate value")
    run_p.add_argument("--max-memory-mb", type=int, default=DEFAULT_BUDGET_MB, metavar="MB",
                       help=f"refuse a graph whose estimated peak memory is larger (default "
                            f"{DEFAULT_BUDGET_MB}); checked from the MLIR's shapes before anything is loaded")
    for p in (replay, run_p):
        p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    import time

    import numpy as np

    if args.action == "replay":
        from libredgetpu_ros.sophgo.replay import replay_to_dir

        mlir_path, npz_path = replay_to_dir(args.case, args.out)
        summary = {"mlir": str(mlir_path), "weights": str(npz_path)}
        text = f"wrote {mlir_path} and {npz_path}"
    else:
        from libredgetpu_ros.atomicio import atomic_open, make_folder
        from libredgetpu_ros.errors import ConfigError
        from libredgetpu_ros.sophgo.executor import execute
        from libredgetpu_ros.sophgo.memory_plan import plan_memory
        from libredgetpu_ros.sophgo.npz_reader import read_npz
        from libredgetpu_ros.sophgo.parser import load_mlir
        from libredgetpu_ros.textdata import clip

        if not 0 < args.max_memory_mb <= 1 << 30:
            raise ConfigError(f"--max-memory-mb must be a positive number of MiB, got {args.max_memory_mb}")
        budget = args.max_memory_mb << 20
        module = load_mlir(args.mlir)
        plan = plan_memory(module, budget)  # before any array is read: shapes and peak from the MLIR alone
        # Only the arrays the module uses are read, and no more bytes than it declares for them.
        weight_names = [node.name for node in module.weights()]
        input_names = [name for name, _ in module.inputs]
        weights = read_npz(args.weights, "weights", names=weight_names, max_bytes=plan.bytes_of(weight_names))
        inputs = read_npz(args.inputs, "inputs", names=input_names, max_bytes=plan.bytes_of(input_names))
        start = time.perf_counter()
        outputs = execute(module, weights, inputs, keep_all=args.all, memory_budget=budget)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        make_folder(args.out.parent)
        with atomic_open(args.out) as handle:   # a kill or a full disk never leaves a cut file at --out
            np.savez(handle, **outputs)
        summary = {"module": module.name, "out": str(args.out), "elapsed_ms": round(elapsed_ms, 3),
                   "outputs": {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in outputs.items()
                               if k in module.outputs}}
        text = f"{clip(module.name)}: {len(outputs)} arrays -> {args.out} ({elapsed_ms:.1f} ms)"
    print(json.dumps(summary, indent=2) if args.json else text)
    return 0
