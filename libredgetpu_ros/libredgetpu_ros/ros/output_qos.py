"""Result publishers whose QoS a user overrides with parameters, the same way on every node (rclpy's
``QoSOverridingOptions``, what rclcpp's ``QosOverridingOptions`` gives C++ nodes).

Each output declares read-only parameters ``qos_overrides.<topic>.publisher.{history,depth,reliability,
durability}`` (``<topic>`` fully qualified, namespace and remappings applied) holding the node's own profile,
so ``ros2 param dump`` shows them; a params file sets them before the publisher exists::

    /**:
      ros__parameters:
        qos_overrides:
          /front/detections:
            publisher:
              reliability: best_effort
              depth: 1

Checked here: a KEEP_LAST depth in 1..:data:`MAX_DEPTH`; a bad value (unknown policy name, depth 0) fails
configure with :class:`ConfigError` naming the topic. The profile given is copied first: rclpy writes the
overrides into the profile object it is handed, and the nodes share theirs between publishers.
"""

from __future__ import annotations

from typing import Any

from rclpy.qos import QoSHistoryPolicy, QoSPolicyKind, QoSProfile
from rclpy.qos_overriding_options import InvalidQosOverridesError, QosCallbackResult, QoSOverridingOptions

from libredgetpu_ros.errors import ConfigError

OVERRIDABLE = (QoSPolicyKind.HISTORY, QoSPolicyKind.DEPTH, QoSPolicyKind.RELIABILITY,
               QoSPolicyKind.DURABILITY)
MAX_DEPTH = 1000  # a deeper keep-last queue only holds stale results in memory


def _check(qos: QoSProfile) -> QosCallbackResult:
    result = QosCallbackResult()
    result.successful = qos.history != QoSHistoryPolicy.KEEP_LAST or 1 <= qos.depth <= MAX_DEPTH
    result.reason = "" if result.successful else f"depth {qos.depth} is not in 1..{MAX_DEPTH} (keep_last)"
    return result


OUTPUT_OVERRIDES = QoSOverridingOptions(OVERRIDABLE, callback=_check)


def _copy(qos: QoSProfile) -> QoSProfile:
    # Every policy by its keyword (QoSProfile's slots are "_" + keyword); deepcopy cannot copy its durations.
    return QoSProfile(**{slot[1:]: getattr(qos, slot[1:]) for slot in QoSProfile.__slots__})


def output_publisher(node: Any, msg_type: Any, topic: str, qos: QoSProfile | int, *,
                     lifecycle: bool = True) -> Any:
    """A (lifecycle) publisher of ``node`` on ``topic`` with ``qos`` as the default of its overridable
    policies; ConfigError when the overrides given are invalid."""
    profile = _copy(qos) if isinstance(qos, QoSProfile) else QoSProfile(depth=qos)
    make = node.create_lifecycle_publisher if lifecycle else node.create_publisher
    try:
        return make(msg_type, topic, profile, qos_overriding_options=OUTPUT_OVERRIDES)
    except (InvalidQosOverridesError, RuntimeError, ValueError) as exc:
        message = f"qos_overrides of {node.resolve_topic_name(topic)}: {exc}"
        node.get_logger().error(message)  # logged here too: not every node's configure logs this error
        raise ConfigError(message) from None
