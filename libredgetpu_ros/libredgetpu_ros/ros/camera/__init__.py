"""The camera-node base: everything a lifecycle node that takes camera images shares.

Modules: ``node_base`` (:class:`CameraNode`: a ``ros/lifecycle.py`` ``ManagedNode``, the skeleton every node
shares, plus the processor, the image intake, the camera diagnostics), ``processor``
(:class:`CameraProcessor`: what a node does with a frame, without the node; the live node and
``process-bag`` run the same one), ``image_input`` (the image subscription: reliability, QoS events, the
no-input warning), ``params`` (the shared image parameters), ``qos`` (image subscription reliability),
``intake`` (frame arrival, skipped and lost frames), ``report`` (diagnostics and ``~/timing`` messages),
``image_plane`` (markers on the camera's image plane from its CameraInfo: a mixin for nodes that draw
markers).

Subclass API (the tracker node, ``ros/robotics/tracker_node.py``, is a short complete example)::

    @dataclass(frozen=True)
    class SpotParams(ImageParams):          # the shared image fields + one field per own parameter
        threshold: float

    PARAMS = camera_param_table([ParamSpec("threshold", 0.5, "...", range=(0.0, 1.0),
                                           mutability="runtime")], SpotParams)

    class SpotProcessor(CameraProcessor):   # no rclpy node: process-bag runs it too (ros/bag_nodes.py)
        def __init__(self, params, warn=None):   # open from the parameters; LibrEdgeTpuError -> FAILURE
            super().__init__(params, warn)
            self.finder = open_finder(params)
            self.out_types = {"spot": PointStamped}   # relative topic -> message class: the publishers
        def frame(self, header, rgb, wanted=None, plane=None, prepared=None):  # camera thread, newest frame
            t0 = time.monotonic(); found = self.finder.find(rgb); t1 = time.monotonic()
            msgs = [("spot", PointStamped(header=header, ...))]  # wanted(topic): someone reads it
            return FrameOutput(msgs, {"detect": (t1 - t0) * 1e3, "publish": (time.monotonic() - t1) * 1e3})
        def warm_up(self, rgb): ...           # offline: first-call costs, no state a later frame sees
        def restart(self): ...               # activate: forget the last frame / result from before the pause
        def latched(self, header): return []  # transient-local messages published once on configure
        def diagnostic_values(self): return {"threshold": self.params.threshold}
        def diagnostic_warnings(self): return []        # extra WARN reasons
        def hardware_id(self): return "cpu"
        def check_runtime_params(self, changes): return None  # apply, or the reason a change is refused
        def close(self): self.finder.close()

    class SpotNode(CameraNode):
        PARAMS = PARAMS                      # declared in __init__, read into self.cfg on configure
        PROCESSOR = SpotProcessor            # opened on configure (under a lock), closed on cleanup
        DIAGNOSTICS_NAME = "spot"            # /diagnostics status "<node>: spot"; the default node name

        def create_outputs(self):            # a publisher per out_types topic and ~/timing, then yours
            super().create_outputs()
            self.service(Trigger, "~/reset", self._on_reset)   # destroyed by the base; self.processor
        def runtime_params_changed(self, names): ...    # self.cfg and the processor's: the new values
        def create_inputs(self):             # another input on the camera thread, in order with the frames
            super().create_inputs()          # the image subscription
            self.data_subscription(CameraInfo, "camera_info", self._on_info, qos)  # dropped on deactivate

These are ``ManagedNode``'s hooks (``ros/lifecycle.py``: ``open_processor`` / ``close_processor``,
``create_outputs`` with :meth:`output` and :meth:`service`, ``create_inputs`` / ``drop_inputs`` with
``data_subscription``, ``describe``, ``latch``), which ``CameraNode`` fills for a camera: a subclass
extends them with ``super()``, never overrides the transitions (``on_configure``, ``on_activate``...).

A node publishes, per frame, what its processor's ``frame`` returns (for the topics someone subscribes to,
markers on the camera's image plane with ``image_plane.ImagePlaneInput``), in that order, and adds the
publishing time to the processor's ``publish`` stage; its diagnostics values, warnings and hardware id are
the processor's unless it overrides them (e.g. to add what its services count).

What the base does, so a subclass does not:

- parameters: one table (own + ``IMAGE_PARAMS``: ``input_topic``, ``transport`` raw|compressed (reads
  ``<input_topic>/compressed``, image_transport's naming; ``input_type``: its deprecated predecessor),
  ``image_reliability`` auto|best_effort|reliable, ``max_image_pixels``, ``input_timeout``, and every node's
  ``diagnostics_period``, ``ros/params.py``) declared with descriptors; choices, ranges and "applied on
  configure" enforced on every set; every ``*_topic`` parameter checked as a ROS topic name on configure;
  ``self.cfg`` is the values dataclass (read on configure, runtime values swapped in when set);
- the image subscription: created on activate, destroyed on deactivate (after which the frame in progress
  is waited for); the node's own (``ros2 node info`` lists it), on the node's data path
  (``companion_groups()``, ``ros/spinning.py``; host the node with ``run_lifecycle_node_main`` or
  ``bringup``, or any rclpy executor, which then runs the camera path on its thread); reliability chosen
  from the publishers (``qos.choose_reliability``) and chosen again when a publisher appears;
  incompatible-QoS events counted and named in diagnostics; after ``input_timeout`` s without a frame a
  WARN lists the image topics that exist;
- every frame: the newest queued frame only, ``to_rgb`` with the pixel budget (raw or compressed), skipped
  and lost frames counted (``Intake``); the processor's ``frame`` gets HxWx3 uint8 RGB and the frame's
  ``Header`` (copy it into every output); bad input (``InputError``) counted per cause and logged at most
  every 10 s; ``DeviceError`` / ``BackendError`` or any unexpected exception -> one ERROR status naming
  the cause, then deactivate -> ``on_error`` -> ``unconfigured`` (``spinning.CompanionFault``);
- ``~/timing`` (per frame, only while subscribed): wait, convert, your stages, process, node latency;
  ``/diagnostics`` every ``diagnostics_period`` while configured: your values, the subscription's, rates,
  counters, mean stage times, node latency; level ERROR / WARN (your warnings + bad input, transport loss,
  no input while active) / OK (the output rate, or ``inactive``).

Run a subclass with ``spinning.run_lifecycle_node_main(SpotNode, args, retain_allocations=True)`` (its
``main()``), add it to ``bringup.NODE_TYPES`` for ``libredgetpu-ros bringup`` and its processor to
``bag_nodes.OFFLINE_NODES`` for ``process-bag``.

Name a subclass's attributes after what they hold, never after rclpy's own (``_services``, ``_timers``,
``_subscriptions``, ``_publishers``, ``_clients``, ``_parameters``...): rclpy's ``Node`` keeps its entities in
those, and overwriting ``_services`` removed the lifecycle services (activate then hung; seen in the
recognition node).
"""

from libredgetpu_ros.ros.camera.intake import Frame, FrameStats, Intake
from libredgetpu_ros.ros.camera.node_base import RESULT_QOS, CameraNode
from libredgetpu_ros.ros.camera.params import IMAGE_PARAMS, ImageParams, camera_param_table
from libredgetpu_ros.ros.camera.processor import CameraProcessor, FrameOutput

__all__ = ["IMAGE_PARAMS", "RESULT_QOS", "CameraNode", "CameraProcessor", "Frame", "FrameOutput",
           "FrameStats", "ImageParams", "Intake", "camera_param_table"]
