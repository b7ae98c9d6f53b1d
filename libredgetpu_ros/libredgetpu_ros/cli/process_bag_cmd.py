"""``libredgetpu-ros process-bag IN OUT --config C [--node-type T]``: a camera node's results for a bag,
offline (perception, tracker, looming, flow or recognition: the messages the live node would publish,
``ros/bag_nodes.py``).

Exit codes: 0 when at least one frame was processed (frames that failed are listed in a warning summary),
1 when the bag had frames but none could be processed, 2 for bad input (missing bag, bad config, no image
topic), 3 for a device failure, 130 when interrupted by Ctrl-C or SIGTERM (the output bag is closed and
readable, holding the frames done so far). The output appears under its name only once closed; after
SIGKILL it is in ``.<name>.<random>.tmp/<name>`` beside it, and ``bag-repair`` recovers its whole chunks.
"""

from __future__ import annotations

import argparse

from libredgetpu_ros.backend_kinds import BACKEND_KINDS
from libredgetpu_ros.cli.output import add_json, add_no_progress, print_json, progress, say

HELP = "run a camera node's processing (perception, tracker, looming, flow, recognition) on every image " \
       "of a bag; write the messages it would publish to a new bag"
EXAMPLES = (
    "libredgetpu-ros process-bag cam_bag results_bag --config libredgetpu_ros/config/demo.yaml",
    "libredgetpu-ros process-bag cam_bag results_bag --config perception_pose.yaml --backend cpu",
    "libredgetpu-ros process-bag cam_bag looming_bag --config libredgetpu_ros/config/looming.yaml "
    "--node-type looming",
    "libredgetpu-ros process-bag cam_bag results_bag --config perception_pose.yaml --json --no-progress",
)


NODE_TYPES = ("perception", "tracker", "looming", "flow", "recognition")


def add_node_options(parser: argparse.ArgumentParser, storage_default: str) -> None:
    """Which node runs on a bag and how: the options process-bag and process-bags share."""
    parser.add_argument("--config", required=True,
                        help="the node's config: a bringup YAML or a ROS parameters YAML")
    parser.add_argument("--node-type", choices=NODE_TYPES, default=None,
                        help="the node to run: a ROS parameters YAML is a perception node's unless given; "
                             "in a bringup YAML, the one node of this type (default: its one camera node "
                             "of these types)")
    parser.add_argument("--backend", choices=BACKEND_KINDS, default=None,
                        help="override the config's backend")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default=None,
                        help=f"output storage (default: {storage_default})")
    parser.add_argument("--topics", nargs="+", default=None, metavar="TOPIC",
                        help="image topics to process (default: the node's input topic)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="input bag (folder, or its .mcap / .db3 file)")
    parser.add_argument("output", help="output bag folder to create (must not exist)")
    add_node_options(parser, storage_default="the input's")
    add_json(parser, "print the summary as JSON (frames, processed, written, failures, fps, ...)")
    add_no_progress(parser)


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.cli.signals import sigterm_as_interrupt
    from libredgetpu_ros.ros.bag_processing import process_bag
    from libredgetpu_ros.ros.environment import ensure_log_dir

    ensure_log_dir()  # rclpy's serializer loads the rmw; no node is created, nothing is discovered
    with sigterm_as_interrupt():  # SIGTERM closes the output bag as Ctrl-C does (exit 130)
        summary = process_bag(args.input, args.output, args.config, backend=args.backend,
                              storage=args.storage, topics=args.topics, node_type=args.node_type,
                              progress=progress(args), log=say)
    if args.json:
        print_json(summary.as_dict())
    else:
        print(summary.text())
    if summary.frames and not summary.processed:
        say("error: no frame could be processed")
        return 1
    return 0
