"""``libredgetpu-ros bringup CONFIG.yaml``: run the configured lifecycle nodes in one process."""

from __future__ import annotations

import argparse

from libredgetpu_ros.cli.output import add_json, print_json

HELP = "start the nodes of a bringup YAML (perception, control) in one process and drive them to active"
EXAMPLES = (
    "libredgetpu-ros bringup libredgetpu_ros/config/demo.yaml --check      # from the repository root",
    "libredgetpu-ros bringup robot.yaml --duration 60",
    "libredgetpu-ros bringup robot.yaml --check --json                  # the nodes and parameters as JSON",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="bringup YAML: a 'nodes:' list of {type, name, namespace, parameters}")
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help="stop by itself after S seconds (default: run until Ctrl-C / SIGTERM)")
    parser.add_argument("--check", action="store_true",
                        help="only validate the file (node types, names, parameters) and exit")
    add_json(parser, "with --check: the nodes as JSON; else the nodes started, as JSON on stdout once they "
                     "stopped (messages on stderr)")


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.ros import bringup

    specs = bringup.load_config(args.config)
    nodes = [{"type": spec.type, "name": spec.name, "namespace": spec.namespace,
              "parameters": sorted(spec.parameters), "remappings": dict(spec.remappings)} for spec in specs]
    if args.check:
        for spec in specs:
            bringup.parameter_overrides(bringup.node_class(spec.type), spec.parameters)
            where = f"{spec.namespace.rstrip('/')}/{spec.name}" if spec.namespace else spec.name
            if not args.json:
                print(f"{spec.type:<10} {where}: {len(spec.parameters)} parameter(s) ok")
        if args.json:
            print_json({"config": args.config, "valid": True, "nodes": nodes})
        return 0
    code = bringup.run(args.config, duration_s=args.duration, quiet=args.json)
    if args.json:
        print_json({"config": args.config, "exit_code": code, "nodes": nodes})
    return code
