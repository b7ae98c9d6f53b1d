"""``CameraNode``: the lifecycle node base of every node that takes camera images (see ``ros/camera/__init__``
for the subclass API).

Lifecycle (the ros2/demos ``lifecycle_py`` rhythm):

- configure: read the parameters, ``open_processor()`` (the class's ``PROCESSOR``, ``camera/processor.py``;
  a ``LibrEdgeTpuError`` -> FAILURE, stays unconfigured, reason logged), ``create_outputs()``, the
  ``~/timing`` and ``/diagnostics`` publishers and the diagnostics timer;
- activate: subscribe to the camera with the reliability ``image_reliability`` gives (``camera/qos.py``,
  ``camera/image_input.py``), enable the publishers;
- deactivate: unsubscribe (waiting for a frame in progress), disable the publishers;
- cleanup / shutdown: ``close_processor()``, every output destroyed;
- a fault in the camera path drives the node through deactivate -> ErrorProcessing (``on_error`` releases
  everything) -> unconfigured, so a supervisor can configure it again: a ``DeviceError`` / ``BackendError``
  raised by ``process``, or any exception that is not bad input escaping the camera callback
  (``ros/spinning.py`` hands it to :meth:`CameraNode.companion_failed`). Both go through
  ``spinning.CompanionFault``: logged (with the traceback), one ERROR diagnostics status naming the cause.
  Bad input (``InputError``: undecodable, oversized, malformed frames) is only counted per frame, and logged
  at most every 10 s per cause.

Threads:

- the camera path: the image subscription (with its QoS events) is in a callback group of its own
  (``spinning.CompanionGroup``, ``companion_groups()``), which ``ros/spinning.py`` runs on an executor
  thread of its own (for the entry point and ``ros/bringup.py``): a frame never waits behind a lifecycle or
  parameter request or the diagnostics timer, and that executor waits on the group's entities only. Frames
  are processed right in its callback: no hand-off to another thread. The subscription is the node's own,
  so ``ros2 node info <node>`` lists it. (rclpy lets a node belong to one executor only, so the group's
  executor reads the node through a view of that group instead of owning it; its latency against a
  companion node of its own: docs/perception_node.md "Threads".) A plain rclpy executor (a test's)
  runs the group along with everything else, on its one thread;
- the main executor (this node): lifecycle and parameter services, the diagnostics timer, the fault's guard
  condition, the re-check of the image reliability when a publisher appears.

Only the newest frame is processed: before processing, the callback takes every frame that queued in the
reader meanwhile and keeps the newest, so a slow model never builds a backlog or publishes stale results.
Skipped and lost frames are counted by ``camera.intake.Intake``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.exceptions import InvalidHandle
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy
from rclpy.subscription import MessageInfo
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from libredgetpu_ros.errors import BackendError, DeviceError, ImageError, InputError, LibrEdgeTpuError
from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.camera import report
from libredgetpu_ros.ros.camera.image_input import ImageInput
from libredgetpu_ros.ros.camera.intake import Frame, FrameStats, Intake
from libredgetpu_ros.ros.camera.processor import PUBLISH_STAGE, CameraProcessor
from libredgetpu_ros.ros.image_msgs import BadImage, to_rgb
from libredgetpu_ros.ros.output_qos import output_publisher
from libredgetpu_ros.ros.params import ParamTable
from libredgetpu_ros.ros.services import create_guarded_service
from libredgetpu_ros.ros.spinning import CompanionFault, CompanionGroup, destroy_entities

_BAD_INPUT_LOG_PERIOD_S = 10.0

# Results are reliable so rviz and loggers (reliable by default) can subscribe; keep only the newest few.
RESULT_QOS = QoSProfile(history=QoSHistoryPolicy.KEEP_LAST, depth=5,
                        reliability=QoSReliabilityPolicy.RELIABLE)


class CameraNode(ImageInput, LifecycleNode):
    """Lifecycle node that runs its ``PROCESSOR`` on the newest camera frame and publishes what it gives;
    see the module docstring and the subclass API in ``ros/camera/__init__.py``."""

    PARAMS: ClassVar[ParamTable]  # camera_param_table(own specs, OwnParams): the subclass sets it
    PROCESSOR: ClassVar[type[CameraProcessor]]  # what process-bag runs too (ros/bag_nodes.py)
    DIAGNOSTICS_NAME: ClassVar[str] = "camera"  # status name "<node>: <DIAGNOSTICS_NAME>"; default node name

    def __init__(self, node_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(node_name or self.DIAGNOSTICS_NAME, **kwargs)
        # The camera path's callback group, spun by an executor thread of its own (see the module docstring).
        self._camera = CompanionGroup()
        self.PARAMS.declare(self)
        self._validate_params = self.PARAMS.validator(self.is_configured)
        self.add_on_set_parameters_callback(self._on_set_params)
        self.add_post_set_parameters_callback(self._after_set_params)
        self.params: Any = self.PARAMS.read(self)
        self._configured = False
        self._outputs: list[Any] = []  # lifecycle publishers made by output()
        self._made_services: list[Any] = []  # services made by service()
        self._timing_pub: Any = None
        self._diag_pub: Any = None
        self._diag_timer: Any = None
        self._processor: CameraProcessor | None = None
        self._processor_lock = threading.Lock()  # the processor reference against open / close
        self._pubs: dict[str, Any] = {}  # relative topic -> publisher, from the processor's out_types
        self._busy = threading.Lock()  # held while a frame is processed
        self._active = False  # frames are processed (set under _busy)
        self._idle_ns = 0  # wall ns the previous frame finished (for ~/timing queued_ms)
        self._intake = Intake(lambda text: self.get_logger().warning(text))
        self._bad_log = diagnostics.LogLimiter(_BAD_INPUT_LOG_PERIOD_S)  # one line per cause per period
        self._init_image_input()
        # A fault of the camera path, carried to the main executor (transitions cannot run on the camera
        # thread); while one is latched, frames are ignored.
        self._fault = CompanionFault(self, "camera path", self._report_fault)

    # -- the subclass API (see ros/camera/__init__.py) ------------------------------------------------------

    @property
    def processor(self) -> CameraProcessor | None:
        """The open ``PROCESSOR`` (configured), else None; services reach its state through it."""
        return self._processor

    def open_processor(self) -> None:
        """Configure: ``PROCESSOR`` opened from ``self.params``; a ``LibrEdgeTpuError`` fails configure."""
        processor = self.PROCESSOR(self.params, warn=self.get_logger().warning,
                                   node=self.get_fully_qualified_name())
        with self._processor_lock:
            self._processor = processor

    def close_processor(self) -> None:
        """Cleanup / shutdown / error: the processor closed (idempotent; a failure only logged)."""
        with self._processor_lock:
            processor, self._processor = self._processor, None
        self.close_logged(processor, f"the {self.DIAGNOSTICS_NAME} processor")

    def close_logged(self, resource: Any, what: str) -> None:
        """``resource.close()`` unless it is None; a failure is logged as a warning ("closing <what>: ..."),
        as releasing must not fail the transition."""
        if resource is None:
            return
        try:
            resource.close()
        except LibrEdgeTpuError as exc:
            self.get_logger().warning(f"closing {what}: {exc}")

    def create_outputs(self) -> None:
        """Configure, after ``open_processor``: a publisher per topic of the processor's ``out_types``; a
        subclass adds its services (:meth:`service`) after ``super().create_outputs()``."""
        assert self._processor is not None
        self._pubs = {topic: self.output(cls, topic) for topic, cls in self._processor.out_types.items()}

    def destroy_outputs(self) -> None:
        """Cleanup: destroy publishers not made with :meth:`output` nor services not made with :meth:`service`
        (those are destroyed by the base)."""

    def process(self, rgb: Any, header: Header, frame: Frame) -> Mapping[str, float] | None:
        """Camera thread, one frame: the processor's messages for ``rgb`` (HxWx3 uint8) stamped with
        ``header``, for the topics someone subscribes to, published in order; its time per stage in ms
        (``~/timing`` and diagnostics ``<stage>_ms``; the publishing added to its "publish" stage), or None
        when closed. ``InputError``: bad frame data; ``DeviceError`` / ``BackendError``: error processing."""
        processor = self._processor
        if processor is None:
            return None
        pubs = self._pubs
        out = processor.frame(header, rgb, wanted=lambda topic: pubs[topic].get_subscription_count() > 0,
                              plane=self.image_plane(int(rgb.shape[1]), int(rgb.shape[0])))
        started = time.monotonic()
        for topic, msg in out.messages:
            pubs[topic].publish(msg)
        for cause in out.bad_input:
            self._intake.stats.bad_input.add(cause)
        if PUBLISH_STAGE in out.timings:
            out.timings[PUBLISH_STAGE] += (time.monotonic() - started) * 1e3
        return out.timings

    def image_plane(self, width: int, height: int) -> Any:
        """The markers' image plane for a frame (``camera/image_plane.ImagePlaneInput`` gives one)."""
        return None

    def diagnostic_values(self) -> dict[str, object]:
        """Key/values put first in the diagnostics status: the processor's (task, backend, model...)."""
        processor = self._processor
        return {} if processor is None else processor.diagnostic_values()

    def diagnostic_warnings(self) -> list[str]:
        """Reasons for a WARN status besides the intake's own: the processor's (e.g. a CPU fallback)."""
        processor = self._processor
        return [] if processor is None else processor.diagnostic_warnings()

    def hardware_id(self) -> str:
        """The diagnostics ``hardware_id`` (device or backend): the processor's."""
        processor = self._processor
        return "cpu" if processor is None else processor.hardware_id()

    def check_runtime_params(self, changes: dict[str, Any]) -> str | None:
        """A runtime parameter change (name -> new value, table checks passed): why it is refused, or None;
        the processor applies it (the values become ``self.params`` and the processor's right after)."""
        processor = self._processor
        return None if processor is None else processor.check_runtime_params(changes)

    def runtime_params_changed(self, names: set[str]) -> None:
        """After runtime parameters ``names`` changed (``self.params`` holds the new values)."""

    def camera_subscription(self, msg_type: Any, topic: str, callback: Any, qos: Any) -> Any:
        """A subscription of the node handled on the camera thread, in order with the frames and never
        concurrently with ``process`` (e.g. CameraInfo); make it in ``on_activate`` and destroy it with
        :meth:`destroy_camera_subscription` in ``on_deactivate``."""
        sub = self.create_subscription(msg_type, topic, callback, qos, callback_group=self._camera)
        self._camera.wake()
        return sub

    def destroy_camera_subscription(self, sub: Any) -> None:
        self.destroy_subscription(sub)
        self._camera.wake()

    def output(self, msg_type: Any, topic: str, qos: Any = RESULT_QOS) -> Any:
        """A lifecycle publisher, destroyed by the base on cleanup; QoS overridable (ros/output_qos.py)."""
        pub = output_publisher(self, msg_type, topic, qos)
        self._outputs.append(pub)
        return pub

    def service(self, srv_type: Any, name: str, callback: Any) -> Any:
        """A service of the configured node (e.g. ``~/enroll``), destroyed by the base on cleanup."""
        srv = create_guarded_service(self, srv_type, name, callback)  # no exception escapes a handler
        self._made_services.append(srv)
        return srv

    def is_configured(self) -> bool:
        return self._configured

    @property
    def stats(self) -> FrameStats:
        return self._intake.stats

    # -- lifecycle ------------------------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.params = self.PARAMS.read(self)
            self.open_processor()
            self.create_outputs()  # a ConfigError from qos_overrides fails configure too
        except LibrEdgeTpuError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            self._release()
            return TransitionCallbackReturn.FAILURE
        self._configured = True
        # Per-frame timings (stamped like the frame's results) for benchmarks and tuning; built only while
        # someone subscribes, after the frame's results went out.
        self._timing_pub = output_publisher(self, DiagnosticArray, "~/timing", RESULT_QOS)
        self._diag_pub = self.create_lifecycle_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(self.params.diagnostics_period, self._publish_diagnostics)
        self._intake.reset(stats=True)
        self._incompatible.reset()
        self._fault.clear()
        summary = " ".join(f"{k}={v}" for k, v in self.diagnostic_values().items())
        self.get_logger().info(f"configured: {summary}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._busy:
            self._active, self._idle_ns = True, 0
            self._intake.reset()
        self._silence_since, self._silence_received, self._silence_warned = time.monotonic(), 0, False
        self._subscribe()
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
        self.teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        reason = self._fault.cause or "transition callback failed"
        self.get_logger().error(f"error processing (from {state.label}): {reason}; releasing the device")
        self.teardown()
        self._fault.clear()
        return TransitionCallbackReturn.SUCCESS  # -> unconfigured; configure again to recover

    def companion_groups(self) -> list[CompanionGroup]:
        """Callback groups a host runs on their own executor threads (``ros/spinning.py``: the entry point,
        ``ros/bringup.py``): the camera path."""
        return [self._camera]

    def companion_failed(self, companion: Any, exc: BaseException) -> None:
        """An exception escaped the camera callback (called on the camera thread by ``ros/spinning.py``,
        which then spins on): logged with its traceback, ERROR diagnostics, the node goes to ``on_error``."""
        self._fault.companion_failed(companion, exc)

    def teardown(self) -> None:
        """Stop processing and release the device and every configured entity, outside any transition."""
        self._stop_processing()
        self._release()

    def state_label(self) -> str:
        """Current lifecycle state: unconfigured, inactive, active, finalized (or a transition state)."""
        return self._state_machine.current_state[1]

    # -- parameters -----------------------------------------------------------------------------------------

    def _on_set_params(self, params: list[Parameter]) -> SetParametersResult:
        verdict = self._validate_params(params)
        runtime = {p.name: p.value for p in params if p.name in self.PARAMS.runtime_names()}
        if not verdict.successful or not runtime:
            return verdict
        reason = self.check_runtime_params(runtime)
        return SetParametersResult(successful=False, reason=reason) if reason else verdict

    def _after_set_params(self, params: list[Parameter]) -> None:
        names = {p.name for p in params} & self.PARAMS.runtime_names()
        if names:
            self.params = self.PARAMS.read(self)
            processor = self._processor
            if processor is not None:
                processor.params = self.params
            self.runtime_params_changed(names)

    # -- release --------------------------------------------------------------------------------------------

    def _release(self) -> None:
        if self._diag_timer is not None:
            self.destroy_timer(self._diag_timer)
            self._diag_timer = None
        outputs, self._outputs = self._outputs, []
        for pub in outputs:
            self.destroy_lifecycle_publisher(pub)
        services, self._made_services = self._made_services, []
        destroy_entities(self, services)
        self._pubs = {}
        self.destroy_outputs()
        if self._timing_pub is not None:
            self.destroy_lifecycle_publisher(self._timing_pub)
            self._timing_pub = None
        if self._diag_pub is not None:
            self.destroy_lifecycle_publisher(self._diag_pub)
            self._diag_pub = None
        self._configured = False
        self.close_processor()

    def _stop_processing(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            self.destroy_subscription(sub)
            self._camera.wake()
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
            except InvalidHandle:  # deactivated (or resubscribed) meanwhile
                return
        with self._busy:
            if self._active and self._fault.cause is None:  # a latched fault: on its way to on_error
                skipped, intake.skipped = intake.skipped, 0
                self._run(frame, skipped)
                self._idle_ns = time.time_ns()

    def _run(self, frame: Frame, skipped: int) -> None:
        try:
            self._process_frame(frame, skipped)
        except BadImage as exc:
            self._bad_input(exc.cause, str(exc))
        except ImageError as exc:
            self._bad_input("image", str(exc))
        except InputError as exc:  # the frame's data refused further on (e.g. non-finite model outputs)
            self._bad_input("input", str(exc))
        except (DeviceError, BackendError) as exc:  # the processor cannot run any more: release, report
            self._active = False
            self._fault.latch(f"device failure while processing: {exc}")
        # Anything else is a fault of the node, not of the frame: it escapes the camera callback and
        # ros/spinning.py hands it to companion_failed (error processing; counting it per frame and going on
        # would leave the node 'active' while every frame fails).

    def _process_frame(self, frame: Frame, skipped: int) -> None:
        started = time.monotonic()
        rgb = to_rgb(frame.msg, self.params.max_image_pixels)
        converted = time.monotonic()
        timings = self.process(rgb, frame.msg.header, frame)
        if timings is None:
            return
        finished = time.monotonic()
        self._intake.stats.add_result(timings, (finished - frame.received) * 1e3)
        timing_pub = self._timing_pub
        if timing_pub is not None and timing_pub.get_subscription_count():
            timing_pub.publish(report.timing_array(self.get_fully_qualified_name(), self.hardware_id(), frame,
                                                   skipped, self._idle_ns, timings, started, converted,
                                                   finished))

    def _bad_input(self, cause: str, message: str) -> None:
        count = self._intake.stats.bad_input.add(cause)
        if self._bad_log.due(cause):
            self.get_logger().warning(f"bad input frame ({cause}, {count} so far): {message}")

    def _report_fault(self, cause: str) -> Any:
        """Main executor, once per latched fault, before the node leaves 'active': counted, and published
        at once (ERROR "processing errors: <cause>"), as on_error is about to destroy the publishers; returns
        the publisher, so that CompanionFault lets subscribers acknowledge the status first."""
        stats = self._intake.stats
        stats.errors += 1
        stats.last_error = cause
        self._publish_diagnostics()
        return self._diag_pub

    # -- diagnostics ----------------------------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        if self._diag_pub is None:
            return
        image_values, warnings = self._image_status()
        self._diag_pub.publish(report.status_array(
            f"{self.get_fully_qualified_name()}: {self.DIAGNOSTICS_NAME}", self.hardware_id(),
            self.get_clock().now().to_msg(), self._intake.stats, self.diagnostic_values(), image_values,
            warnings + self.diagnostic_warnings()))
