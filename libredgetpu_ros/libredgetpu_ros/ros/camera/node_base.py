"""``CameraNode``: the base of every node that takes camera images, a :class:`~libredgetpu_ros.ros.lifecycle.
ManagedNode` (the skeleton every node shares: parameter table, configure / activate / deactivate / cleanup /
error, outputs and services released by the base, ``/diagnostics`` and its timer, faults through
``spinning.CompanionFault``) that adds the image intake. See ``ros/camera/__init__`` for the subclass API.

What the camera base puts in the skeleton's hooks:

- configure (``open_processor``, ``create_outputs``): the class's ``PROCESSOR`` (``camera/processor.py``)
  opened from the parameters, a publisher per topic of its ``out_types`` and ``~/timing``; a
  ``LibrEdgeTpuError`` fails configure (logged, everything made so far released, ``unconfigured``);
- activate (``create_inputs``): the image subscription, with the reliability ``image_reliability`` gives
  (``camera/qos.py``, ``camera/image_input.py``), on the node's data path;
- deactivate / teardown (``drop_inputs``): the subscription dropped, then the frame in progress waited for
  (the base's data-path lock: none starts after it);
- diagnostics (``diagnostic_status``): the processor's values, the subscription's, rates, counters, stage
  times (``camera/report.py``); a fault is counted and reported as ``processing errors: <cause>``.

Faults: a ``DeviceError`` / ``BackendError`` raised by ``process`` is latched (:meth:`latch`); any exception
that is not bad input escaping the camera callback is handed by ``ros/spinning.py`` to ``companion_failed``;
both take the node through deactivate -> ErrorProcessing (``on_error`` releases everything) ->
unconfigured, so a supervisor can configure it again. Bad input (``InputError``: undecodable, oversized,
malformed frames) is only counted per frame, and logged at most every 10 s per cause.

Threads: the camera path is the node's data path (``ManagedNode.data_subscription``: a
``spinning.CompanionGroup`` of the node, spun on an executor thread of its own by the entry point and
``ros/bringup.py``): a frame never waits behind a lifecycle or parameter request or the diagnostics timer,
and is processed right in its callback, with no hand-off to another thread; ``ros2 node info <node>`` lists
the subscription. (Its latency against a companion node of its own: docs/perception_node.md "Threads".) A
plain rclpy executor (a test's) runs the group along with everything else, on its one thread.

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
from rclpy.exceptions import InvalidHandle
from rclpy.parameter import Parameter
from rclpy.qos import QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy
from rclpy.subscription import MessageInfo
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from libredgetpu_ros import jit
from libredgetpu_ros.errors import BackendError, DeviceError, ImageError, InputError, LibrEdgeTpuError
from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.camera import report
from libredgetpu_ros.ros.camera.image_input import ImageInput
from libredgetpu_ros.ros.camera.intake import Frame, FrameStats, Intake
from libredgetpu_ros.ros.camera.processor import PUBLISH_STAGE, CameraProcessor
from libredgetpu_ros.ros.image_msgs import BadImage, to_rgb
from libredgetpu_ros.ros.lifecycle import ManagedNode

_BAD_INPUT_LOG_PERIOD_S = 10.0

# Results are reliable so rviz and loggers (reliable by default) can subscribe; keep only the newest few.
RESULT_QOS = QoSProfile(history=QoSHistoryPolicy.KEEP_LAST, depth=5,
                        reliability=QoSReliabilityPolicy.RELIABLE)


class CameraNode(ImageInput, ManagedNode):
    """Lifecycle node that runs its ``PROCESSOR`` on the newest camera frame and publishes what it gives;
    see the module docstring and the subclass API in ``ros/camera/__init__.py``."""

    PROCESSOR: ClassVar[type[CameraProcessor]]  # what process-bag runs too (ros/bag_nodes.py)
    DIAGNOSTICS_NAME: ClassVar[str] = "camera"  # status name "<node>: <DIAGNOSTICS_NAME>"; default node name
    FAULT_WHAT = "camera path"
    RELEASE_NOTE = "releasing the device"

    def __init__(self, node_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(node_name or self.DIAGNOSTICS_NAME, **kwargs)
        self._processor: CameraProcessor | None = None
        self._processor_lock = threading.Lock()  # the processor reference against open / close
        self._pubs: dict[str, Any] = {}  # relative topic -> publisher, from the processor's out_types
        self._timing_pub: Any = None
        self._idle_ns = 0  # wall ns the previous frame finished (for ~/timing queued_ms)
        self._intake = Intake(lambda text: self.get_logger().warning(text))
        self._bad_log = diagnostics.LogLimiter(_BAD_INPUT_LOG_PERIOD_S)  # one line per cause per period
        self._init_image_input()

    # -- the subclass API (see ros/camera/__init__.py) ------------------------------------------------------

    @property
    def processor(self) -> CameraProcessor | None:
        """The open ``PROCESSOR`` (configured), else None; services reach its state through it."""
        return self._processor

    @property
    def stats(self) -> FrameStats:
        return self._intake.stats

    def open_processor(self) -> None:
        """Configure: fresh counters, ``PROCESSOR`` opened from ``self.cfg`` and warmed up (one inference on a
        blank frame, no state kept); a ``LibrEdgeTpuError`` fails configure."""
        self._intake.reset(stats=True)
        self._incompatible.reset()
        with jit.compile_notice(self.get_logger().info):  # one INFO line when the kernel cache was cold
            processor = self.PROCESSOR(self.cfg, warn=self.get_logger().warning,
                                       node=self.get_fully_qualified_name())
            try:  # the first inference's one-off costs (LiteRT's first run, cold buffers): not on a frame
                processor.warm_up(None)
            except BaseException:
                processor.close()
                raise
        with self._processor_lock:
            self._processor = processor

    def close_processor(self) -> None:
        """Cleanup / shutdown / error: the processor closed (idempotent; a failure only logged)."""
        self._pubs, self._timing_pub = {}, None  # destroyed by the base
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
        """Configure, after ``open_processor``: a publisher per topic of the processor's ``out_types`` and
        ``~/timing``; a subclass adds its services (:meth:`service`) after ``super().create_outputs()``."""
        assert self._processor is not None
        self._pubs = {topic: self.output(cls, topic) for topic, cls in self._processor.out_types.items()}
        # Per-frame timings (stamped like the frame's results) for benchmarks and tuning; built only while
        # someone subscribes, after the frame's results went out.
        self._timing_pub = self.output(DiagnosticArray, "~/timing")

    def output(self, msg_type: Any, topic: str, qos: Any = RESULT_QOS, *, lifecycle: bool = True) -> Any:
        """``ManagedNode.output`` with the results' QoS by default."""
        return super().output(msg_type, topic, qos, lifecycle=lifecycle)

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

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.diagnostic_values().items())

    def diagnostic_values(self) -> dict[str, object]:
        """Key/values put first in the diagnostics status: the processor's (task, backend, model...)."""
        processor = self._processor
        return {} if processor is None else processor.diagnostic_values()

    def diagnostic_warnings(self) -> list[str]:
        """Reasons for a WARN status besides the intake's own: a CPU fallback, then the processor's."""
        processor = self._processor
        if processor is None:
            return []
        return self.fallback_warnings(processor.fallbacks()) + processor.diagnostic_warnings()

    def hardware_id(self) -> str:
        """The diagnostics ``hardware_id`` (device or backend): the processor's."""
        processor = self._processor
        return "cpu" if processor is None else processor.hardware_id()

    def check_runtime_params(self, changes: dict[str, Any]) -> str | None:
        """A runtime parameter change (name -> new value, table checks passed): why it is refused, or None;
        the processor applies it (the values become ``self.cfg`` and the processor's right after)."""
        processor = self._processor
        return None if processor is None else processor.check_runtime_params(changes)

    def runtime_params_changed(self, names: set[str]) -> None:
        """After runtime parameters ``names`` changed (``self.cfg`` holds the new values)."""

    # -- the skeleton's hooks (ros/lifecycle.py) ------------------------------------------------------------

    def create_inputs(self) -> None:
        """Activate: a fresh intake, the processor's per-frame state forgotten (``CameraProcessor.restart``),
        the image subscription (``camera/image_input.py``)."""
        self._idle_ns = 0
        self._intake.reset()
        processor = self._processor
        if processor is not None:
            processor.restart()
        self._start_silence_clock()
        self._subscribe()

    def drop_inputs(self) -> None:
        """Deactivate / teardown: unsubscribe, then (the base) wait for the frame in flight."""
        self._sub = None
        super().drop_inputs()

    def check_parameters(self, params: list[Parameter]) -> str | None:
        runtime = {p.name: p.value for p in params if p.name in self.PARAMS.runtime_names()}
        return self.check_runtime_params(runtime) if runtime else None

    def parameters_changed(self, params: list[Parameter]) -> None:
        names = {p.name for p in params} & self.PARAMS.runtime_names()
        if names:
            processor = self._processor
            if processor is not None:
                processor.params = self.cfg
            self.runtime_params_changed(names)

    def diagnostic_status(self) -> tuple[int, str, dict[str, object]]:
        image_values, warnings, silent = self._image_status()
        active = self.inputs_active()
        return report.status(self._intake.stats, self.diagnostic_values(), image_values,
                             warnings + self.diagnostic_warnings(), active, silent=active and silent)

    def report_fault(self, cause: str) -> None:
        """Main executor, once per latched fault, before the node leaves 'active': counted, and published at
        once (ERROR "processing errors: <cause>"), as on_error is about to destroy the publishers."""
        stats = self._intake.stats
        stats.errors += 1
        stats.last_error = cause
        self.publish_diagnostics()

    # -- data path ------------------------------------------------------------------------------------------

    def _on_image(self, msg: Image | CompressedImage, info: MessageInfo) -> None:
        """Image executor thread: process the newest frame queued in the reader, right here (under the
        data-path lock, only while active and no fault is latched: ``ManagedNode.data_subscription``)."""
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
            self.latch(f"device failure while processing: {exc}")
        # Anything else is a fault of the node, not of the frame: it escapes the camera callback and
        # ros/spinning.py hands it to companion_failed (error processing; counting it per frame and going on
        # would leave the node 'active' while every frame fails).

    def _process_frame(self, frame: Frame, skipped: int) -> None:
        started = time.monotonic()
        rgb = to_rgb(frame.msg, self.cfg.max_image_pixels)
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
