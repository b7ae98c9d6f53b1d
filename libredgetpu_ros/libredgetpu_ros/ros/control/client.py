"""The planner's side of ``~/set_weights``: a client that does not lose replies, and retries that are safe.

Measured (docs/reliability.md, section 4): replies were lost in the *client's* reply reader. rmw_fastrtps
delivers every reply of a service to every client's reply reader, which keeps them in a ``KEEP_LAST``
history (depth 10 with ROS's default service QoS) until the client's executor takes them and drops the
other clients' ones; with many busy clients a client's own reply can be pushed out before it is taken
(8 clients: 5-7 lost in ~4,000 calls at depth 10, 0 at depth 1000). So:

- :data:`REPLY_QOS`: the default service QoS with a history of 1000;
- :func:`call_set_weights`: gives the request a ``request_id`` and, when no reply comes in time, sends the
  same request again: the node answers a repeated id from its record (``replayed``), never applying twice.

Both need an executor spinning the client's node in another thread (the call waits on the future).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from libredgetpu_ros_interfaces.srv import SetWeights

REPLY_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.VOLATILE)


def create_weights_client(node: Any, service: str) -> Any:
    """A ``SetWeights`` client on ``node`` for ``service`` (e.g. ``/ctl/control_node/set_weights``)."""
    return node.create_client(SetWeights, service, qos_profile=REPLY_QOS)


def call_set_weights(client: Any, request: SetWeights.Request, timeout: float = 2.0,
                     attempts: int = 3) -> SetWeights.Response | None:
    """Send ``request`` (a ``request_id`` is added when it has none) and wait up to ``timeout`` s for the
    reply, re-sending the same request up to ``attempts`` times; None if no reply ever came (then the
    node's ``get_weights().last_request_id`` still tells whether it was applied)."""
    if not request.request_id:
        request.request_id = uuid.uuid4().hex
    for _ in range(attempts):
        done = threading.Event()
        future = client.call_async(request)
        future.add_done_callback(lambda _f, done=done: done.set())
        if done.wait(timeout):
            return future.result()
        client.remove_pending_request(future)  # a late reply to this copy is not wanted any more
    return None
