"""The nodes' services: every handler runs behind one guard, so no exception type ever escapes a service.

An exception escaping a service callback leaves rclpy's executor ``spin()`` with it: the request is never
answered and the node process ends (``~/set_color`` with r = 1e308 ended the tracker that way). Handlers
refuse bad requests themselves with a typed ``LibrEdgeTpuError`` (``success: false`` and the reason); this
guard is the net under them for what they did not foresee: the request is answered with
``success`` / ``accepted`` false and ``internal error (<type>): <message>`` (cut), the traceback goes to the
node's log, and the node keeps spinning. Handlers change their state in one assignment after every check
(the reservoir's readout, the database snapshot, the parameter store), so a request that failed part-way
leaves the previous good state in place.

Every node makes its services with :func:`create_guarded_service` (the camera-node base's ``service()`` does
it for its subclasses).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from libredgetpu_ros.textdata import clip

# Boolean fields meaning "the request was done", in the order looked for in a response.
_OK_FIELDS = ("success", "accepted")
MESSAGE_CHARS = 400  # the longest message text a guarded failure answers with


def failure_response(srv_type: Any, message: str) -> Any:
    """A fresh response of ``srv_type`` saying the request was not done (``success`` / ``accepted`` false)
    with ``message``; fields the type lacks are skipped."""
    response = srv_type.Response()
    fields = response.get_fields_and_field_types()
    for name in _OK_FIELDS:
        if name in fields:
            setattr(response, name, False)
    if "message" in fields:
        response.message = clip(message, MESSAGE_CHARS)
    return response


def guard(node: Any, srv_type: Any, name: str,
          callback: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``callback`` answering a failure response (see the module docstring) for any exception it raises."""

    def guarded(request: Any, response: Any) -> Any:
        try:
            return callback(request, response)
        except Exception as exc:  # the net: log it whole, answer, keep the node spinning
            trace = "".join(traceback.format_exception(exc)).rstrip()
            node.get_logger().error(f"service {name}: unexpected {type(exc).__name__}, request refused, "
                                    f"state unchanged:\n{clip(trace, 8000)}")
            return failure_response(srv_type, f"internal error ({type(exc).__name__}): {clip(exc)}")

    return guarded


def create_guarded_service(node: Any, srv_type: Any, name: str, callback: Callable[[Any, Any], Any],
                           **kwargs: Any) -> Any:
    """``node.create_service`` with ``callback`` behind :func:`guard`."""
    return node.create_service(srv_type, name, guard(node, srv_type, name, callback), **kwargs)
