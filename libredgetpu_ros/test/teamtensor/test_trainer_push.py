"""Issue 30, failure 9: trained weights silently not applied.

The trainer's ``set_weights`` request ids were ``<node name>:<batches sent>``; the batch count restarts with
every session, so after a reconfigure the control node answered the first pushes from its replay record
(``replayed``, nothing applied) while the trainer counted them accepted, and within one run a second push of
the same read counted again. Here, across processes over DDS (tt-worker, control node, trainer node, this
test): one batch at a time, the control node's weights change at every push of a first session, then of a
second session after a reconfigure, from its first push on; the trainer's ``pushes_accepted`` equals the
swaps the control node applied and nothing was replayed.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from .._helpers import load_helper
from .._helpers import spin_until as spin_executor_until

pytestmark = [pytest.mark.timeout(120)]

TESTS = Path(__file__).resolve().parents[1]
harness = load_helper(TESTS / "ros" / "_control_harness.py")
loop = load_helper(Path(__file__).resolve().parent / "_trainer_loop.py")


@pytest.mark.ros
def test_a_reconfigured_trainers_first_push_changes_the_control_nodes_weights(ros_env):
    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import Float32MultiArray

    ctl = loop.start_loop(ros_env, input_size=3)
    try:
        node = ctl.node
        trainer_values: dict[str, str] = {}

        def on_diagnostics(msg) -> None:
            for status in msg.status:
                if status.name.startswith(f"{loop.TRAINER}:"):
                    trainer_values.update({kv.key: kv.value for kv in status.values})

        node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 10)
        samples_pub = node.create_publisher(Float32MultiArray, "/tt/samples", 100)

        def counter(name: str) -> int:
            return int(trainer_values.get(name, 0))

        def answered() -> int:
            return counter("pushes_accepted") + counter("pushes_replayed") + counter("pushes_refused")

        assert ctl.transition(loop.T_CONFIGURE) and ctl.transition(loop.T_ACTIVATE)
        loop.trainer_transitions(ctl)
        rng = np.random.default_rng(9)
        sample = Float32MultiArray()

        def one_batch(w: np.ndarray, b: np.ndarray) -> None:
            for _ in range(16):  # the trainer's batch_size
                x = rng.uniform(-1.0, 1.0, 3).astype(np.float32)
                sample.data = np.concatenate([x, w @ x + b]).tolist()
                samples_pub.publish(sample)

        w1, b1 = np.full((2, 3), 0.05, np.float32), np.array([0.1, -0.1], np.float32)
        w2, b2 = -w1, -b1
        for _ in range(3):  # first session: pushes of batch counts 1, 2, 3 (ids that used to repeat)
            version = ctl.get_weights().version
            one_batch(w1, b1)
            ctl.wait_for(lambda v=version: ctl.get_weights().version > v, 20.0, "a push applied")
        ctl.wait_for(lambda: answered() >= 3, 10.0, "the trainer's diagnostics counting 3 pushes")

        loop.trainer_transitions(ctl, (loop.T_DEACTIVATE, loop.T_CLEANUP, loop.T_CONFIGURE, loop.T_ACTIVATE))
        before = ctl.get_weights()
        trainer_values.clear()  # the counters start again at configure: this session's 16 samples, not 48

        def this_session() -> bool:
            return 0 < counter("samples") <= 16

        one_batch(w2, b2)
        ctl.wait_for(lambda: this_session() and answered() >= 1, 20.0,
                     "the new session's first push answered")
        after = ctl.get_weights()
        assert after.version > before.version, "the new session's first push was not applied"
        weights = [np.frombuffer(r.data, np.float32) for r in (before, after)]
        assert not np.array_equal(*weights)
        assert after.last_request_id.startswith(f"{loop.TRAINER}:")
        assert after.last_request_id != before.last_request_id
        time.sleep(1.2)  # two more push periods without a batch: the same weights are not pushed again
        swaps = ctl.get_weights().version - before.version
        ctl.wait_for(lambda: this_session() and answered() >= swaps, 5.0, "diagnostics up to date")
        assert counter("pushes_accepted") == swaps, trainer_values
        assert counter("pushes_replayed") == 0 and counter("pushes_refused") == 0, trainer_values
    finally:
        ctl.close()


def _pusher(node, service: str, timeout_s: float | None = None):
    """A ``WeightPusher`` from ``node`` to ``service`` for a 2×3 controller (``timeout_s`` if given), its
    counters, and the weights and bias to push: (pusher, counters, weights, bias)."""
    from libredgetpu_ros.ros.trainer.push import WeightPusher

    counters = {"pushes_accepted": 0, "pushes_replayed": 0, "pushes_refused": 0, "pushes_skipped": 0,
                "pushes_lost": 0}
    pusher = WeightPusher(node, service, "", (2, 3), counters)
    if timeout_s is not None:
        pusher.timeout_s = timeout_s
    return pusher, counters, np.ones((2, 3), np.float32), np.zeros(2, np.float32)


def _crashed_control(context):
    """A control node's two services as a crash leaves them: ``/ctl/get_weights`` (2×3) on a node that is
    spun, ``/ctl/set_weights`` on one that is never spun (it takes a request and never answers; the ids it
    took are listed in ``received``). Returns (shape server, crashed node, received, the handler: a respawned
    node serves it too)."""
    from rclpy.node import Node

    from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

    shape_server = Node("control_shape", namespace="/ctl", context=context)
    shape_server.create_service(GetWeights, "get_weights",
                                lambda req, resp: (setattr(resp, "success", True), setattr(resp, "rows", 2),
                                                   setattr(resp, "cols", 3), resp)[-1])
    received: list[str] = []

    def answer(req, resp):
        received.append(req.request_id)
        resp.accepted = True
        return resp

    crashed = Node("control", namespace="/ctl", context=context)
    crashed.create_service(SetWeights, "set_weights", answer)
    return shape_server, crashed, received, answer


@pytest.mark.ros
def test_a_push_never_answered_is_abandoned_and_pushing_goes_on(ros_env):
    """In process: the control node took a push and never answered (it crashed and was respawned: the new
    one knows nothing of the request). After ``timeout_s`` the call is abandoned, counted ``pushes_lost``
    and the next push goes to the respawned node, which applies it. Before, the push stayed "in flight"
    forever: nothing was pushed again and nothing counted it (diagnostics OK, "training")."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from libredgetpu_ros_interfaces.srv import SetWeights

    context = ros_env.init_rclpy()
    trainer = Node("pusher", context=context)
    shape_server, crashed, received, answer = _crashed_control(context)
    executor = SingleThreadedExecutor(context=context)
    for node in (trainer, shape_server):
        executor.add_node(node)
    pusher, counters, weights, bias = _pusher(trainer, "/ctl/set_weights", timeout_s=0.5)

    def push_until_sent(request_id: str, within: float) -> None:
        deadline = time.monotonic() + within
        while not pusher.push(weights, bias, request_id):
            executor.spin_once(timeout_sec=0.05)
            assert time.monotonic() < deadline, (request_id, counters)

    respawned = None
    try:
        push_until_sent("t:1", 10.0)  # the shape probe, then the push the crashed node never answers
        crashed.destroy_node()
        respawned = Node("control", namespace="/ctl", context=context)
        respawned.create_service(SetWeights, "set_weights", answer)
        executor.add_node(respawned)
        push_until_sent("t:2", 10.0)
        assert counters["pushes_lost"] == 1, counters
        deadline = time.monotonic() + 10.0
        while counters["pushes_accepted"] < 1:
            executor.spin_once(timeout_sec=0.05)
            assert time.monotonic() < deadline, counters
        assert received == ["t:2"]
    finally:
        executor.shutdown()
        pusher.destroy()
        for node in (trainer, shape_server, respawned):
            if node is not None:
                node.destroy_node()


