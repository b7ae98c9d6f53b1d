"""The camera-node base: everything a lifecycle node that takes camera images shares.

Modules: ``node_base`` (:class:`CameraNode`: lifecycle, image intake, fault handling, diagnostics),
``params`` (the shared image parameters), ``qos`` (image subscription reliability), ``intake`` (frame
arrival, skipped and lost frames), ``report`` (diagnostics and ``~/timing`` messages), ``image_plane``
(markers on the camera's image plane from its CameraInfo: a mixin for nodes that draw markers).

Subclass API (the perception node, ``ros/perception/node.py``, is the reference subclass)::

    @dataclass(frozen=True)
    class SpotParams(ImageParams):          # the shared image fields + one field per own parameter
        threshold: float

    PARAMS = camera_param_table([ParamSpec("threshold", 0.5, "...", range=(0.0, 1.0),
                                           mutability="runtime")], SpotParams)

    class SpotNode(CameraNode):
        PARAMS = PARAMS                      # declared in __init__, read into self.params on configure
        DIAGNOSTICS_NAME = "spot"            # /diagnostics status "<node>: spot"

        def open_processor(self): ...        # configure: open from self.params; LibrEdgeTpuError -> FAILURE
        def close_processor(self): ...       # cleanup/shutdown/error; idempotent, never raises
        def create_outputs(self):            # configure: publishers, services; destroyed by the base
            self._pub = self.output(PointStamped, "spot")
            self.service(Trigger, "~/reset", self._on_reset)
        def process(self, rgb, header, frame):   # camera thread, newest frame only
            t0 = time.monotonic(); ...; self._pub.publish(PointStamped(header=header, ...))
            return {"detect": (time.monotonic() - t0) * 1e3}   # ms per stage; None: nothing done
        def diagnostic_values(self): return {"threshold": self.params.threshold}
        def diagnostic_warnings(self): return []        # extra WARN reasons
        def hardware_id(self): return "cpu"
        def check_runtime_params(self, changes): return None  # or the reason a runtime change is refused
        def runtime_params_changed(self, names): ...    # self.params already holds the new values
        # another input handled on the camera thread, in order with the frames (on_activate/on_deactivate):
        #   self._info = self.camera_subscription(CameraInfo, "camera_info", self._on_info, qos)
        #   self.destroy_camera_subscription(self._info)

What the base does, so a subclass does not:

- parameters: one table (own + ``IMAGE_PARAMS``: ``input_topic``, ``transport`` raw|compressed (reads
  ``<input_topic>/compressed``, image_transport's naming; ``input_type``: its deprecated predecessor),
  ``image_reliability`` auto|best_effort|reliable, ``max_image_pixels``, ``input_timeout``,
  ``diagnostics_period``) declared with descriptors; choices, ranges and "applied on configure" enforced on
  every set; ``self.params`` is the values dataclass;
- the image subscription: created in ``on_activate``, destroyed in ``on_deactivate``; the node's own (``ros2
  node info`` lists it) in a callback group spun on its own executor thread (``companion_groups()``,
  ``ros/spinning.py``; host the node with ``run_lifecycle_node_main`` or ``bringup``, or any rclpy
  executor, which then runs the camera path on its thread); reliability chosen from the
  publishers (``qos.choose_reliability``) and chosen again when a publisher appears; incompatible-QoS
  events counted and named in diagnostics; after ``input_timeout`` s without a frame a WARN lists the image
  topics that exist;
- every frame: the newest queued frame only, ``to_rgb`` with the pixel budget (raw or compressed), skipped
  and lost frames counted (``Intake``); ``process`` gets HxWx3 uint8 RGB and the frame's ``Header`` (copy it
  into every output); bad input (``InputError``) counted per cause and logged at most every 10 s;
  ``DeviceError`` / ``BackendError`` or any unexpected exception -> one ERROR status naming the cause, then
  deactivate -> ``on_error`` -> ``unconfigured`` (``spinning.CompanionFault``);
- ``~/timing`` (per frame, only while subscribed): wait, convert, your stages, process, node latency;
  ``/diagnostics`` every ``diagnostics_period``: your values, the subscription's, rates, counters, mean
  stage times, node latency; level ERROR / WARN (your warnings + bad input, transport loss, no input) / OK.

Run a subclass with ``spinning.run_lifecycle_node_main(SpotNode, args, retain_allocations=True)`` (its
``main()``), and add it to ``bringup.NODE_TYPES`` for ``libredgetpu-ros bringup``.

Name a subclass's attributes after what they hold, never after rclpy's own (``_services``, ``_timers``,
``_subscriptions``, ``_publishers``, ``_clients``, ``_parameters``...): rclpy's ``Node`` keeps its entities in
those, and overwriting ``_services`` removed the lifecycle services (activate then hung; seen in the
recognition node).
"""

from libredgetpu_ros.ros.camera.intake import Frame, FrameStats, Intake
from libredgetpu_ros.ros.camera.node_base import RESULT_QOS, CameraNode
from libredgetpu_ros.ros.camera.params import IMAGE_PARAMS, ImageParams, camera_param_table

__all__ = ["IMAGE_PARAMS", "RESULT_QOS", "CameraNode", "Frame", "FrameStats", "ImageParams", "Intake",
           "camera_param_table"]
