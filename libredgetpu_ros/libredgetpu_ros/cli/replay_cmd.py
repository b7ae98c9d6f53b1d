"""``libredgetpu-ros replay BAG``: publish a bag through rclpy at the recorded timing."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from libredgetpu_ros.cli.output import add_json, print_json, say

HELP = "publish a bag's messages at their recorded timing (like ros2 bag play; raw CDR, bag QoS)"
EXAMPLES = (
    "libredgetpu-ros replay cam_bag                               # every topic, recorded timing",
    "libredgetpu-ros replay cam_bag --loop --rate 0.5 --topics /cam/image_raw",
    "libredgetpu-ros replay cam_bag --clock                       # /clock for use_sim_time nodes",
    "libredgetpu-ros replay cam_bag --json                        # counts as JSON when it ends",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", help="bag folder (or its .mcap / .db3 file)")
    parser.add_argument("--rate", type=float, default=1.0, help="playback speed factor (default: 1)")
    parser.add_argument("--loop", action="store_true", help="start over at the end until Ctrl-C")
    parser.add_argument("--clock", type=float, nargs="?", const=100.0, default=0.0, metavar="HZ",
                        help="publish /clock with bag time (default 100 Hz) for nodes with use_sim_time")
    parser.add_argument("--topics", nargs="+", default=(), metavar="TOPIC", help="replay only these topics")
    parser.add_argument("--start-delay", type=float, default=0.0, metavar="S",
                        help="wait S seconds before the first message")
    parser.add_argument("--wait-subscribers", type=int, default=0, metavar="N",
                        help="first wait until every replayed topic has N subscribers")
    parser.add_argument("--wait-timeout", type=float, default=30.0, metavar="S",
                        help="give up waiting for subscribers after S seconds (exit 1)")
    add_json(parser, "print the summary as JSON when done (published, loops, interrupted, ...; messages "
                     "on stderr)")


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.ros.replay import ReplayOptions
    from libredgetpu_ros.ros.replay import run as replay

    options = ReplayOptions(rate=args.rate, loop=args.loop, clock_hz=args.clock or 0.0,
                            topics=tuple(args.topics), start_delay_s=args.start_delay,
                            wait_subscribers=args.wait_subscribers, wait_timeout_s=args.wait_timeout)
    summary = replay(args.bag, options, log=say if args.json else print)
    if args.json:
        print_json({"bag": args.bag, **asdict(summary)})
    return 130 if summary.interrupted else 0