@pytest.mark.ros
def test_a_lost_push_is_sent_again_without_a_new_batch(ros_env):
    """The trainer node (in process, a real tt-worker) pushes after its one batch; the control node never
    answers (crashed, respawned). The abandoned push goes again, same request id, to the respawned node,
    although no batch came since: the control node gets the trained weights. Before, the lost push counted
    as pushed (``_pushed_version``): nothing went until a next batch, which may never come."""
    from rclpy.node import Node
    from std_msgs.msg import Float32MultiArray

    from libredgetpu_ros_interfaces.srv import SetWeights

    with loop.in_process_trainer(ros_env, "samples_probe", batch_size=4, push_period=0.2, metrics_period=0.2,
                                 set_weights_service="/ctl/set_weights") as rig:
        trainer, executor = rig.trainer, rig.executor
        shape_server, crashed, received, answer = _crashed_control(rig.context)
        rig.add(shape_server)
        samples = rig.probe.create_publisher(Float32MultiArray, "/tt/samples", 100)

        def spin_until(what: str, done) -> None:
            spin_executor_until(executor, what, done, detail=lambda: trainer.counters)

        trainer.trigger_configure()
        trainer.trigger_activate()
        trainer._pusher.timeout_s = 0.5
        spin_until("the trainer's subscription", lambda: samples.get_subscription_count() > 0)
        for _ in range(4):  # one batch, and no more
            samples.publish(Float32MultiArray(data=[0.1, 0.2, 0.3, 0.4, 0.5]))
        spin_until("a push lost", lambda: trainer.counters["pushes_lost"] >= 1)
        crashed.destroy_node()
        respawned = rig.add(Node("control", namespace="/ctl", context=rig.context))
        respawned.create_service(SetWeights, "set_weights", answer)
        spin_until("the lost push applied", lambda: trainer.counters["pushes_accepted"] >= 1)
        assert len(set(received)) == 1 and received[0].endswith(":1"), received  # batch 1's weights


