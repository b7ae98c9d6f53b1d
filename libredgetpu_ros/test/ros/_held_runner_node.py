"""A real node whose MatMul runner can hold one call in flight, for the teardown-race tests (run as a script).

``python _held_runner_node.py DIR MODULE --ros-args ...`` runs ``MODULE``'s ``main()`` (the control or the
reservoir node, unmodified; or ``libredgetpu_ros.cli.main bringup FILE``) with the MatMul engine's ``cpu``
runner replaced by :class:`HeldRunner`: the integer twin's arithmetic, but an instrumented test double of OUR
runner interface (not a device), which

- holds the first ``run`` that starts after the file ``DIR/arm`` exists, until ``DIR/release`` exists (or
  ``close()`` is called: then the call goes on, as it would on a real runner whose owner closed it);
- frees its state on ``close()`` as a native interpreter does: a ``run`` that goes on after ``close()``
  raises ``RuntimeError`` instead of reading freed memory;
- stages a new parameter set only once no ``run`` is in flight, as the Edge TPU runner does (one device: its
  lock serialises the upload with the inference, ``matmul/device_runner.py``): a weight swap waits for a held
  call;
- appends what happens to ``DIR/events``, one line each: ``held``, ``run-end``, ``close in_flight=<n>``,
  ``use-after-close``.

Not a ``TwinRunner``, so the engine goes through ``run()`` / ``close()`` as for an accelerator's runner.

``MODULE`` given as ``backend:MODULE`` (a camera node: the tracker) holds the camera backend's call instead:
the ``CpuBackend`` every CPU-twin backend is (``backends/cpu.py``) becomes :func:`held_cpu_backend`'s
subclass, which holds and stages as above (``held``, ``run-end`` for each run) and leaves the MatMul runner
alone.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HOLD_LIMIT_S = 60.0  # a held call never outlives a test


class HeldRunner:
    name = "cpu"
    choice = ""
    fallback = ""

    def __init__(self, inner: Any, folder: Path) -> None:
        self._inner: Any = inner
        self._folder = folder
        self._lock = threading.Lock()
        self._in_flight = 0
        self._held_once = False
        self._closed = threading.Event()
        self._device = threading.Lock()  # a run and a stage never at once (the device runner's lock)

    def _event(self, text: str) -> None:
        _event(self._folder, text)

    def stage(self, parameters: Any) -> None:
        with self._device:
            if self._inner is None:
                raise RuntimeError("stage on a closed runner")
            self._inner.stage(parameters)

    def run(self, xq: np.ndarray, parameters: Any) -> np.ndarray:
        with self._lock:
            self._in_flight += 1
            hold = not self._held_once and (self._folder / "arm").exists()
            self._held_once |= hold
        try:
            with self._device:
                if hold:
                    _hold_until_released(self._folder, self._closed)
                inner = self._inner
                if inner is None:  # a native runner would read freed memory here
                    self._event("use-after-close")
                    raise RuntimeError("run on a closed runner (use after close)")
                return inner.run(xq, parameters)
        finally:
            with self._lock:
                self._in_flight -= 1
            self._event("run-end")

    def close(self) -> None:
        with self._lock:
            in_flight = self._in_flight
            self._inner = None
        self._event(f"close in_flight={in_flight}")
        self._closed.set()


def _event(folder: Path, text: str) -> None:
    with (folder / "events").open("a") as f:
        f.write(text + "\n")


def _hold_until_released(folder: Path, closed: threading.Event) -> None:
    """``held``, then wait until ``folder/release`` exists or ``closed`` is set (HOLD_LIMIT_S at most)."""
    _event(folder, "held")
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not (folder / "release").exists() and not closed.is_set():
        if time.monotonic() > deadline:
            raise RuntimeError("held run never released")
        time.sleep(0.005)


def held_cpu_backend(base: type, folder: Path) -> type:
    """A subclass of ``base`` (``CpuBackend``) whose first ``run`` after ``folder/arm`` exists is held until
    released, and whose ``stage`` waits for a run in flight (as an Edge TPU's upload waits for the device)."""

    class HeldCpuBackend(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._held_device = threading.RLock()  # its run stages the set it runs (reentrant)
            self._held_once = False
            self._held_closed = threading.Event()

        def run(self, inputs: Any, parameters: Any = None) -> Any:
            hold = not self._held_once and (folder / "arm").exists()
            self._held_once |= hold
            try:
                with self._held_device:
                    if hold:
                        _hold_until_released(folder, self._held_closed)
                    return super().run(inputs, parameters)
            finally:
                _event(folder, "run-end")

        def stage(self, parameters: Any) -> None:
            with self._held_device:
                super().stage(parameters)

        def close(self) -> None:
            self._held_closed.set()
            super().close()

    return HeldCpuBackend


def spawn(ros_env: Any, folder: Path, module: str, name: str, params: dict[str, Any], *,
          remaps: dict[str, str] | None = None, expect_exit: bool = False) -> Any:
    """Start this script as the node ``name`` of ``module`` (see the module docstring), the CPU backend,
    template 256 and 0.5 s diagnostics unless ``params`` say otherwise; the process (``ros_env.spawn``)."""
    args = [sys.executable, str(Path(__file__).resolve()), str(folder), module, "--ros-args", "-r",
            f"__node:={name}"]
    for source, target in (remaps or {}).items():
        args += ["-r", f"{source}:={target}"]
    for key, value in {"backend": "cpu", "template": 256, "diagnostics_period": 0.5, **params}.items():
        args += ["-p", f"{key}:={value}"]
    return ros_env.spawn(args, name, expect_exit=expect_exit)


def control_wires(probe: Any, name: str, state_topic: str) -> tuple[list[Any], Any]:
    """The test's ends of a control node ``/<name>``: the commands it stamps (a list filled as ``probe``
    spins) and a publisher of states on ``state_topic``."""
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float32MultiArray

    from libredgetpu_ros_interfaces.msg import CommandStamped

    commands: list[Any] = []
    probe.node.create_subscription(CommandStamped, f"/{name}/command_stamped", commands.append,
                                   QoSProfile(depth=100))
    return commands, probe.node.create_publisher(Float32MultiArray, state_topic, QoSProfile(depth=10))


def events(folder: Path) -> list[str]:
    """The lines :class:`HeldRunner` wrote to ``folder/events`` so far."""
    path = folder / "events"
    return path.read_text().splitlines() if path.exists() else []


def hold_next_call(waiter: Any, folder: Path, publish: Any) -> None:
    """Arm the runner, ``publish()`` one input (reliable, matched: a second one would queue behind the held
    call) and wait until its engine call is held; ``waiter`` is a test probe (``wait_for``)."""
    (folder / "arm").touch()
    publish()
    waiter.wait_for("the engine call to be held", lambda: "held" in events(folder))


def first_call(waiter: Any, folder: Path, publish: Any) -> None:
    """``publish()`` until a first engine call ran (the subscription matched), then let the late duplicates
    of those inputs be answered."""
    waiter.wait_for("a first engine call", lambda: "run-end" in events(folder), every=publish)
    waiter.spin_for(0.5)  # an input published twice while the subscription matched answers late


def first_call_then_hold(waiter: Any, folder: Path, publish: Any) -> None:
    """:func:`first_call`, then :func:`hold_next_call`."""
    first_call(waiter, folder, publish)
    hold_next_call(waiter, folder, publish)


def main() -> int:
    folder, module = Path(sys.argv[1]), sys.argv[2]
    if module.startswith("backend:"):
        from libredgetpu_ros.backends import cpu

        module = module.removeprefix("backend:")
        cpu.CpuBackend = held_cpu_backend(cpu.CpuBackend, folder)  # type: ignore[misc]
    else:
        from libredgetpu_ros.matmul.runners import register_runner
        from libredgetpu_ros.matmul.twin import TwinRunner

        register_runner("cpu", lambda template, device: HeldRunner(TwinRunner(template.quant), folder))
    if module == "libredgetpu_ros.cli.main":  # the CLI (bringup): its main() takes the arguments alone
        return importlib.import_module(module).main(sys.argv[3:])
    return importlib.import_module(module).main([sys.argv[0], *sys.argv[3:]])


if __name__ == "__main__":
    sys.exit(main())
