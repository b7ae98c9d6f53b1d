"""``libredgetpu-ros template-gen``: write Dense(N) templates (uncompiled model, compiled model, sidecar)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "generate Dense(N) matmul templates (needs edgetpu_compiler, x86-64 only, to compile)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", required=True, type=int, nargs="+", metavar="N",
                        help="matrix sizes (multiples of 64)")
    parser.add_argument("--out", type=Path, default=Path("templates"),
                        help="output folder (default: templates)")
    parser.add_argument("--input-range", type=float, default=1.0, help="inputs span [-R, R] (default 1.0)")
    parser.add_argument("--weight-range", type=float, help="|w| <= R (default Glorot limit sqrt(3/N))")
    parser.add_argument("--output-range", type=float,
                        help="outputs span [-R, R] (default weight_range * input_range * sqrt(N))")
    parser.add_argument("--seed", type=int, default=0, help="seed of the placeholder weights")
    parser.add_argument("--no-compile", action="store_true", help="only write the uncompiled dense_N.tflite")
    parser.add_argument("--json", action="store_true",
                        help="accepted as by the other commands: the files are listed as JSON either way")


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.matmul.template_gen import DenseSpec, generate

    written = []
    for n in args.sizes:
        spec = DenseSpec(n, args.input_range, args.weight_range, args.output_range, args.seed)
        written.append(generate(spec, args.out, compile_it=not args.no_compile))
    print(json.dumps(written, indent=2))
    return 0
