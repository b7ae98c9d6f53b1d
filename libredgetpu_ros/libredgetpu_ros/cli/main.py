"""Entry point of ``libredgetpu-ros``.

Every subcommand lives in its own module of this package and exposes::

    HELP: str                                   # one line for the top-level --help
    def add_arguments(parser) -> None           # fill the subcommand's argparse parser
    def run(args) -> int                        # do the work, return the exit code
    EXAMPLES: tuple[str, ...]                   # optional: command lines shown under the subcommand's --help

Modules are imported when the parser is built, so they must keep heavy imports (rclpy, LiteRT, cv2)
inside ``run``. Errors derived from ``LibrEdgeTpuError`` become one ``error: ...`` line on stderr and
their ``exit_code`` (2 = bad input, 3 = device problem).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

from libredgetpu_ros import __version__
from libredgetpu_ros.errors import LibrEdgeTpuError
from libredgetpu_ros.threads import limit_library_threads

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
    ("process-bags", "process_bags_cmd"),
    ("compare-bags", "compare_bags_cmd"),
    ("bag-repair", "bag_repair_cmd"),
    ("iospec", "iospec_cmd"),
    ("mgk", "mgk_cmd"),
    ("tt-worker", "tt_worker_cmd"),
    ("export-tpulang", "export_tpulang_cmd"),
    ("tpulang", "tpulang_cmd"),
    ("models", "models_cmd"),
    ("robotics", "robotics_cmd"),
    ("retarget", "retarget_cmd"),
    ("kernels", "kernels_cmd"),
]


# The first hour, in the order a robot needs it (test/cli/test_cli_help.py parses every line).
EXAMPLES: tuple[str, ...] = (
    "libredgetpu-ros doctor                       # what this machine lacks, each with its fix",
    "libredgetpu-ros models fetch posenet_mobilenet_v1_075_481_641   # the default config's model",
    "libredgetpu-ros models import DIR            # offline: catalogue files found under a folder",
    "libredgetpu-ros infer --model mobilenet_v1_0.25_128 --labels mobilenet_v1_0.25_128 --image cat.jpg",
    "libredgetpu-ros robotics spot --model color_red_64x64 frame.png --json",
    "libredgetpu-ros make-bag --images frames/ --out cam_bag --rate 15",
    "libredgetpu-ros process-bag cam_bag results_bag --config perception_pose.yaml",
    "libredgetpu-ros COMMAND --help               # a command's options (and examples)",
)


def examples_epilog(lines: tuple[str, ...]) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


class Parser(argparse.ArgumentParser):
    """argparse's parser reading ``-1e30``, ``-.5`` and ``-inf`` as negative numbers, not options (Python
    3.11's rule is ``-digits`` or ``-digits.digits``: ``--color -1e30 0 0`` could not be typed). Subparsers
    inherit the class. Same rule as Python 3.13's (a ``-`` followed by a digit or ``.digit``) plus inf/nan."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._negative_number_matcher = re.compile(r"^-(\.?\d|inf$|nan$|infinity$)", re.IGNORECASE)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="libredgetpu-ros",
        description="Edge TPU perception and control without Google's runtime; CPU fallback via LiteRT. "
                    "ROS nodes: ros2 launch libredgetpu_ros perception.launch.py (docs/perception_node.md).",
        epilog=examples_epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        if getattr(module, "EXAMPLES", None):  # kept as written, after the module's own epilog
            sub_parser.formatter_class = argparse.RawDescriptionHelpFormatter
            examples = examples_epilog(module.EXAMPLES)
            sub_parser.epilog = f"{sub_parser.epilog}\n\n{examples}" if sub_parser.epilog else examples
        sub_parser.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        # BLAS / OpenMP / OpenCV pools (threads.py: $LIBREDGETPU_ROS_LIBRARY_THREADS, default 1) before a
        # command loads them; commands that open a pipeline apply its own setting too.
        limit_library_threads()
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
