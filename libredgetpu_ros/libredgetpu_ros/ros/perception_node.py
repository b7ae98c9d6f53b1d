"""Perception lifecycle node: camera images in; poses, detections, classes, masks, markers, diagnostics out.

Lifecycle (the ros2/demos ``lifecycle_py`` rhythm):

- configure: load the model and open the backend/device (failure -> FAILURE, stays unconfigured, reason
  logged), create the lifecycle publishers and the diagnostics timer;
- activate: subscribe to the camera (on the companion node), enable the publishers;
- deactivate: unsubscribe (waiting for a frame in progress), disable the publishers;
- cleanup / shutdown: release the device;
- a device or backend failure while processing drives the node through deactivate -> ErrorProcessing
  (``on_error`` releases the device) -> unconfigured, so a supervisor can configure it again.

Threads (see docs/perception_node.md):

- the camera path: the image subscription lives on a small companion node (``<name>_image``: no parameter
  services, no rosout, one subscription while active) spun by its own ``SingleThreadedExecutor`` thread, so
  a frame never waits behind a lifecycle or parameter request or the diagnostics timer, and each wake-up of
  rclpy's Python executor walks one entity instead of the lifecycle node's dozen services (the control
  node's state loop does the same); ``companion_nodes()`` names it, and ``ros/spinning.py`` spins it (for
  :func:`main` and ``ros/bringup.py``). Frames are processed right in its callback: no hand-off to another
  thread (0.3 ms per frame, measured);
- the main executor (this node): lifecycle and parameter services, the diagnostics timer, the fatal-error
  guard condition.

Only the newest frame is processed: before processing, the callback takes every frame that queued in the
reader meanwhile and keeps the newest, so a slow model never builds a backlog or publishes stale results.
Skipped frames are counted, including those the reader's 5-deep queue overwrote while the node was busy
(from each publisher's sequence numbers).

Run it with ``python -m libredgetpu_ros.ros.perception_node --ros-args --params-file F``.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.exceptions import InvalidHandle
from rclpy.executors import ExternalShutdownException
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy, qos_profile_sensor_data
from rclpy.subscription import MessageInfo
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from libredgetpu_ros.errors import BackendError, ConfigError, DeviceError, ImageError, LibrEdgeTpuError
from libredgetpu_ros.ros import conversions, diagnostics
from libredgetpu_ros.ros.image_msgs import BadImage, to_rgb
from libredgetpu_ros.ros.params import ParamSpec, ParamTable
from libredgetpu_ros.ros.spinning import spin_with_companions

TASKS = ("auto", "pose", "segment", "detect", "classify")


@dataclass(frozen=True)
class PerceptionParams:
    model: str
    cpu_model: str
    backend: str
    device: str
    task: str
    labels: str
    score_threshold: float
    max_results: int
    top_k: int
    input_topic: str
    input_type: str
    publish_markers: bool
    publish_annotated: bool
    publish_overlay: bool
    marker_scale: float
    diagnostics_period: float


PARAMS = ParamTable([
    ParamSpec("model", "", "Compiled model (*_edgetpu.tflite), or the segments of a pipelined one "
              "comma-separated; the cpu backend runs its CPU twin."),
    ParamSpec("cpu_model", "", "CPU twin of the model for the cpu backend; empty: derived from `model`."),
    ParamSpec("backend", "auto", "Inference backend; auto prefers an attached Edge TPU.",
              choices=("auto", "cpu", "edgetpu")),
    ParamSpec("device", "", "Edge TPU to open (index or USB bus path); empty: the first one."),
    ParamSpec("task", "auto", "What the model does; auto reads it from the model.", choices=TASKS),
    ParamSpec("labels", "", "Label file (one label per line, or 'id label'); empty: numeric ids."),
    ParamSpec("score_threshold", 0.5, "Minimum score of a pose/detection/class to publish.",
              range=(0.0, 1.0), mutability="runtime"),
    ParamSpec("max_results", 10, "Maximum number of poses/detections per image.",
              range=(1, 100), mutability="runtime"),
    ParamSpec("top_k", 5, "Classes published per image (classification).", range=(1, 1000),
              mutability="runtime"),
    ParamSpec("input_topic", "image_raw", "Camera topic (remap it, or set e.g. image_raw/compressed).",
              mutability="read_only"),
    ParamSpec("input_type", "raw", "sensor_msgs/Image (raw) or sensor_msgs/CompressedImage (compressed).",
              choices=("raw", "compressed"), mutability="read_only"),
    ParamSpec("publish_markers", True, "Publish a visualization_msgs/MarkerArray on `markers`.",
              mutability="runtime"),
    ParamSpec("publish_annotated", False, "Publish the input with results drawn on `annotated` (costs CPU).",
              mutability="runtime"),
    ParamSpec("publish_overlay", False, "Publish the colourised mask blended over the input (segmentation).",
              mutability="runtime"),
    ParamSpec("marker_scale", 0.001, "Marker size in metres per image pixel (rviz).",
              range=(1e-6, 1.0), mutability="runtime"),
    ParamSpec("diagnostics_period", 1.0, "Seconds between /diagnostics messages.", range=(0.1, 60.0)),
], PerceptionParams)

# Results are reliable so rviz and loggers (reliable by default) can subscribe; keep only the newest few.
RESULT_QOS = QoSProfile(history=QoSHistoryPolicy.KEEP_LAST, depth=5,
                        reliability=QoSReliabilityPolicy.RELIABLE)
_BAD_INPUT_LOG_PERIOD_S = 10.0


def pipeline_config(p: PerceptionParams) -> Any:
    """The ``PipelineConfig`` the node opens for its parameters (also used by ``process-bag``)."""
    from libredgetpu_ros.perception.pipeline import PipelineConfig

    if not p.model:
        raise ConfigError("parameter model is empty: set it to a .tflite file")
    return PipelineConfig(model=p.model, cpu_model=p.cpu_model or None, backend=p.backend,
                          device=p.device or None, task=p.task, labels=p.labels or None,
                          score_threshold=p.score_threshold, max_results=p.max_results, top_k=p.top_k)


@dataclass(slots=True)
class Frame:
    """A camera message and when it arrived: ``received`` (monotonic s) when the subscription callback ran,
    and on the wall clock of rmw's timestamps (ns; 0 = the rmw does not report it): ``callback_ns`` (the
    same moment), ``source_ns`` (the publisher wrote it) and ``rmw_ns`` (the DDS reader received it)."""

    msg: Any
    received: float
    callback_ns: int = 0
    source_ns: int = 0
    rmw_ns: int = 0


class _Stats:
    """Counters and timings the diagnostics report; written by the image thread, read by the timer."""

    def __init__(self) -> None:
        self.received = 0
        self.dropped = 0  # frames skipped for a newer one (taken and skipped, or never delivered: ``lost``)
        self.lost = 0  # gaps in a publisher's sequence numbers: overwritten in the reader's queue, or lost
        self.processed = 0
        self.errors = 0
        self.bad_input = diagnostics.Counters()
        self.rate_in = diagnostics.RateMeter()
        self.rate_out = diagnostics.RateMeter()
        self.last_error = ""
        self._stage_sums: dict[str, float] = {}
        self._count = 0
        self._latency_sum = 0.0
        self._latency_max = 0.0
        self._last_period: tuple[dict[str, float], float, float] = ({}, 0.0, 0.0)

    def add_result(self, timings: dict[str, float], latency_ms: float) -> None:
        self.processed += 1
        self.rate_out.tick()
        self._count += 1
        for stage, ms in timings.items():
            self._stage_sums[stage] = self._stage_sums.get(stage, 0.0) + float(ms)
        self._latency_sum += latency_ms
        self._latency_max = max(self._latency_max, latency_ms)

    def take_period(self) -> tuple[int, dict[str, float], float, float]:
        """(results, mean ms per stage, mean and max node latency ms) since the last call; resets them."""
        n, sums, lat, lat_max = self._count, self._stage_sums, self._latency_sum, self._latency_max
        self._count, self._stage_sums, self._latency_sum, self._latency_max = 0, {}, 0.0, 0.0
        if n:  # an idle period repeats the last measured one rather than reporting zeros
            self._last_period = ({k: v / n for k, v in sums.items()}, lat / n, lat_max)
        return (n, *self._last_period)


class PerceptionNode(LifecycleNode):
    """Runs a ``PerceptionPipeline`` on the newest camera frame; see the module docstring."""

    def __init__(self, node_name: str = "perception", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        # The camera path's own node, spun by its own executor (see the module docstring). No parameters, no
        # global arguments (the input topic is resolved by this node, remaps included), no rosout.
        self.image_node = Node(f"{self.get_name()}_image", namespace=self.get_namespace(),
                               context=self.context, use_global_arguments=False, enable_rosout=False,
                               start_parameter_services=False)
        PARAMS.declare(self)
        self._validate_params = PARAMS.validator(self._is_configured)
        self.add_on_set_parameters_callback(self._on_set_params)
        self.add_post_set_parameters_callback(self._after_set_params)
        self.params: PerceptionParams = PARAMS.read(self)
        self._pipeline: Any = None
        self._pipeline_lock = threading.Lock()
        self._describe: dict[str, Any] = {}
        self._task = ""
        self._pubs: dict[str, Any] = {}
        self._timing_pub: Any = None
        self._diag_pub: Any = None
        self._diag_timer: Any = None
        self._sub: Any = None
        self._busy = threading.Lock()  # held while a frame is processed
        self._active = False  # frames are processed (set under _busy)
        self._idle_ns = 0  # wall ns the previous frame finished (for ~/timing queued_ms)
        self._last_seq: dict[bytes, int] = {}  # publisher gid -> its last sequence number seen
        self._skipped = 0  # frames skipped since the last processed one (for ~/timing)
        self._stats = _Stats()
        self._bad_logged: dict[str, float] = {}
        self._fatal: LibrEdgeTpuError | None = None
        # The camera thread cannot run a lifecycle transition (not on the main executor): it triggers this.
        self._fatal_signal = self.create_guard_condition(self._on_fatal_signal)

    # -- lifecycle ------------------------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.params = PARAMS.read(self)
            self._open_pipeline()
        except LibrEdgeTpuError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        p = self.params
        self._pubs = {name: self.create_lifecycle_publisher(mtype, name, RESULT_QOS)
                      for name, mtype in conversions.output_topics(self._task)}
        # Per-frame timings (stamped like the frame's results) for benchmarks and tuning; built only while
        # someone subscribes, after the frame's results went out.
        self._timing_pub = self.create_lifecycle_publisher(DiagnosticArray, "~/timing", RESULT_QOS)
        self._diag_pub = self.create_lifecycle_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(p.diagnostics_period, self._publish_diagnostics)
        self._stats = _Stats()
        self._fatal = None
        self.get_logger().info(f"configured: task={self._task} backend={self._describe.get('backend', '?')} "
                               f"model={p.model}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        msg_type = CompressedImage if self.params.input_type == "compressed" else Image
        with self._busy:
            self._active, self._idle_ns, self._last_seq, self._skipped = True, 0, {}, 0
        topic = self.resolve_topic_name(self.params.input_topic)
        self._sub = self.image_node.create_subscription(msg_type, topic, self._on_image,
                                                        qos_profile_sensor_data)
        self.get_logger().info(f"active: reading {topic} ({msg_type.__name__})")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_processing()
        ret = super().on_deactivate(state)
        if self._fatal is not None:
            return TransitionCallbackReturn.ERROR  # -> on_error releases the device
        return ret

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_processing()
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        reason = self._fatal or "transition callback failed"
        self.get_logger().error(f"error processing (from {state.label}): {reason}; releasing the device")
        self._stop_processing()
        self._release()
        return TransitionCallbackReturn.SUCCESS  # -> unconfigured; configure again to recover

    def companion_nodes(self) -> list[Node]:
        """Nodes a host process must spin besides this one, each on its own executor (:func:`main`,
        ``ros/bringup.py``): the camera subscription's node."""
        return [self.image_node]

    def destroy_node(self) -> None:
        self.image_node.destroy_node()
        super().destroy_node()

    def teardown(self) -> None:
        """Stop processing and release the device and every configured entity, outside any transition."""
        self._stop_processing()
        self._release()

    def state_label(self) -> str:
        """Current lifecycle state: unconfigured, inactive, active, finalized (or a transition state)."""
        return self._state_machine.current_state[1]

    # -- parameters -----------------------------------------------------------------------------------------

    def _is_configured(self) -> bool:
        return self._pipeline is not None

    def _on_set_params(self, params: list[Parameter]) -> SetParametersResult:
        """Table checks, then the pipeline's own (e.g. PoseNet wants a threshold < 1): applied here, so a
        value the pipeline refuses is refused to the caller and the running options stay."""
        verdict = self._validate_params(params)
        runtime = {p.name: p.value for p in params if p.name in PARAMS.runtime_names()}
        if not verdict.successful or not runtime:
            return verdict
        merged = {name: runtime.get(name, getattr(self.params, name))
                  for name in ("score_threshold", "max_results", "top_k")}
        with self._pipeline_lock:
            if self._pipeline is not None:
                try:
                    self._pipeline.set_options(**merged)
                except LibrEdgeTpuError as exc:
                    return SetParametersResult(successful=False, reason=str(exc))
        return verdict

    def _after_set_params(self, params: list[Parameter]) -> None:
        if any(p.name in PARAMS.runtime_names() for p in params):
            self.params = PARAMS.read(self)

    # -- pipeline -------------------------------------------------------------------------------------------

    def _open_pipeline(self) -> None:
        from libredgetpu_ros.perception.pipeline import PerceptionPipeline

        pipeline = PerceptionPipeline.from_config(pipeline_config(self.params))
        with self._pipeline_lock:
            self._pipeline = pipeline
        self._task = pipeline.task
        described = pipeline.describe()
        first = (described.get("segments") or [{}])[0]
        self._describe = {"backend": described.get("backend", ""), "device": first.get("device", ""),
                          "input_size": "x".join(str(v) for v in described.get("input_size", []))}

    def _release(self) -> None:
        if self._diag_timer is not None:
            self.destroy_timer(self._diag_timer)
            self._diag_timer = None
        for pub in self._pubs.values():
            self.destroy_lifecycle_publisher(pub)
        self._pubs = {}
        if self._timing_pub is not None:
            self.destroy_lifecycle_publisher(self._timing_pub)
            self._timing_pub = None
        if self._diag_pub is not None:
            self.destroy_lifecycle_publisher(self._diag_pub)
            self._diag_pub = None
        with self._pipeline_lock:
            pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            try:
                pipeline.close()
            except LibrEdgeTpuError as exc:  # releasing must not fail the transition
                self.get_logger().warning(f"closing the pipeline: {exc}")

    def _stop_processing(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            self.image_node.destroy_subscription(sub)
        with self._busy:  # waits for the frame in flight; none starts after this
            self._active = False

    # -- data path ------------------------------------------------------------------------------------------

    def _on_image(self, msg: Image | CompressedImage, info: MessageInfo) -> None:
        """Image executor thread: process the newest frame queued in the reader, right here."""
        frame = self._arrived(msg, info)
        sub = self._sub
        if sub is not None:
            try:
                with sub.handle:  # frames that queued while the previous one was processed: newest only
                    while (newer := sub.handle.take_message(sub.msg_type, sub.raw)) is not None:
                        self._stats.dropped += 1
                        self._skipped += 1
                        frame = self._arrived(*newer)
            except InvalidHandle:  # deactivated meanwhile
                return
        with self._busy:
            if self._active:
                skipped, self._skipped = self._skipped, 0
                self._run(frame, skipped)
                self._idle_ns = time.time_ns()

    def _arrived(self, msg: Image | CompressedImage, info: MessageInfo) -> Frame:
        received = time.monotonic()
        s = self._stats
        s.received += 1
        s.rate_in.tick(received)
        # Frames this publisher sent since its previous one that never reached us: overwritten in the
        # reader's queue while a frame was processed (or lost on the way).
        seq, gid = info.get("publication_sequence_number"), info.get("publisher_gid")
        if seq and gid:
            last = self._last_seq.get(gid["data"])
            if last is not None and seq > last + 1:
                s.dropped += seq - last - 1
                s.lost += seq - last - 1
                self._skipped += seq - last - 1
            self._last_seq[gid["data"]] = seq
        return Frame(msg, received, time.time_ns(), info.get("source_timestamp") or 0,
                     info.get("received_timestamp") or 0)

    def _run(self, frame: Frame, skipped: int) -> None:
        try:
            self._process(frame, skipped)
        except BadImage as exc:
            self._bad_input(exc.cause, str(exc))
        except ImageError as exc:
            self._bad_input("image", str(exc))
        except (DeviceError, BackendError) as exc:  # the model cannot run any more: release, report
            self._active = False
            self._fail(exc)
        except Exception as exc:  # an unexpected failure on one frame: count, report, keep going
            self._stats.errors += 1
            self._stats.last_error = f"{type(exc).__name__}: {exc}"
            self.get_logger().error(f"processing failed: {self._stats.last_error}", throttle_duration_sec=5.0)

    def _process(self, frame: Frame, skipped: int) -> None:
        started = time.monotonic()
        rgb = to_rgb(frame.msg)
        converted = time.monotonic()
        with self._pipeline_lock:
            if self._pipeline is None:
                return
            result = self._pipeline.process(rgb)
        processed = time.monotonic()
        self._publish(frame.msg.header, rgb, result)
        published = time.monotonic()
        self._stats.add_result(result.timings, (published - frame.received) * 1e3)
        timing_pub = self._timing_pub
        if timing_pub is not None and timing_pub.get_subscription_count():
            timing_pub.publish(self._timing_msg(frame, skipped, result.timings, started, converted, processed,
                                                published))

    def _publish(self, header: Header, rgb: Any, result: Any) -> None:
        # Messages for topics nobody subscribes to are not even built (an annotated image costs more than
        # most models); a subscriber that has not matched yet would not have received them anyway.
        pubs = self._pubs
        for topic, msg in conversions.result_messages(header, rgb, result, self.params,
                                                      wanted=lambda t: pubs[t].get_subscription_count() > 0):
            pubs[topic].publish(msg)

    def _timing_msg(self, frame: Frame, skipped: int, timings: dict[str, float], started: float,
                    converted: float, processed: float, published: float) -> DiagnosticArray:
        """Where one frame's time went, stamped with the frame's header (to pair it with the results)."""
        values: dict[str, object] = {"skipped": skipped}  # frames dropped for this one
        queued_ns = 0
        if frame.rmw_ns:
            # In the reader until the previous frame was done (by design when the model is slower than the
            # camera), then the executor's wake-up, take and deserialization.
            queued_ns = max(0, self._idle_ns - frame.rmw_ns)
            values["take_ms"] = (frame.callback_ns - frame.rmw_ns - queued_ns) * 1e-6
            if frame.source_ns:
                values["dds_in_ms"] = (frame.rmw_ns - frame.source_ns) * 1e-6  # publisher -> DDS reader
        values.update({
            "queued_ms": queued_ns * 1e-6,
            "wait_ms": (started - frame.received) * 1e3,  # callback -> processing (newer frames taken)
            "convert_ms": (converted - started) * 1e3,
            **{f"{stage}_ms": ms for stage, ms in timings.items()},
            "pipeline_ms": (processed - converted) * 1e3,
            "publish_ms": (published - processed) * 1e3,  # result messages built and published
            "node_ms": (published - frame.received) * 1e3,
        })
        st = diagnostics.status(f"{self.get_fully_qualified_name()}: frame timing", self._task,
                                diagnostics.OK, "", values)
        msg = diagnostics.array(frame.msg.header.stamp, [st])
        msg.header.frame_id = frame.msg.header.frame_id
        return msg

    def _bad_input(self, cause: str, message: str) -> None:
        count = self._stats.bad_input.add(cause)
        now = time.monotonic()
        if now - self._bad_logged.get(cause, -1e9) >= _BAD_INPUT_LOG_PERIOD_S:
            self._bad_logged[cause] = now
            self.get_logger().warning(f"bad input frame ({cause}, {count} so far): {message}")

    def _fail(self, exc: LibrEdgeTpuError) -> None:
        self._stats.errors += 1
        self._stats.last_error = str(exc)
        self._fatal = exc
        self.get_logger().error(f"device failure while processing: {exc}")
        self._fatal_signal.trigger()

    def _on_fatal_signal(self) -> None:
        if self._fatal is not None and self.state_label() == "active":
            self.trigger_deactivate()  # on_deactivate returns ERROR -> on_error -> unconfigured

    # -- diagnostics ----------------------------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        if self._diag_pub is None:
            return
        s = self._stats
        n, stages, latency, latency_max = s.take_period()
        values: dict[str, object] = {
            "task": self._task,
            "backend": self._describe.get("backend", ""),
            "device": self._describe.get("device", ""),
            "model": self.params.model,
            "input_topic": self.resolve_topic_name(self.params.input_topic),
            "fps_in": s.rate_in.rate(),
            "fps_out": s.rate_out.rate(),
            "frames_received": s.received,
            "frames_processed": s.processed,
            "frames_dropped": s.dropped,
            "frames_lost": s.lost,
            "errors": s.errors,
            "bad_input": s.bad_input.total(),
        }
        values.update({f"bad_input_{cause}": count for cause, count in s.bad_input.items()})
        values.update({f"{stage}_ms": ms for stage, ms in sorted(stages.items())})
        values.update({"node_latency_ms": latency, "node_latency_max_ms": latency_max})
        if s.errors:
            level, message = diagnostics.ERROR, f"processing errors: {s.last_error}"
        elif s.bad_input.total():
            level, message = diagnostics.WARN, f"{s.bad_input.total()} bad input frames"
        elif n == 0:
            level, message = diagnostics.WARN, "no input"
        else:
            level, message = diagnostics.OK, f"{s.rate_out.rate():.1f} fps"
        hardware = str(self._describe.get("device") or self._describe.get("backend") or "cpu")
        name = f"{self.get_fully_qualified_name()}: perception"
        st = diagnostics.status(name, hardware, level, message, values)
        self._diag_pub.publish(diagnostics.array(self.get_clock().now().to_msg(), [st]))


def main(args: list[str] | None = None) -> int:
    from libredgetpu_ros.ros.memory import retain_large_allocations

    # Before rclpy (its threads then allocate under the same rules): every frame passes through ~1 MB
    # buffers (see ros/memory.py for what was measured).
    retain_large_allocations()
    rclpy.init(args=args)
    node = PerceptionNode()
    try:
        spin_with_companions(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node.context.ok() and node.state_label() in ("inactive", "active", "unconfigured"):
            node.trigger_shutdown()
        else:
            # Ctrl-C / SIGTERM: rclpy has shut the context down (and started its own shutdown transition), so
            # no transition can complete; stop the camera path and release the device directly (idempotent).
            node.teardown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
