"""State vectors from JointState / Float64MultiArray messages: live (rclpy) or from a bag (rosbags), one rule.

Both message kinds have the same field names in rclpy and rosbags, so the node and offline processing of a
bag read states through the same function; JointState names are mapped to ``joint_names`` with the control
node's ``JointOrder``.
"""

from __future__ import annotations

import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.errors import InputError
from libredgetpu_ros.ros.control.codec import JointOrder

STATE_MESSAGE_BYTES = 1 << 20  # a per-message compressed state, decompressed (states are a few KB)

TYPE_NAMES = {"joint_state": "sensor_msgs/msg/JointState",
              "float64_multi_array": "std_msgs/msg/Float64MultiArray"}


def state_vector(msg: Any, state_type: str, joint_field: str, order: JointOrder | None) -> np.ndarray:
    """float64 values of one state message; InputError when configured joints are missing."""
    values = msg.data if state_type == "float64_multi_array" else getattr(msg, joint_field)
    if isinstance(values, array.array):
        x = np.frombuffer(values, np.float64) if values.typecode == "d" else np.asarray(values, np.float64)
    else:
        x = np.asarray(values, dtype=np.float64)
    if order is not None:
        selected = order.select(x, msg.name)
        if selected is None:
            raise InputError(f"JointState lacks the configured joints (got {list(msg.name)} with {x.size} "
                             f"{joint_field} values)")
        x = selected
    return x


def read_bag_states(bag: str | Path, topic: str, state_type: str, joint_field: str,
                    order: JointOrder | None, size: int,
                    check: Callable[[], None] | None = None) -> tuple[np.ndarray, int]:
    """(states (T, size) of ``topic`` in recorded order, messages skipped as malformed/NaN/wrong size);
    ``check`` is called before every message (the node's fit: raises to stop a read a teardown cancelled)."""
    from libredgetpu_ros.bags.storage import Unreadable, open_reader
    from libredgetpu_ros.bags.storage import messages as bag_messages
    from libredgetpu_ros.bags.typestore import typestore

    store = typestore()
    reader = open_reader(bag)
    try:
        connections = [c for c in reader.connections if c.topic == topic]
        if not connections:
            raise InputError(f"bag {bag} has no topic {topic!r} (topics: "
                             f"{sorted({c.topic for c in reader.connections})})")
        wrong = [c.msgtype for c in connections if c.msgtype != TYPE_NAMES[state_type]]
        if wrong:
            raise InputError(f"bag {bag}: topic {topic} holds {wrong[0]}, the node reads "
                             f"{TYPE_NAMES[state_type]}")
        rows, skipped = [], 0
        # bags.storage.messages: damaged bags are one InputError, per-message compressed states are
        # decompressed within a budget (a state message is small: 1 MiB is generous).
        for conn, _, raw in bag_messages(reader, connections, STATE_MESSAGE_BYTES):
            if check is not None:
                check()
            if raw is None or isinstance(raw, Unreadable):
                skipped += 1
                continue
            try:
                x = state_vector(store.deserialize_cdr(raw, conn.msgtype), state_type, joint_field, order)
            except (InputError, ValueError, KeyError, IndexError):
                skipped += 1
                continue
            if x.shape != (size,) or not np.isfinite(x).all():
                skipped += 1
                continue
            rows.append(x)
    finally:
        reader.close()
    return (np.array(rows) if rows else np.zeros((0, size))), skipped
