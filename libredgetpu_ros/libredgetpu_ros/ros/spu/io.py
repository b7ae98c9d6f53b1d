"""Topics of the SPU node: one ``sensor_msgs/JointState`` per IOSpec input and output.

Why JointState: it is the standard stamped float vector of ROS 2 (``header`` + ``position: float64[]``), so a
latched input can be wired straight from a robot's ``/joint_states`` (the seed's "tuning parameter from the
robot's state") and every tool can echo and plot it; no custom message is needed. Only ``header`` and
``position`` are used; ``name`` is left empty on outputs.

IOSpec varnames such as ``output.0`` or ``'0'`` are not valid ROS name tokens: :func:`topic_token` maps them
(non-alphanumerics -> ``_``, a leading digit gets ``v``); a clash between two vectors is a configure error.
"""

from __future__ import annotations

import array
import re
from collections.abc import Callable

import numpy as np
from sensor_msgs.msg import JointState

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.femto.iospec import VectorSpec
from libredgetpu_ros.ros.params import resolved_topic
from libredgetpu_ros.textdata import clip


def topic_token(varname: str) -> str:
    token = re.sub(r"[^A-Za-z0-9_]", "_", varname) or "_"
    return f"v{token}" if token[0].isdigit() else token


def topic_names(vectors: list[VectorSpec], prefix: str) -> dict[str, str]:
    """varname -> ``~/<prefix>/<token>``; ConfigError when two varnames map to one token."""
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for vec in vectors:
        token = topic_token(vec.name)
        if token in seen:
            raise ConfigError(f"{prefix} vectors {seen[token]!r} and {vec.name!r} both map to topic token "
                              f"{token!r}; rename one in the IOSpec")
        seen[token] = vec.name
        out[vec.name] = f"~/{prefix}/{token}"
    return out


def check_topics(resolve: Callable[[str], str], topics: dict[str, str]) -> None:
    """ConfigError when a topic, resolved by the node (``node.resolve_topic_name``), is not a valid ROS name:
    a varname of hundreds of characters makes one longer than DDS allows, which would only fail (with an
    exception, the node in ErrorProcessing) when activate creates the subscription."""
    for varname, topic in topics.items():
        try:
            resolved_topic(resolve, topic, f"the topic of vector {clip(varname, 60)}")
        except ConfigError as exc:
            raise ConfigError(f"{exc}; shorten the varname in the IOSpec") from None


def values_of(msg: JointState) -> np.ndarray:
    """``position`` as float64 without a per-element copy."""
    p = msg.position
    return np.frombuffer(p, dtype=np.float64) if isinstance(p, array.array) else np.asarray(p, np.float64)


def vector_msg(stamp, frame_id: str, values: np.ndarray) -> JointState:
    msg = JointState()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    out = array.array("d")
    out.frombytes(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    msg.position = out
    return msg
