"""``libredgetpu-ros bag-repair IN OUT``: recover a bag whose writer was killed (no metadata.yaml, no MCAP
footer, a sqlite journal left) or whose chunks are damaged, into a new complete bag.

Exit codes: 0 when the copy was written (counts and anything skipped on stdout, ``--json`` for a machine),
2 for bad input (missing source, existing output, not a bag).
"""

from __future__ import annotations

import argparse

HELP = "recover what a killed or damaged bag holds (no footer / metadata.yaml, corrupt chunks) into a new bag"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="the damaged bag: a folder, or its .mcap / .db3 file")
    parser.add_argument("output", help="bag folder to create (must not exist)")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default=None,
                        help="output storage (default: the input's)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    import json

    from libredgetpu_ros.bags.repair import repair_bag
    from libredgetpu_ros.cli.signals import sigterm_as_interrupt

    with sigterm_as_interrupt():
        summary = repair_bag(args.input, args.output, storage=args.storage)
    print(json.dumps(summary.as_dict(), indent=2) if args.json else summary.text())
    return 0