@pytest.mark.ros
def test_an_answer_at_the_timeout_is_not_abandoned_and_its_callback_leaves_the_next_call_alone(ros_env):
    """In process: the control node answers a push, and the timeout passes while the answer's done callback
    is still queued on the executor (answered, not yet handled). The answered call is not abandoned (no
    second push goes out, nothing counted lost); its callback then counts it. A done callback of a call that
    is not the one in flight changes nothing. Before, the answered call was dropped, the next push went out,
    and the old callback cleared the new call's record: it could never be abandoned, two calls in flight."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from libredgetpu_ros_interfaces.srv import SetWeights

    context = ros_env.init_rclpy()
    trainer = Node("pusher", context=context)
    shape_server, crashed, received, answer = _crashed_control(context)
    crashed.destroy_node()
    control = Node("control", namespace="/ctl", context=context)
    control.create_service(SetWeights, "set_weights", answer)
    executor = SingleThreadedExecutor(context=context)
    for node in (trainer, shape_server, control):
        executor.add_node(node)
    pusher, counters, weights, bias = _pusher(trainer, "/ctl/set_weights")

    def spin_until(what: str, done) -> None:
        spin_executor_until(executor, what, done, detail=lambda: (counters, received))

    try:
        deadline = time.monotonic() + 10.0
        while not pusher.push(weights, bias, "t:1"):  # the shape probe, then the push
            executor.spin_once(timeout_sec=0.05)
            assert time.monotonic() < deadline, counters
        first = pusher._in_flight[1]
        deadline = time.monotonic() + 10.0
        while not first.done():  # one handler per spin_once: the done callback is queued, not yet run
            executor.spin_once(timeout_sec=0.05)
            assert time.monotonic() < deadline, (counters, received)
        assert counters["pushes_accepted"] == 0, "the done callback ran in the same spin: no race to test"
        pusher.timeout_s = 0.0  # the timeout passes now, the answer still unhandled
        assert not pusher.push(weights, bias, "t:2"), "an answered call was abandoned: a second push went out"
        assert counters["pushes_lost"] == 0 and pusher.unanswered() is False, counters
        spin_until("the answered push counted", lambda: counters["pushes_accepted"] == 1)
        pusher.timeout_s = 10.0
        assert pusher.push(weights, bias, "t:2")
        second = pusher._in_flight[1]
        pusher._on_pushed(first)  # a stray callback of an earlier call: the call in flight stays tracked
        assert pusher._in_flight is not None and pusher._in_flight[1] is second
        assert counters["pushes_accepted"] == 1, counters
        spin_until("the second push counted", lambda: counters["pushes_accepted"] == 2)
        assert received == ["t:1", "t:2"] and counters["pushes_lost"] == 0, (received, counters)
    finally:
        executor.shutdown()
        pusher.destroy()
        for node in (trainer, shape_server, control):
            node.destroy_node()


@pytest.mark.ros
def test_the_push_reply_survives_a_burst_of_other_clients_replies(ros_env):
    """In process, real DDS: the trainer's push is answered, then 30 other calls to the same service are
    answered before the trainer's executor takes its reply. rmw_fastrtps hands every reply of a service to
    every client's reply reader (docs/control_node.md "Lost replies and request_id"): with the default
    service QoS (history depth 10) the push's reply was pushed out by the others, the push waited for its
    answer timeout and was counted lost; the pusher's client now has ``control/client.py``'s REPLY_QOS."""
    import threading

    from libredgetpu_ros.ros.control.client import REPLY_QOS
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from libredgetpu_ros_interfaces.srv import SetWeights

    context = ros_env.init_rclpy()
    trainer = Node("burst_pusher", context=context)
    server = Node("control", namespace="/burst", context=context)
    other = Node("other_planner", context=context)
    answered: list[str] = []

    def answer(request: SetWeights.Request, response: SetWeights.Response) -> SetWeights.Response:
        answered.append(request.request_id)
        response.accepted = True
        return response

    server.create_service(SetWeights, "weights_in", answer)  # no get_weights twin: no shape probe
    other_client = other.create_client(SetWeights, "/burst/weights_in")
    serving = SingleThreadedExecutor(context=context)
    serving.add_node(server)
    serving.add_node(other)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            serving.spin_once(timeout_sec=0.05)

    spinner = threading.Thread(target=serve, daemon=True)
    spinner.start()
    pushing = SingleThreadedExecutor(context=context)
    pushing.add_node(trainer)
    pusher, counters, weights, bias = _pusher(trainer, "/burst/weights_in", timeout_s=3.0)
    try:
        assert pusher._set.qos_profile == REPLY_QOS
        assert pusher._set.wait_for_service(timeout_sec=10.0)
        assert other_client.wait_for_service(timeout_sec=10.0)
        assert pusher.push(weights, bias, "t:1")
        deadline = time.monotonic() + 10.0
        while answered != ["t:1"]:  # answered, the reply waiting in the trainer's reader (nobody spins it)
            time.sleep(0.02)
            assert time.monotonic() < deadline, answered
        for i in range(30):
            done = threading.Event()
            other_client.call_async(SetWeights.Request(request_id=f"o:{i}")).add_done_callback(
                lambda _f, done=done: done.set())
            assert done.wait(10.0), f"the other client's call {i} was not answered"
        deadline = time.monotonic() + pusher.timeout_s + 2.0
        while counters["pushes_accepted"] == 0 and time.monotonic() < deadline:
            pushing.spin_once(timeout_sec=0.05)
            pusher.unanswered()  # what the node's push timer does: abandons a call past its timeout
        assert counters["pushes_accepted"] == 1 and counters["pushes_lost"] == 0, counters
    finally:
        stop.set()
        spinner.join(timeout=5.0)
        pushing.shutdown()
        serving.shutdown()
        pusher.destroy()
        for node in (trainer, server, other):
            node.destroy_node()
