"""Perception lifecycle node: camera images in; poses, detections, classes, masks, markers, diagnostics out.

Lifecycle (the ros2/demos ``lifecycle_py`` rhythm):

- configure: load the model and open the backend/device (failure -> FAILURE, stays unconfigured, reason
  logged), create the lifecycle publishers and the diagnostics timer;
- activate: subscribe to the camera (on the companion node), enable the publishers;
- deactivate: unsubscribe (waiting for a frame in progress), disable the publishers;
- cleanup / shutdown: release the device;
- a fault in the camera path drives the node through deactivate -> ErrorProcessing (``on_error`` releases
  the device) -> unconfigured, so a supervisor can configure it again: a device or backend failure while
  processing, or any exception that is not bad input escaping the camera callback (``ros/spinning.py``
  hands it to :meth:`PerceptionNode.companion_failed`). Both go through ``spinning.CompanionFault`` (shared
  with the control node): logged (with the traceback), one ERROR diagnostics status naming the cause.
  Bad input (``InputError``: undecodable, oversized, malformed frames) is only counted per frame.

Threads (see docs/perception_node.md):

- the camera path: the image subscription lives on a small companion node (``<name>_image``: no parameter
  services, no rosout, one subscription while active) spun by its own ``SingleThreadedExecutor`` thread, so
  a frame never waits behind a lifecycle or parameter request or the diagnostics timer, and each wake-up of
  rclpy's Python executor walks one entity instead of the lifecycle node's dozen services (the control
  node's state loop does the same); ``companion_nodes()`` names it, and ``ros/spinning.py`` spins it (for
  the entry point and ``ros/bringup.py``). Frames are processed right in its callback: no hand-off to
  another thread (0.3 ms per frame, measured);
- the main executor (this node): lifecycle and parameter services, the diagnostics timer, the fault's
  guard condition.

Only the newest frame is processed: before processing, the callback takes every frame that queued in the
reader meanwhile and keeps the newest, so a slow model never builds a backlog or publishes stale results.
Skipped and lost frames are counted by ``intake.Intake``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.exceptions import InvalidHandle
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from rclpy.subscription import MessageInfo
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header
from vision_msgs.msg import LabelInfo

from libredgetpu_ros.errors import BackendError, DeviceError, ImageError, InputError, LibrEdgeTpuError
from libredgetpu_ros.ros import conversions
from libredgetpu_ros.ros.image_msgs import BadImage, to_rgb
from libredgetpu_ros.ros.perception import report
from libredgetpu_ros.ros.perception.intake import Frame, FrameStats, Intake
from libredgetpu_ros.ros.perception.params import (
    LABEL_QOS,
    PARAMS,
    RESULT_QOS,
    PerceptionParams,
    pipeline_config,
)
from libredgetpu_ros.ros.spinning import CompanionFault

_BAD_INPUT_LOG_PERIOD_S = 10.0


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
        self._labels_pub: Any = None
        self._timing_pub: Any = None
        self._diag_pub: Any = None
        self._diag_timer: Any = None
        self._sub: Any = None
        self._busy = threading.Lock()  # held while a frame is processed
        self._active = False  # frames are processed (set under _busy)
        self._idle_ns = 0  # wall ns the previous frame finished (for ~/timing queued_ms)
        self._intake = Intake(lambda text: self.get_logger().warning(text))
        self._bad_logged: dict[str, float] = {}
        # A fault of the camera path, carried to the main executor (transitions cannot run on the camera
        # thread); while one is latched, frames are ignored.
        self._fault = CompanionFault(self, "camera path", self._report_fault)

    @property
    def _stats(self) -> FrameStats:
        return self._intake.stats

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
        self._publish_label_info()
        # Per-frame timings (stamped like the frame's results) for benchmarks and tuning; built only while
        # someone subscribes, after the frame's results went out.
        self._timing_pub = self.create_lifecycle_publisher(DiagnosticArray, "~/timing", RESULT_QOS)
        self._diag_pub = self.create_lifecycle_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(p.diagnostics_period, self._publish_diagnostics)
        self._intake.reset(stats=True)
        self._fault.clear()
        self.get_logger().info(f"configured: task={self._task} backend={self._describe.get('backend', '?')} "
                               f"model={p.model}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        msg_type = CompressedImage if self.params.input_type == "compressed" else Image
        with self._busy:
            self._active, self._idle_ns = True, 0
            self._intake.reset()
        topic = self.resolve_topic_name(self.params.input_topic)
        events = SubscriptionEventCallbacks(message_lost=self._intake.on_message_lost)
        self._sub = self.image_node.create_subscription(msg_type, topic, self._on_image,
                                                        qos_profile_sensor_data, event_callbacks=events)
        self.get_logger().info(f"active: reading {topic} ({msg_type.__name__})")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_processing()
        ret = super().on_deactivate(state)
        if self._fault.cause is not None:
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
        reason = self._fault.cause or "transition callback failed"
        self.get_logger().error(f"error processing (from {state.label}): {reason}; releasing the device")
        self._stop_processing()
        self._release()
        self._fault.clear()
        return TransitionCallbackReturn.SUCCESS  # -> unconfigured; configure again to recover

    def companion_nodes(self) -> list[Node]:
        """Nodes a host process must spin besides this one, each on its own executor (the entry point,
        ``ros/bringup.py``): the camera subscription's node."""
        return [self.image_node]

    def companion_failed(self, companion: Node, exc: BaseException) -> None:
        """An exception escaped the camera callback (called on the camera thread by ``ros/spinning.py``,
        which then spins on): logged with its traceback, ERROR diagnostics, the node goes to ``on_error``."""
        self._fault.companion_failed(companion, exc)

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
        if self._labels_pub is not None and any(p.name == "score_threshold" for p in params):
            self._publish_label_info()  # LabelInfo carries the threshold

    def _publish_label_info(self) -> None:
        """The label map (vision_msgs/LabelInfo) of a detector/classifier with labels. Not a lifecycle
        publisher: the map is valid from configure on, and transient-local durability hands the latest one
        to subscribers that come later."""
        header = Header(stamp=self.get_clock().now().to_msg())
        msg = conversions.label_info_msg(self._pipeline.labels if self._pipeline else None, self._task,
                                         self.params.score_threshold, header)
        if msg is None:
            return
        if self._labels_pub is None:
            self._labels_pub = self.create_publisher(LabelInfo, "label_info", LABEL_QOS)
        self._labels_pub.publish(msg)

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
        if self._labels_pub is not None:
            self.destroy_publisher(self._labels_pub)
            self._labels_pub = None
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
        intake = self._intake
        frame = intake.arrived(msg, info)
        sub = self._sub
        if sub is not None:
            try:
                with sub.handle:  # frames that queued while the previous one was processed: newest only
                    while (newer := sub.handle.take_message(sub.msg_type, sub.raw)) is not None:
                        intake.taken_newer()
                        frame = intake.arrived(*newer)
            except InvalidHandle:  # deactivated meanwhile
                return
        with self._busy:
            if self._active and self._fault.cause is None:  # a latched fault: on its way to on_error
                skipped, intake.skipped = intake.skipped, 0
                self._run(frame, skipped)
                self._idle_ns = time.time_ns()

    def _run(self, frame: Frame, skipped: int) -> None:
        try:
            self._process(frame, skipped)
        except BadImage as exc:
            self._bad_input(exc.cause, str(exc))
        except ImageError as exc:
            self._bad_input("image", str(exc))
        except InputError as exc:  # the frame's data refused further on (e.g. non-finite model outputs)
            self._bad_input("input", str(exc))
        except (DeviceError, BackendError) as exc:  # the model cannot run any more: release, report
            self._active = False
            self._fault.latch(f"device failure while processing: {exc}")
        # Anything else is a fault of the node, not of the frame: it escapes the camera callback and
        # ros/spinning.py hands it to companion_failed (error processing; counting it per frame and going on
        # would leave the node 'active' while every frame fails).

    def _process(self, frame: Frame, skipped: int) -> None:
        started = time.monotonic()
        rgb = to_rgb(frame.msg, self.params.max_image_pixels)
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
            timing_pub.publish(report.timing_array(self.get_fully_qualified_name(), self._task, frame,
                                                   skipped, self._idle_ns, result.timings, started,
                                                   converted, processed, published))

    def _publish(self, header: Header, rgb: Any, result: Any) -> None:
        # Messages for topics nobody subscribes to are not even built (an annotated image costs more than
        # most models); a subscriber that has not matched yet would not have received them anyway.
        pubs = self._pubs
        for topic, msg in conversions.result_messages(header, rgb, result, self.params,
                                                      wanted=lambda t: pubs[t].get_subscription_count() > 0):
            pubs[topic].publish(msg)

    def _bad_input(self, cause: str, message: str) -> None:
        count = self._stats.bad_input.add(cause)
        now = time.monotonic()
        if now - self._bad_logged.get(cause, -1e9) >= _BAD_INPUT_LOG_PERIOD_S:
            self._bad_logged[cause] = now
            self.get_logger().warning(f"bad input frame ({cause}, {count} so far): {message}")

    def _report_fault(self, cause: str) -> Any:
        """Main executor, once per latched fault, before the node leaves 'active': counted, and published
        at once (ERROR "processing errors: <cause>"), as on_error is about to destroy the publishers; returns
        the publisher, so that CompanionFault lets subscribers acknowledge the status first."""
        self._stats.errors += 1
        self._stats.last_error = cause
        self._publish_diagnostics()
        return self._diag_pub

    # -- diagnostics ----------------------------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        if self._diag_pub is None:
            return
        self._diag_pub.publish(report.status_array(
            self.get_fully_qualified_name(), self.get_clock().now().to_msg(), self._stats, self._describe,
            self._task, self.params.model, self.resolve_topic_name(self.params.input_topic)))
