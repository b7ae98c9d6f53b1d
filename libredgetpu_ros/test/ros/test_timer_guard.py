"""No exception escapes a node's timer (``ManagedNode.timer``, ``services.TimerFaults``): it used to leave the
executor's ``spin()`` with it and end the node process, as an unguarded service did (issue 30). Guarded, it
is logged whole once per callback and type, the timer keeps firing, and the diagnostics say ERROR for the
period it happened in, then carry the count."""

from __future__ import annotations

import time

MODEL = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


def test_a_raising_timer_is_logged_once_counted_and_the_node_spins_on(ros_env, fixture_path,
                                                                     monkeypatch) -> None:
    from libredgetpu_ros.ros import diagnostics
    from libredgetpu_ros.ros.perception_node import PerceptionNode
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    context = ros_env.init_rclpy()
    node = PerceptionNode("perception_timer_guard", context=context, parameter_overrides=[
        Parameter("model", value=str(fixture_path(MODEL))), Parameter("backend", value="cpu"),
        Parameter("diagnostics_period", value=0.05)])
    errors: list[str] = []

    class Logger:
        def __getattr__(self, name: str):
            return errors.append if name == "error" else (lambda *a, **k: None)

    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.02)  # re-raises what a callback raised: the old failure

    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        statuses: list = []
        monkeypatch.setattr(node._diag_pub, "publish", lambda array: statuses.extend(array.status))
        own = node.diagnostic_status
        calls = []

        def broken():
            calls.append(1)
            raise ZeroDivisionError("a rate over an empty window")

        monkeypatch.setattr(node, "get_logger", Logger)
        monkeypatch.setattr(node, "diagnostic_status", broken)
        spin(0.6)
        assert len(calls) >= 3, calls  # the timer kept firing
        assert len(errors) == 1 and "ZeroDivisionError" in errors[0] and "Traceback" in errors[0], errors
        assert statuses == []  # nothing could be published while it raised
        monkeypatch.setattr(node, "diagnostic_status", own)
        spin(1.0)
        first, later = statuses[0], statuses[-1]
        assert ord(first.level) == diagnostics.ERROR and "ZeroDivisionError" in first.message, first
        values = {v.key: v.value for v in later.values}
        assert int(values["timer_faults"]) == len(calls)
        assert "ZeroDivisionError" not in later.message, later  # ERROR for the period it happened in only
    finally:
        executor.shutdown()
        node.teardown()
        node.destroy_node()
