"""``libredgetpu-ros make-bag``: a camera-stream bag (sensor_msgs/msg/Image) from stills or a video."""

from __future__ import annotations

import argparse

from libredgetpu_ros.cli.output import add_json, add_no_progress, print_json, progress

HELP = "make a camera bag (sensor_msgs/Image at a fixed rate) from images or a video, no ROS needed"
EXAMPLES = (
    "libredgetpu-ros make-bag --images frames/ --out cam_bag --rate 15 --topic /cam/image_raw",
    "libredgetpu-ros make-bag --images walk.mp4 --out walk_bag                # the video's own frame rate",
    "libredgetpu-ros make-bag --images a.jpg b.png --out still_bag --rate 2 --loop 10",
    "libredgetpu-ros make-bag --images frames/ --out cam_bag --json --no-progress   # for scripts",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--images", nargs="+", required=True, metavar="PATH",
                        help="image files, folders of images (sorted by name) and/or video files, in order")
    parser.add_argument("--out", required=True, help="bag folder to create (must not exist)")
    parser.add_argument("--rate", type=float, default=None, metavar="HZ",
                        help="frames per second (default: the video's own rate, else 10)")
    parser.add_argument("--topic", default="/image_raw", help="image topic (default: %(default)s)")
    parser.add_argument("--frame-id", default="camera_optical_frame",
                        help="header frame_id (default: %(default)s)")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    parser.add_argument("--loop", type=int, default=1, metavar="N", help="repeat the input N times")
    parser.add_argument("--encoding", choices=("rgb8", "bgr8"), default="rgb8")
    parser.add_argument("--start", type=float, default=None, metavar="SEC",
                        help="stamp of the first frame in seconds since the epoch (default: now)")
    add_json(parser, "print the summary as JSON (path, frames, topic, rate_hz, duration_s, ...)")
    add_no_progress(parser)


def run(args: argparse.Namespace) -> int:
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.cli.signals import sigterm_as_interrupt

    options = MakeBagOptions(topic=args.topic, frame_id=args.frame_id, rate=args.rate, storage=args.storage,
                             loop=args.loop, encoding=args.encoding,
                             start_ns=None if args.start is None else round(args.start * 1e9))
    with sigterm_as_interrupt():  # SIGTERM closes the bag as Ctrl-C does (exit 130)
        summary = make_bag(args.images, args.out, options, progress=progress(args))
    span = (summary.last_ns - summary.first_ns) / 1e9
    if args.json:
        print_json({"path": str(summary.path), "frames": summary.frames, "topic": args.topic,
                    "encoding": args.encoding, "frame_id": args.frame_id, "rate_hz": summary.rate,
                    "duration_s": span, "first_stamp_ns": summary.first_ns, "last_stamp_ns": summary.last_ns,
                    "storage": args.storage})
        return 0
    print(f"{summary.path}: {summary.frames} frames on {args.topic} ({args.encoding}, frame_id "
          f"{args.frame_id!r}) at {summary.rate:g} Hz, {span:.3f} s, {args.storage}")
    return 0
