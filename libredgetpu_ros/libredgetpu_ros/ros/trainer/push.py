"""Pushing trained Linear weights into the control node's ``set_weights``, without waiting on anything.

The control node's controller shape is asked once from its ``get_weights`` twin (when the service name ends
in ``set_weights``); weights of another shape are never pushed (logged once, counted). Every call is
``call_async`` with a done callback, and at most one call is in flight: a ROS timer drives :meth:`push` and
returns at once. A call unanswered after :data:`ANSWER_TIMEOUT_S` (the control node crashed and was
respawned: the new one never answers the old request; or the answer was lost) is abandoned and, for a push,
counted ``pushes_lost``: the next push goes out. (Without it one lost answer stopped all pushing, silently.)
Both clients keep their replies as every planner should (``control/client.py``'s :data:`REPLY_QOS`, history
1000): with the default depth 10 a burst of other clients' replies to the same service pushed the trainer's
out of its reader before its executor took it (docs/control_node.md "Lost replies and request_id").
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from rclpy.node import Node

from libredgetpu_ros.ros.control.client import REPLY_QOS, create_weights_client
from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

ANSWER_TIMEOUT_S = 10.0  # a full-size set_weights is answered in well under a second (bench/results)


class WeightPusher:
    """The set_weights client (and its get_weights shape probe) of one configured trainer node."""

    def __init__(self, node: Node, service: str, engine: str, shape: tuple[int, int],
                 counters: dict[str, int]) -> None:
        self.node, self.engine, self.shape, self.counters = node, engine, shape, counters
        self._set = create_weights_client(node, service)
        self._probe = (node.create_client(GetWeights, service.removesuffix("set_weights") + "get_weights",
                                          qos_profile=REPLY_QOS)
                       if service.endswith("set_weights") else None)
        self._control_shape: tuple[int, int] | None = None
        self._pending = False  # a probe or a push is in flight
        self.timeout_s = ANSWER_TIMEOUT_S
        self._in_flight: tuple[Any, Any, float] | None = None  # (client, future, monotonic s sent)
        self._lost = False  # a push was abandoned unanswered since unanswered() last said so

    def destroy(self) -> None:
        for client in (self._set, self._probe):
            if client is not None:
                self.node.destroy_client(client)
        self._set = self._probe = None

    def push(self, weights: np.ndarray, bias: np.ndarray, request_id: str) -> bool:
        """Send the weights if the control node is there, its shape is known and equal, and nothing is in
        flight (True); otherwise count why not (or start the shape probe) and return False."""
        if self._set is None or (self._pending and not self._abandoned()):
            return False
        if not self._set.service_is_ready():
            self.counters["pushes_skipped"] += 1
            return False
        if not self._shape_matches():
            return False
        req = SetWeights.Request()
        req.engine = self.engine
        req.rows, req.cols = weights.shape
        req.data = weights.astype(np.float32).ravel().tolist()
        req.bias = bias.astype(np.float32).tolist()
        if hasattr(req, "request_id"):  # idempotency token where the interface has one
            req.request_id = request_id
        self._send(self._set, req, self._on_pushed)
        return True

    def unanswered(self) -> bool:
        """Whether a push was abandoned without an answer (the one in flight is checked now) since the last
        call: its weights are to go again, with the same request id (the control node answers from its
        replay record, applying nothing twice, if it had applied them after all)."""
        if self._pending:
            self._abandoned()
        lost, self._lost = self._lost, False
        return lost

    def _send(self, client: Any, req: Any, done: Any) -> None:
        self._pending = True
        future = client.call_async(req)
        self._in_flight = (client, future, time.monotonic())
        future.add_done_callback(done)

    def _abandoned(self) -> bool:
        """True when the call in flight has waited ``timeout_s`` for its answer: dropped (its answer, should
        it come after all, is ignored), a push counted ``pushes_lost``. A call already answered is never
        dropped: its done callback is queued on the executor and will clear it (dropping it let that late
        callback clear the next call's record instead: that call could never be abandoned, two in flight)."""
        client, future, sent = self._in_flight or (None, None, 0.0)
        if future is None or future.done() or time.monotonic() - sent < self.timeout_s:
            return False
        client.remove_pending_request(future)
        self._pending, self._in_flight = False, None
        if client is self._set:
            self._lost = True
            self.counters["pushes_lost"] += 1
            if self.counters["pushes_lost"] == 1:
                self.node.get_logger().warning(
                    f"set_weights did not answer a push within {self.timeout_s:g} s (the control node "
                    "restarted?): abandoned, pushing again (counted pushes_lost)")
        return True

    def _shape_matches(self) -> bool:
        """Whether the model's shape is the controller's (asked once, asynchronously: False until known)."""
        if self._probe is None:
            return True  # a service name without a get_weights twin: let set_weights judge
        if self._control_shape is None:
            if self._probe.service_is_ready():
                req = GetWeights.Request()
                req.engine = self.engine
                self._send(self._probe, req, self._on_control_shape)
            return False
        if self._control_shape == self.shape:
            return True
        self.counters["pushes_skipped"] += 1
        if self.counters["pushes_skipped"] == 1:
            self.node.get_logger().error(
                f"trained weights are {self.shape[0]}×{self.shape[1]} (output_size×input_size) but the "
                f"controller is {self._control_shape[0]}×{self._control_shape[1]} (command_size×state_size): "
                "they are not pushed (counted)")
        return False

    def _owns(self, future: Any) -> bool:
        """Whether ``future`` is the call in flight (a done callback of an abandoned call is ignored)."""
        return self._in_flight is not None and self._in_flight[1] is future

    def _on_control_shape(self, future: Any) -> None:
        if not self._owns(future):
            return
        self._pending, self._in_flight = False, None
        try:
            resp = future.result()
        except Exception as exc:  # rclpy hands back whatever the call raised: log it, ask again later
            self.node.get_logger().warning(f"control node get_weights failed: {exc}")
            return
        if resp is not None and resp.success:
            self._control_shape = (int(resp.rows), int(resp.cols))

    def _on_pushed(self, future: Any) -> None:
        if not self._owns(future):
            return
        self._pending, self._in_flight = False, None
        try:
            resp = future.result()
        except Exception as exc:  # rclpy hands back whatever the call raised: log and count it
            resp = None
            self.node.get_logger().error(f"set_weights call failed: {exc}")
        if resp is not None and resp.accepted:
            # Only an applied swap counts as accepted; a replayed answer applied nothing now.
            self.counters["pushes_replayed" if resp.replayed else "pushes_accepted"] += 1
            if resp.replayed and self.counters["pushes_replayed"] == 1:
                self.node.get_logger().warning(
                    "set_weights answered a push from its replay record (its request id was used before): "
                    "nothing applied (counted pushes_replayed)")
            return
        self.counters["pushes_refused"] += 1
        self.node.get_logger().warning(f"set_weights refused the trained weights: "
                                       f"{'no answer' if resp is None else resp.message}")
