"""Entry point of ``libredgetpu-ros``.

Every subcommand lives in its own module of this package and exposes::

    HELP: str                                   # one line for the top-level --help
    def add_arguments(parser) -> None           # fill the subcommand's argparse parser
    def run(args) -> int                        # do the work, return the exit code

Modules are imported when the parser is built, so they must keep heavy imports (rclpy, LiteRT, cv2)
inside ``run``. Errors derived from ``LibrEdgeTpuError`` become one ``error: ...`` line on stderr and
their ``exit_code`` (2 = bad input, 3 = device problem).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from libredgetpu_ros import __version__
from libredgetpu_ros.errors import LibrEdgeTpuError

# (subcommand, module) in the order --help lists them.
SUBCOMMANDS: list[tuple[str, str]] = [
    ("inspect", "inspect_cmd"),
    ("devices", "devices_cmd"),
    ("doctor", "doctor_cmd"),
    ("plan", "plan_cmd"),
    ("infer", "infer_cmd"),
    ("blob", "blob_cmd"),
    ("template-gen", "template_gen_cmd"),
    ("bringup", "bringup_cmd"),
    ("make-bag", "make_bag_cmd"),
    ("replay", "replay_cmd"),
    ("process-bag", "process_bag_cmd"),
    ("bag-repair", "bag_repair_cmd"),
    ("iospec", "iospec_cmd"),
    ("mgk", "mgk_cmd"),
    ("tt-worker", "tt_worker_cmd"),
    ("export-tpulang", "export_tpulang_cmd"),
    ("tpulang", "tpulang_cmd"),
    ("models", "models_cmd"),
    ("robotics", "robotics_cmd"),
    ("retarget", "retarget_cmd"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="libredgetpu-ros",
        description="Edge TPU perception and control without Google's runtime; CPU fallback via LiteRT.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"libredgetpu_ros.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"libredgetpu_ros.cli.{module_name}":
                raise
            continue  # subcommand not part of this build
        sub_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except LibrEdgeTpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error of ours. Point stdout at devnull so the
        # interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
