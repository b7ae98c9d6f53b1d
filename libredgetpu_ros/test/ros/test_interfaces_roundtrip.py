"""Our custom interfaces survive a trip between two processes over DDS, bit for bit.

A peer process (``_interfaces_peer.py``) serves SetWeights/GetWeights and publishes Detection2DArray
(vision_msgs, what the perception node publishes), PersonPoseArray and Looming. This test sends a weight
matrix with awkward float32 values (signed zero, subnormals, float32 extremes), reads it back, and compares
every field of every message, including nested arrays.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

PEER_PATH = Path(__file__).with_name("_interfaces_peer.py")
DISCOVERY_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 10.0
ROWS, COLS = 7, 33


def _as_plain(value: Any) -> Any:
    """A message as nested dicts/lists (float32 arrays as uint32 bit patterns), so pytest diffs it."""
    if hasattr(value, "get_fields_and_field_types"):
        return {name: _as_plain(getattr(value, name)) for name in value.get_fields_and_field_types()}
    if isinstance(value, np.ndarray) or (hasattr(value, "typecode") and value.typecode == "f"):
        return np.asarray(value, dtype=np.float32).view(np.uint32).tolist()
    if isinstance(value, list | tuple):
        return [_as_plain(v) for v in value]
    return value


def _awkward_weights(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    data = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    info = np.finfo(np.float32)
    data[0, :6] = [-0.0, info.smallest_subnormal, -info.smallest_subnormal, info.max, info.min, info.tiny]
    bias = rng.uniform(-1e-3, 1e-3, ROWS).astype(np.float32)
    return data, bias


def _spin_until(executor: Any, done: Any, timeout_s: float, what: str, peer: Any) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if peer.poll() is not None:
            pytest.fail(f"peer exited with code {peer.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        executor.spin_once(timeout_sec=0.05)


@pytest.mark.ros
def test_interfaces_roundtrip_between_processes(ros_env) -> None:
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from vision_msgs.msg import Detection2DArray

    from libredgetpu_ros_interfaces.msg import Looming, PersonPoseArray
    from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

    peer_module = load_helper(PEER_PATH)
    peer = ros_env.spawn([sys.executable, str(PEER_PATH), "--lifetime", "120"], "interfaces_peer")
    context = ros_env.init_rclpy()
    node = Node("interfaces_roundtrip_test", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)

    received: dict[str, Any] = {}
    node.create_subscription(Detection2DArray, "detections", lambda m: received.setdefault("det", m), 10)
    node.create_subscription(PersonPoseArray, "poses", lambda m: received.setdefault("pose", m), 10)
    node.create_subscription(Looming, "looming", lambda m: received.setdefault("looming", m), 10)
    set_client = node.create_client(SetWeights, "set_weights")
    get_client = node.create_client(GetWeights, "get_weights")

    _spin_until(executor, lambda: set_client.service_is_ready() and get_client.service_is_ready(),
                DISCOVERY_TIMEOUT_S, "the peer's services", peer)

    data, bias = _awkward_weights(np.random.default_rng(20261122))
    request = SetWeights.Request(engine="arm_ü", rows=ROWS, cols=COLS, dry_run=True)
    request.data = data.ravel()
    request.bias = bias
    future = set_client.call_async(request)
    _spin_until(executor, future.done, CALL_TIMEOUT_S, "the SetWeights reply", peer)
    reply = future.result()
    expected_reply = SetWeights.Response(**peer_module.SET_WEIGHTS_REPLY,
                                         message=peer_module.echo_message("arm_ü", ROWS, COLS, True))
    assert _as_plain(reply) == _as_plain(expected_reply)

    future = get_client.call_async(GetWeights.Request(engine="arm_ü"))
    _spin_until(executor, future.done, CALL_TIMEOUT_S, "the GetWeights reply", peer)
    weights = future.result()
    assert weights.success, weights.message
    assert (weights.rows, weights.cols, weights.version) == (ROWS, COLS, 2**64 - 1)
    # Bit patterns: -0.0 and subnormals must arrive exactly as sent.
    np.testing.assert_array_equal(np.asarray(weights.data, np.float32).view(np.uint32),
                                  data.ravel().view(np.uint32))
    np.testing.assert_array_equal(np.asarray(weights.bias, np.float32).view(np.uint32), bias.view(np.uint32))
    np.testing.assert_array_equal(np.asarray(weights.weight_min, np.float32), data.min(axis=1))
    np.testing.assert_array_equal(np.asarray(weights.weight_max, np.float32), data.max(axis=1))

    _spin_until(executor, lambda: {"det", "pose", "looming"} <= set(received), DISCOVERY_TIMEOUT_S,
                "Detection2DArray, PersonPoseArray and Looming from the peer", peer)
    assert _as_plain(received["det"]) == _as_plain(peer_module.detections())
    assert _as_plain(received["pose"]) == _as_plain(peer_module.poses())
    assert [len(d.results) for d in received["det"].detections] == [0, 1, 3]
    assert received["det"].detections[2].bbox.size_y == 2.0**-1074
    assert [len(p.keypoints) for p in received["pose"].poses] == [17, 17]
    assert _as_plain(received["looming"]) == _as_plain(peer_module.looming())
    assert received["looming"].ttc_reason == "not_approaching/ü"

    node.destroy_node()
