"""``process-bag``: a camera node's work, offline, on every camera frame of a bag.

The node is one of ``bag_nodes.OFFLINE_NODES`` (perception, tracker, looming, flow, recognition), taken
from a bringup file or a ROS parameters file (``--node-type``). Frames are decoded and results built by the
node's own code (``image_msgs.to_rgb``, the node's processor opened from its parameters, and its "result
-> messages" function: ``conversions.result_messages``, ``robotics.messages.tracker_messages`` /
``looming_messages``, ``flow.messages.flow_messages``, ``recognition.processor.recognition_messages``) and
serialized by rclpy, so the output bag holds
the messages the live node would publish for the same frames, field for field (rclpy leaves CDR alignment
padding unzeroed, so raw bytes can differ there): same topics (resolved in the node's namespace), same
types, the input header, and the input's bag timestamp. Stateful nodes (looming's tau history, flow's
frame pair and heading) carry their state from frame to frame on the header stamps, as live. Our interface
types are written with their message definitions (from the ``.msg`` files) so ``rosbags`` and ``ros2 bag``
can decode them.

A frame that cannot be used (truncated CDR, a type that is not an image, an unsupported encoding, ...) is
counted under a short cause, logged once per cause, and skipped; the bag is processed to the end.

Throughput: by default (``PIPELINED``) the frame loop runs only the node (header, inference, result
messages): frames are read and decoded ahead on a reader thread (``bag_reader.FrameReader``; raw Images of
MCAP bags without copies), which also runs the node's first stage where it has one
(``CameraProcessor.prepare``: perception's model input, resize + quantize; a frame it refuses fails in the
loop as it would unsplit), and results are serialized and written behind on a writer thread
(``bag_writer.ResultWriter``), both handing over batches of frames through bounded queues, order kept. An
exception on either thread is raised by the loop (the command's error). ``pipelined=False`` runs all of it
in the calling thread (every storage; chunk CRCs too); the output is the same (docs/replay_testing.md has
the measured rates of both).
The one-off costs (model load, first inference, serializer type support, typestore) are paid before the
clock starts, so ``fps`` is the steady rate and ``setup_s`` says what came before it; the reader thread
reads only the first frame (the warm-up's) before the clock starts, so no frame is read, decoded or
prepared ahead off the clock (which made a short bag's rate look up to ~10% better than it was).
"""

from __future__ import annotations

import functools
import itertools
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from libredgetpu_ros.bags.storage import IMAGE_TYPES, new_bag, open_reader, reliable_qos, storage_of
from libredgetpu_ros.bags.typestore import typestore
from libredgetpu_ros.errors import ConfigError, ImageError, InputError
from libredgetpu_ros.ros.bag_reader import Decoded, FrameReader
from libredgetpu_ros.ros.bag_writer import ResultWriter, serializer, type_name

_log = logging.getLogger(__name__)

PIPELINED = True  # the default: reader and writer threads around the pipeline (docs/replay_testing.md)


@dataclass(frozen=True)
class NodeConfig:
    """The camera node a config file describes: its type, its parameters (typed, defaults filled in) and
    where its topics live."""

    params: Any  # the node type's values dataclass (e.g. perception_node.PerceptionParams)
    namespace: str = ""  # "" or "/ns"
    name: str = "perception"
    node_type: str = "perception"
    remappings: tuple[tuple[str, str], ...] = ()  # a bringup file's (from, to), in order

    def _expand(self, topic: str) -> str:
        if topic.startswith("/"):
            return topic
        if topic.startswith("~"):
            topic = f"{self.name}{topic[1:]}"
        return f"{self.namespace}/{topic}"

    def input_topic(self) -> str:
        """The camera topic the live node reads (``transport`` compressed: ``<input_topic>/compressed``)."""
        from libredgetpu_ros.ros.camera.params import input_subscription

        return input_subscription(self.params, self.resolve(self.params.input_topic))[0]

    def resolve(self, topic: str) -> str:
        """A topic name as the node resolves it: relative names go into the namespace, then the first
        remapping whose expanded name matches applies (rcl's rule)."""
        full = self._expand(topic)
        for src, dst in self.remappings:
            if self._expand(src) == full:
                return self._expand(dst)
        return full


