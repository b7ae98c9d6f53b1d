"""The test's end of a node running in another process: what a robot's supervisor does over DDS.

``Probe(ros_env, name)``: a plain node (``ros_env.probe``: a fresh context of the test's domain) and a
single-threaded executor spun by the test's own calls (``spin_for``, ``wait_for``).
``LifecycleSupervisor(ros_env, probe_name, node_fqn)`` adds the node's ``change_state``, ``get_state`` and
``set_parameters`` clients, waits until they are served, and calls them (``service``: any other service of
the node; ``request_async``: transitions requested back to back, ``answers_while_held``: the same while the
node holds a call in flight, for the teardown-race tests). Node tests subclass it and add their camera
publishers, result and /diagnostics recorders. Used by the flow, perception and robotics node tests, the bag
replay tests and the data-path and trainer teardown tests (loaded by path:
``load_helper(HERE / "_lifecycle_supervisor.py")``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

TRANSITIONS = ("configure", "cleanup", "activate", "deactivate")  # lifecycle_msgs/Transition ids 1..4


class Probe:
    """A node and its executor, spun in the caller's thread; ``wait_s`` bounds every single wait (discovery
    of a new process can take a few seconds)."""

    def __init__(self, ros_env: Any, name: str, wait_s: float = 15.0) -> None:
        self.wait_s = wait_s
        self.node, self.executor = ros_env.probe(name)

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.02)

    def wait_for(self, what: str | Callable[[], str], predicate: Callable[[], Any],
                 timeout: float | None = None, every: Callable[[], None] | None = None) -> Any:
        """Spin until ``predicate()`` is truthy and return its value; ``every`` runs once a second (e.g.
        re-publish a best-effort frame that went out before the node's subscription had matched). ``what``
        names the wait in the failure (a callable: evaluated then, to show the state at the timeout)."""
        timeout = self.wait_s if timeout is None else timeout
        end = time.monotonic() + timeout
        next_every = 0.0
        while time.monotonic() < end:
            if every is not None and time.monotonic() >= next_every:
                every()
                next_every = time.monotonic() + 1.0
            self.executor.spin_once(timeout_sec=0.05)
            value = predicate()
            if value:
                return value
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what() if callable(what) else what}")


class LifecycleSupervisor(Probe):
    """Lifecycle and parameter client of the node ``node_fqn`` (e.g. ``/flow_test``)."""

    def __init__(self, ros_env: Any, probe_name: str, node_fqn: str, wait_s: float = 15.0) -> None:
        from lifecycle_msgs.srv import ChangeState, GetState
        from rcl_interfaces.srv import SetParameters

        super().__init__(ros_env, probe_name, wait_s)
        self.fqn = node_fqn
        self.change = self.node.create_client(ChangeState, f"{node_fqn}/change_state")
        self.get = self.node.create_client(GetState, f"{node_fqn}/get_state")
        self.set_params = self.node.create_client(SetParameters, f"{node_fqn}/set_parameters")
        for client in (self.change, self.get, self.set_params):
            assert client.wait_for_service(timeout_sec=wait_s), f"{client.srv_name} did not appear"

    def call(self, client: Any, request: Any) -> Any:
        future = client.call_async(request)
        self.executor.spin_until_future_complete(future, timeout_sec=self.wait_s)
        assert future.done(), f"no answer from {client.srv_name}"
        return future.result()

    def transition(self, transition: str | int) -> bool:
        """Request a transition by label ("configure", "activate", ...) or lifecycle_msgs id."""
        return bool(self.call(self.change, _change_request(transition)).success)

    def request_async(self, *transitions: str | int) -> list[Any]:
        """Request ``transitions`` back to back without waiting for an answer (as bringup's stop and a
        supervisor do): their futures, in order (answered as this probe spins)."""
        return [self.change.call_async(_change_request(t)) for t in transitions]

    def answers_while_held(self, transitions: tuple[str, ...], release: Callable[[], None],
                           hold_s: float) -> list[Any]:
        """:meth:`request_async` ``transitions`` while the node holds a call, spin until they are all
        answered or ``hold_s`` passed, ``release()`` the call, and return the answers (``ChangeState``
        responses, in order) once all came."""
        futures = self.request_async(*transitions)
        end = time.monotonic() + hold_s
        while time.monotonic() < end and not all(f.done() for f in futures):
            self.executor.spin_once(timeout_sec=0.05)
        release()
        self.wait_for(f"the {' and '.join(transitions)} answers", lambda: all(f.done() for f in futures))
        return [f.result() for f in futures]

    def state(self) -> str:
        """The node's lifecycle state label ("unconfigured", "inactive", "active", ...)."""
        from lifecycle_msgs.srv import GetState

        return str(self.call(self.get, GetState.Request()).current_state.label)

    def service(self, srv_type: type, name: str, **fields: Any) -> Any:
        """Call the node's service ``<node_fqn>/<name>`` (e.g. ``enroll``) with a request of ``fields``; the
        response."""
        client = self.node.create_client(srv_type, f"{self.fqn}/{name}")
        try:
            assert client.wait_for_service(timeout_sec=self.wait_s), f"{self.fqn}/{name} did not appear"
            return self.call(client, srv_type.Request(**fields))
        finally:
            self.node.destroy_client(client)

    def set_param(self, name: str, value: Any) -> Any:
        """``SetParameters`` of one parameter (its type taken from ``value``); the node's
        ``SetParametersResult``."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
        return self.call(self.set_params, request).results[0]


def _change_request(transition: str | int) -> Any:
    """A ``ChangeState`` request of a transition by label ("configure", ...) or lifecycle_msgs id."""
    from lifecycle_msgs.srv import ChangeState

    request = ChangeState.Request()
    request.transition.id = TRANSITIONS.index(transition) + 1 if isinstance(transition, str) else transition
    return request
