"""The reservoir node tests' states and rigs (test_reservoir_node.py): the joint series, a bag of it, and a
node spun in process with a fitted readout whose bag reads can be held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

WAIT_S = 30.0
JOINTS = ["shoulder", "elbow"]


def series(n: int) -> np.ndarray:
    """``n`` states of two joints: two sines of incommensurate periods."""
    t = np.arange(n) * 0.25
    return np.stack([np.sin(t), 0.6 * np.cos(0.73 * t + 0.3)], axis=1)


def joint_bag(path: Path, states: np.ndarray, start_ns: int = 1_000_000_000) -> Path:
    """A bag of ``states`` as JointState messages on /joints (joint names in JOINTS order), 10 ms apart from
    ``start_ns``."""
    from libredgetpu_ros.bags.storage import new_bag, reliable_qos
    from libredgetpu_ros.bags.typestore import typestore

    store = typestore()
    names = ("sensor_msgs/msg/JointState", "std_msgs/msg/Header", "builtin_interfaces/msg/Time")
    joint_t, header_t, time_t = (store.types[n] for n in names)
    with new_bag(path, "mcap") as writer:
        conn = writer.add_connection("/joints", "sensor_msgs/msg/JointState", typestore=store,
                                     offered_qos_profiles=[reliable_qos(1000)])
        for i, x in enumerate(states):
            stamp = start_ns + i * 10_000_000
            header = header_t(stamp=time_t(sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id="arm")
            msg = joint_t(header=header, name=list(JOINTS), position=np.array(x), velocity=np.zeros(0),
                          effort=np.zeros(0))
            writer.write(conn, stamp, bytes(store.serialize_cdr(msg, "sensor_msgs/msg/JointState")))
    return path


class SpunFitRig:
    """In process: a reservoir node (JOINTS, washout 10) with a readout fitted on 400 buffered states, spun
    with a client node on an executor thread; a bag of 3,000 states whose read goes through ``hold`` (the
    reader's ``state_vector`` seam: each message calls it first)."""

    def __init__(self, ros_env: Any, tmp: Path, monkeypatch: Any, name: str, hold: Any,
                 **params: Any) -> None:
        import threading

        import libredgetpu_ros.ros.reservoir.states as states_module
        from libredgetpu_ros.ros.reservoir.node import ReservoirNode
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.parameter import Parameter
        from sensor_msgs.msg import JointState

        from libredgetpu_ros_interfaces.srv import FitReadout

        self.bag = joint_bag(tmp / "slow_bag", series(3000))
        self.read: list[int] = []
        real_state_vector = states_module.state_vector

        def held_state_vector(*args: Any) -> np.ndarray:
            self.read.append(1)
            hold()
            return real_state_vector(*args)

        monkeypatch.setattr(states_module, "state_vector", held_state_vector)
        context = ros_env.init_rclpy()
        overrides = {"backend": "cpu", "template": 256, "state_size": 2, "joint_names": JOINTS, "washout": 10,
                     **params}
        self.node = ReservoirNode(name, context=context, parameter_overrides=[
            Parameter(k, value=v) for k, v in overrides.items()])
        self.client_node = Node(f"{name}_client", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.executor.add_node(self.client_node)
        self.stop = threading.Event()
        self.spinner = threading.Thread(target=self._spin, daemon=True)
        self.node.trigger_configure()
        self.rc = self.node._rc
        for x in series(400):
            self.node._on_state(JointState(name=list(JOINTS), position=[float(v) for v in x]))
        self.node._fit(FitReadout.Request(samples=0), "", self.node.cfg, self.rc)
        self.before = self.rc.readout
        assert self.before is not None
        self.spinner.start()
        self.client = self.client_node.create_client(FitReadout, f"/{name}/fit")
        assert self.client.wait_for_service(timeout_sec=WAIT_S)

    def _spin(self) -> None:
        while not self.stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def fit_from_bag(self) -> Any:
        """The bag fit requested, once it is reading the bag (its answer's future)."""
        import time

        from libredgetpu_ros_interfaces.srv import FitReadout

        answer = self.client.call_async(FitReadout.Request(bag=str(self.bag), topic="/joints"))
        deadline = time.monotonic() + WAIT_S
        while not self.read and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.read and not answer.done(), "the fit did not start reading the bag"
        return answer

    def cleanup_within(self, seconds: float) -> bool:
        """trigger_cleanup on a thread of its own: whether it returned within ``seconds``."""
        import threading

        cleaned = threading.Event()
        threading.Thread(target=lambda: (self.node.trigger_cleanup(), cleaned.set()), daemon=True).start()
        return cleaned.wait(seconds)

    def close(self) -> None:
        self.stop.set()
        self.spinner.join(timeout=WAIT_S)
        self.node.teardown()
        self.executor.shutdown()
        self.client_node.destroy_node()
        self.node.destroy_node()


def wait_done(future: Any) -> bool:
    import time

    deadline = time.monotonic() + WAIT_S
    while not future.done() and time.monotonic() < deadline:
        time.sleep(0.02)
    return future.done()