def load_node_config(path: str | Path, overrides: dict[str, Any] | None = None,
                     node_type: str | None = None) -> NodeConfig:
    """The camera node of a bringup file (``nodes:``; the one node of ``node_type``, or without it the one
    node of a type process-bag runs) or of a ROS parameters file (``/**: ros__parameters: ...`` or
    ``<node>: ros__parameters: ...``; a ``node_type`` node, perception by default), with ``overrides``
    applied."""
    from libredgetpu_ros.errors import TextDataError
    from libredgetpu_ros.ros.bag_nodes import OFFLINE_NODES, param_table
    from libredgetpu_ros.ros.bringup import load_config
    from libredgetpu_ros.ros.params import NODE_WIDE_TABLES
    from libredgetpu_ros.textdata import load_yaml_file

    path = Path(path)
    try:  # size, UTF-8, nesting depth and alias expansion bounded (textdata.py)
        doc = load_yaml_file(path, "config")
    except TextDataError as exc:
        raise ConfigError(str(exc)) from None
    if node_type is not None:
        param_table(node_type)  # a ConfigError naming the types process-bag runs
    if isinstance(doc, dict) and "nodes" in doc:
        specs = [s for s in load_config(path) if s.type == node_type
                 or (node_type is None and s.type in OFFLINE_NODES)]
        if len(specs) != 1:
            wanted = f"{node_type} node" if node_type else \
                f"perception node, or one node of a type process-bag runs ({', '.join(OFFLINE_NODES)})"
            raise ConfigError(f"bringup file {path}: expected exactly one {wanted}, found "
                              f"{len(specs)}" + ("" if node_type else "; choose one with --node-type"))
        spec = specs[0]
        values, namespace, name = dict(spec.parameters), spec.namespace, spec.name
        node_type, remappings = spec.type, tuple(spec.remappings.items())
    elif isinstance(doc, dict) and len(doc) == 1 and isinstance(next(iter(doc.values())), dict) \
            and "ros__parameters" in next(iter(doc.values())):
        key = str(next(iter(doc)))
        given = next(iter(doc.values()))["ros__parameters"] or {}
        if not isinstance(given, dict):
            raise ConfigError(f"config {path}: ros__parameters must be a mapping of parameter names to "
                              f"values, got {type(given).__name__}")
        values = dict(given)
        node_type = node_type or "perception"
        namespace, name, remappings = "", node_type, ()
        if key not in ("/**", "**"):  # "/ns/node" or "node"
            parts = key.strip("/").split("/")
            namespace, name = "/".join(parts[:-1]), parts[-1]
    else:
        raise ConfigError(f"config {path}: expected a bringup file ('nodes:') or a ROS parameters file "
                          f"('/**: ros__parameters: ...')")
    values.update(overrides or {})
    values.pop("qos_overrides", None)  # the live publishers' QoS (ros/output_qos.py): nothing to do offline
    table = param_table(node_type)
    try:
        # every node's (deactivate_timeout, use_sim_time): checked as the live node would, unused offline
        for wide in NODE_WIDE_TABLES:
            wide.overrides({k: values.pop(k) for k in list(values)
                            if k in wide.specs and k not in table.specs})
        typed = {p.name: p.value for p in table.overrides(values)}
    except ConfigError as exc:  # say which node's table refused them (a looming file read as a tracker's)
        raise ConfigError(f"config {path} ({node_type} node {name!r}): {exc}") from None
    params = table.values_type(**(table.defaults() | typed))
    namespace = f"/{namespace.strip('/')}" if namespace.strip("/") else ""
    return NodeConfig(params=params, namespace=namespace, name=name, node_type=node_type,
                      remappings=remappings)


@dataclass
class ProcessSummary:
    input: Path
    output: Path
    topics: list[str]
    frames: int = 0  # image-topic messages read
    processed: int = 0  # frames with results
    written: int = 0  # messages written
    failures: Counter[str] = field(default_factory=Counter)
    ignored_topics: dict[str, list[str]] = field(default_factory=dict)
    elapsed_s: float = 0.0  # the frame loop (the steady rate)
    setup_s: float = 0.0  # before it: open the bag, load + warm up the model
    cpu_s: float = 0.0  # process CPU time of the frame loop, every thread (LiteRT's workers too)

    @property
    def fps(self) -> float:
        return self.frames / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        """``process-bag --json``: every field, the failures by cause, the rate."""
        return {"input": str(self.input), "output": str(self.output), "topics": list(self.topics),
                "frames": self.frames, "processed": self.processed, "written": self.written,
                "failed": sum(self.failures.values()), "failures": dict(sorted(self.failures.items())),
                "ignored_topics": self.ignored_topics, "fps": self.fps, "elapsed_s": self.elapsed_s,
                "setup_s": self.setup_s, "cpu_s": self.cpu_s}

    def text(self) -> str:
        lines = [f"{self.input} -> {self.output}: {self.frames} frames from {', '.join(self.topics)}, "
                 f"{self.processed} processed, {self.written} messages written, "
                 f"{sum(self.failures.values())} failed ({self.fps:.1f} frames/s; "
                 f"setup {self.setup_s:.1f} s)"]
        lines += [f"  warning: {n} frame(s) failed: {cause}" for cause, n in sorted(self.failures.items())]
        if self.ignored_topics:
            lines.append("  not image topics (not read): " + ", ".join(
                f"{t} [{', '.join(types)}]" for t, types in sorted(self.ignored_topics.items())))
        return "\n".join(lines)


@contextmanager
def _result_writer(writer: Any, resolve: Callable[[str], str], out_types: dict[str, type],
                   thread: bool) -> Iterator[ResultWriter]:
    """A :class:`ResultWriter` stopped before the bag closes: on Ctrl-C after writing what is queued (the
    bag is then published with every processed frame's results, as without the thread), on any other error
    at once (the bag is discarded)."""
    results = ResultWriter(writer, resolve, out_types, thread=thread)
    try:
        yield results
    except KeyboardInterrupt:
        results.close()
        raise
    except BaseException:
        results.close(finish=False)
        raise
    results.close()


def _warm_up(node: Any, out_types: Iterable[type], first: Decoded | None) -> None:
    """Pay the one-off costs before the clock starts, as a benchmark's warm-up would: the first inference
    (LiteRT allocates its buffers, ~25 ms for MobileNet; OpenCV starts its threads; an Edge TPU receives
    the model's parameters), on the bag's first frame when it decodes (else a blank one; the node's
    ``warm_up`` leaves no state behind, and that frame is processed again for real), rclpy's type support
    of every output type (loaded on first use, ~60 ms) and the typestore (~0.5 s)."""
    node.warm_up(first.rgb if first is not None else None)
    for cls in out_types:
        serializer(cls)(cls())
    typestore()


@functools.cache
def _encoders() -> tuple[Any, Any, Callable[[Any], bytes]]:
    """(Header, Time, rclpy's serialize_message), imported once: per frame, these from-imports cost a few
    microseconds, ~0.5% of a 1.4 ms model."""
    from builtin_interfaces.msg import Time
    from rclpy.serialization import serialize_message
    from std_msgs.msg import Header

    return Header, Time, serialize_message


def _pick_topics(image_topics: dict[str, list[str]], wanted: list[str] | None, node_topic: str,
                 path: Path) -> list[str]:
    if wanted:
        missing = [t for t in wanted if t not in image_topics]
        if missing:
            raise InputError(f"bag {path} has no image topic {', '.join(missing)} "
                             f"(image topics: {', '.join(image_topics) or 'none'})")
        return wanted
    if node_topic in image_topics:
        return [node_topic]
    if len(image_topics) == 1:
        topic = next(iter(image_topics))
        _log.warning("the node reads %s, which is not in the bag: processing %s instead", node_topic, topic)
        return [topic]
    raise InputError(f"bag {path}: the node reads {node_topic}, not in the bag; choose with --topics among "
                     f"the image topics: {', '.join(image_topics) or 'none'}")


class BagProcessor:
    """One input bag -> one output bag; ``run()`` returns the summary."""

    def __init__(self, config: NodeConfig, log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.log = log or (lambda text: _log.warning("%s", text))
        self._logged: set[str] = set()

    def run(self, input_bag: str | Path, output_bag: str | Path, *, topics: list[str] | None = None,
            storage: str | None = None, progress: bool | None = None,
            pipelined: bool | None = None) -> ProcessSummary:
        """``pipelined``: frames read and decoded on a thread ahead of the pipeline and results serialized
        and written on a thread behind it (True), or everything in this thread (False: reading, chunk CRCs,
        decompression and decoding of every storage, the node, serialization and writing; only the
        inference library's own workers, e.g. LiteRT's ``cpu_threads``, run elsewhere), or the default
        (None: :data:`PIPELINED`). Same output either way."""
        from tqdm import tqdm

        from libredgetpu_ros.ros.bag_nodes import open_offline

        begin = time.perf_counter()
        threads = PIPELINED if pipelined is None else pipelined
        input_bag, output_bag = Path(input_bag), Path(output_bag)
        summary, total = self._plan(input_bag, output_bag, topics)
        with ExitStack() as stack:
            node = open_offline(self.config.node_type, self.config.params)
            stack.callback(node.close)
            out_types = dict(node.out_types)
            writer = stack.enter_context(new_bag(output_bag, storage or storage_of(input_bag)))
            bar = stack.enter_context(tqdm(total=total, unit="frame", desc="process-bag", file=sys.stderr,
                                           disable=None if progress is None else not progress))
            # the node's first stage (e.g. the model's input: resize, quantize) on the reader thread, ahead
            prepare = node.prepare_or_unprepared if threads and node.prepares() else None
            # hold: the reader hands over the first frame (the warm-up's) and reads on once the clock runs
            reader = stack.enter_context(FrameReader(input_bag, summary.topics, thread=threads,
                                                     max_pixels=self.config.params.max_image_pixels,
                                                     prepare=prepare, hold=True))
            frames = iter(reader)
            first = next(frames, None)
            if first is not None:
                self._latched(writer, node, first.timestamp)
            _warm_up(node, out_types.values(), first)
            results = stack.enter_context(_result_writer(writer, self.config.resolve, out_types, threads))
            start, cpu_start = time.perf_counter(), time.process_time()
            reader.resume()
            summary.setup_s = start - begin
            for frame in itertools.chain([first] if first is not None else [], frames):
                self._frame(summary, node, results, frame)
                bar.update(1)
            results.close()  # the last frames' results written: part of the loop's time
            summary.written = results.written
            summary.elapsed_s = time.perf_counter() - start
            summary.cpu_s = time.process_time() - cpu_start
        return summary

    def _plan(self, input_bag: Path, output_bag: Path,
              topics: list[str] | None) -> tuple[ProcessSummary, int]:
        """The topics to process (checked before anything heavy starts) and how many frames they hold."""
        reader = open_reader(input_bag)
        try:
            all_topics: dict[str, list[str]] = {}
            for conn in reader.connections:
                types = all_topics.setdefault(conn.topic, [])
                if conn.msgtype not in types:
                    types.append(conn.msgtype)
            image_topics = {t: types for t, types in all_topics.items() if set(types) & set(IMAGE_TYPES)}
            chosen = _pick_topics(image_topics, topics, self.config.input_topic(), input_bag)
            total = sum(c.msgcount for c in reader.connections if c.topic in chosen)
        finally:
            reader.close()
        summary = ProcessSummary(input_bag, output_bag, chosen,
                                 ignored_topics={t: v for t, v in all_topics.items() if t not in chosen})
        return summary, total

    def _frame(self, summary: ProcessSummary, node: Any, results: ResultWriter, frame: Decoded) -> None:
        """One decoded input frame -> its result messages to ``results`` (or one counted failure)."""
        summary.frames += 1
        if frame.cause:
            self._fail(summary, frame.cause, frame.problem)
            return
        header = _encoders()[0](frame_id=frame.stamp[2])  # its default stamp filled in: one Time, not two
        header.stamp.sec, header.stamp.nanosec = frame.stamp[0], frame.stamp[1]
        try:
            out = node.messages(header, frame.rgb, frame.prepared)
        except ImageError as exc:
            self._fail(summary, "image", f"{frame.where}: {exc}")
            return
        except InputError as exc:  # the frame's data refused further on, counted as the node counts it
            self._fail(summary, "input", f"{frame.where}: {exc}")
            return
        # DeviceError / BackendError propagate: the model cannot run any more (the node stops too).
        summary.processed += 1
        results.write(frame.timestamp, out)

    def _latched(self, writer: Any, node: Any, timestamp: int) -> None:
        """What the node publishes on configure, latched (the perception node's label map), at the first
        frame's time."""
        Header, Time, serialize_message = _encoders()  # noqa: N806 (message classes)
        header = Header(stamp=Time(sec=timestamp // 10**9, nanosec=timestamp % 10**9))
        for topic, msg in node.latched(header):
            conn = writer.add_connection(self.config.resolve(topic), type_name(type(msg)),
                                         typestore=typestore(), offered_qos_profiles=[reliable_qos(1, True)])
            writer.write(conn, timestamp, serialize_message(msg))

    def _fail(self, summary: ProcessSummary, cause: str, message: str) -> None:
        summary.failures[cause] += 1
        if cause not in self._logged:  # once per cause; the summary has the counts
            self._logged.add(cause)
            self.log(f"warning: skipping frames ({cause}), first: {message}")


def process_bag(input_bag: str | Path, output_bag: str | Path, config: str | Path, *,
                backend: str | None = None, storage: str | None = None, topics: list[str] | None = None,
                progress: bool | None = None, log: Callable[[str], None] | None = None,
                node_type: str | None = None, device: str | None = None) -> ProcessSummary:
    """Load ``config`` (bringup or parameters YAML; ``node_type`` picks the node), process ``input_bag``
    into ``output_bag``; ``backend`` / ``device`` (not None) replace the config's."""
    overrides = {key: value for key, value in (("backend", backend or None), ("device", device))
                 if value is not None}
    node = load_node_config(config, overrides or None, node_type)
    return BagProcessor(node, log).run(input_bag, output_bag, topics=topics, storage=storage,
                                       progress=progress)
