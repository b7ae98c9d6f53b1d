"""Start configured lifecycle nodes in one process without the launch system (not available as a wheel).

A bringup file lists nodes::

    nodes:
      - type: perception            # perception | control
        name: perception            # node name (default: the type)
        namespace: camera           # optional
        remappings:                 # optional: topic or service name -> the name it becomes
          image_raw: /front_camera/image_raw
        image_topics: [...]         # optional, camera nodes: one node per topic (ros/camera_topics.py)
        parameters:                 # the node's parameters (see docs/perception_node.md)
          model: posenet_mobilenet_v1_075_481_641   # a catalogue name (models fetch / import) or a path
          backend: cpu

Remappings are ROS's (``--ros-args -r from:=to`` for that node only): both names resolved in the node's
namespace, as ``ros2 launch`` remappings are. String values may use ``$(dir)`` (the folder of the bringup
file); ``$(fixture REL)`` (a file of the shared test fixtures) is for the tests and benches, not user
configs. ``Bringup`` creates the nodes, drives each to active (configure, then activate; a failed transition
stops the bringup with the node's reason), spins them on a multi-threaded executor
(``spinning.MainMultiThreadedExecutor``) and brings them down in reverse order (deactivate, cleanup,
shutdown), every one of them even when one's data-path call is stuck (waited for once, at most its
``deactivate_timeout``, or less when a second stop signal hurries the stop: ``ros/signal_stop.py``; that
node is then left as it is, and its thread not ending is raised once the others are down: ``run`` then exits
with status 3 after one ERROR line, as a node's own ``main()``, ``ros/stuck_exit.py``). A node's data path,
its ``companion_groups()`` (the control node's state loop, the camera nodes' image subscription), gets a
single-threaded executor thread of its own, as in the node's own ``main``. The ROS environment is the
caller's: nothing is forced here.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.ros.camera_topics import expand_image_topics, is_remap_name, is_ros_name

# type -> (module, class); imported only when a node of that type is configured.
NODE_TYPES: dict[str, tuple[str, str]] = {
    "perception": ("libredgetpu_ros.ros.perception_node", "PerceptionNode"),
    "control": ("libredgetpu_ros.ros.control_node", "ControlNode"),
    "tracker": ("libredgetpu_ros.ros.robotics.tracker_node", "TrackerNode"),
    "looming": ("libredgetpu_ros.ros.robotics.looming_node", "LoomingNode"),
    "flow": ("libredgetpu_ros.ros.flow_node", "FlowNode"),
    "reservoir": ("libredgetpu_ros.ros.reservoir.node", "ReservoirNode"),
    "recognition": ("libredgetpu_ros.ros.recognition.node", "RecognitionNode"),
}
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_SUBST_RE = re.compile(r"\$\((fixture|dir)(?:\s+([^)]*))?\)")


@dataclass(frozen=True)
class NodeSpec:
    type: str
    name: str
    namespace: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    remappings: dict[str, str] = field(default_factory=dict)  # from -> to, as given

    def ros_arguments(self) -> list[str]:
        """The node's own command-line arguments (``cli_args``): its remappings."""
        return ["--ros-args", *(a for src, dst in self.remappings.items() for a in ("-r", f"{src}:={dst}"))] \
            if self.remappings else []


def load_config(path: str | Path) -> list[NodeSpec]:
    """The node list of a bringup YAML file; ConfigError names the file and the offending entry."""
    from libredgetpu_ros.errors import TextDataError
    from libredgetpu_ros.textdata import load_yaml_file

    path = Path(path)
    try:  # size, UTF-8, nesting depth and alias expansion bounded (textdata.py)
        doc = load_yaml_file(path, "bringup file")
    except TextDataError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or not doc["nodes"]:
        raise ConfigError(f"bringup file {path}: expected a top-level 'nodes:' list with at least one node")
    specs: list[NodeSpec] = []
    for i, entry in enumerate(doc["nodes"]):
        where = f"bringup file {path}, nodes[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping, got {entry!r}")
        unknown = set(entry) - {"type", "name", "namespace", "parameters", "remappings", "image_topics"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        kind = entry.get("type")
        if kind not in NODE_TYPES:
            raise ConfigError(f"{where}: type {kind!r} is not one of {', '.join(NODE_TYPES)}")
        name = str(entry.get("name", kind))
        namespace = str(entry.get("namespace", "") or "")
        if not _NAME_RE.match(name):
            raise ConfigError(f"{where}: invalid node name {name!r}")
        if namespace not in ("", "/") and not is_ros_name(namespace, letter_first=True):
            raise ConfigError(f"{where}: invalid namespace {namespace!r}")
        params = entry.get("parameters") or {}
        if not isinstance(params, dict):
            raise ConfigError(f"{where}: 'parameters' must be a mapping, got {params!r}")
        params = {str(k): _substitute(v, path.parent, where) for k, v in params.items()}
        remappings = _remappings(entry.get("remappings"), where)
        if "image_topics" in entry:  # one node per camera topic, all in this process (ros/camera_topics.py)
            for ns, own in expand_image_topics(kind, namespace, params, entry["image_topics"], where):
                specs.append(NodeSpec(kind, name, ns, own, remappings))
            continue
        specs.append(NodeSpec(kind, name, namespace, params, remappings))
    names = [f"{s.namespace.strip('/')}/{s.name}" for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"bringup file {path}: duplicate node names {names}")
    return specs


def _remappings(value: Any, where: str) -> dict[str, str]:
    """A ``remappings:`` mapping (name -> new name), each a name rcl remaps (``camera_topics.is_remap_name``:
    relative, ``/`` or ``~/``)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: 'remappings' must be a mapping of name: new name, got {value!r}")
    out = {}
    for src, dst in value.items():
        for name in (src, dst):
            if not is_remap_name(name):
                raise ConfigError(f"{where}: remapping {src!r}: {dst!r}: {name!r} is not a ROS name rcl "
                                  f"remaps (tokens of letters, digits, single '_', after '', '/' or '~/')")
        out[src] = dst
    return out


def _substitute(value: Any, base: Path, where: str) -> Any:
    if isinstance(value, list):
        return [_substitute(v, base, where) for v in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        kind, arg = match.group(1), (match.group(2) or "").strip()
        if kind == "dir":
            return str(base.resolve())
        from libredgetpu_ros.fixtures import FixtureMissingError, fixture

        try:
            return str(fixture(arg))
        except FixtureMissingError as exc:
            raise ConfigError(f"{where}: {exc}") from exc

    return _SUBST_RE.sub(replace, value)


def node_class(kind: str) -> type:
    module_name, class_name = NODE_TYPES[kind]
    return getattr(importlib.import_module(module_name), class_name)


def parameter_overrides(cls: type, params: dict[str, Any]) -> list[Any]:
    """Typed overrides through the node module's ``ParamTable`` (and ``params.NODE_WIDE_TABLES``, every
    node's: ``deactivate_timeout``, ``use_sim_time``) when it has one (ints accepted for doubles, lists for
    string arrays, unknown names rejected), else typed by the YAML values."""
    from rclpy.parameter import Parameter

    from libredgetpu_ros.ros.params import ParamTable, node_overrides

    params = dict(params)
    qos = _qos_overrides(params.pop("qos_overrides", None))
    module = importlib.import_module(cls.__module__)
    tables = [v for v in vars(module).values() if isinstance(v, ParamTable)]
    if len(tables) == 1:
        # with every node's (deactivate_timeout, use_sim_time); an unknown name's error lists qos_overrides
        return node_overrides(tables[0], params, also=["qos_overrides"]) + qos
    return [Parameter(k, value=v) for k, v in params.items()] + qos


def _qos_overrides(value: Any) -> list[Any]:
    """A ``qos_overrides:`` mapping as in a params file (``/topic: {publisher: {depth: 1, ...}}``, see
    ros/output_qos.py) as the flat ``qos_overrides./topic.publisher.depth`` parameters a node reads."""
    from rclpy.parameter import Parameter

    from libredgetpu_ros.ros.output_qos import OVERRIDABLE

    if value is None:
        return []
    policies = {p.name.lower() for p in OVERRIDABLE}
    where = "qos_overrides: expected {/topic: {publisher: {policy: value}}}"
    if not isinstance(value, dict):
        raise ConfigError(f"{where}, got {value!r}")
    out = []
    for topic, entities in value.items():
        if not isinstance(entities, dict) or set(entities) != {"publisher"} or \
                not isinstance(entities["publisher"], dict):
            raise ConfigError(f"{where}; {topic!r} holds {entities!r}")
        for policy, setting in entities["publisher"].items():
            if policy not in policies or isinstance(setting, bool) or not isinstance(setting, (str, int)):
                raise ConfigError(f"qos_overrides of {topic}: {policy}: {setting!r} (policies: "
                                  f"{', '.join(sorted(policies))})")
            out.append(Parameter(f"qos_overrides.{topic}.publisher.{policy}", value=setting))
    return out


class Bringup:
    """Nodes of one bringup file on one executor; use ``start()``, ``spin_until(event)``, ``stop()``."""

    def __init__(self, specs: list[NodeSpec], context: Any = None,
                 log: Callable[[str], None] = print) -> None:
        self.specs = specs
        self.context = context
        self.log = log
        self.nodes: list[Any] = []
        self.executor: Any = None
        # id(node) -> the executor threads spinning that node's companion groups (``ros/spinning.py``)
        self._companions: dict[int, Any] = {}

    def start(self) -> None:
        """Create every node and drive it to active; ConfigError (and everything torn down) on a failure."""
        from rclpy.lifecycle import TransitionCallbackReturn

        from libredgetpu_ros.edgetpu.locks import set_holder_name
        from libredgetpu_ros.ros.spinning import MainMultiThreadedExecutor

        # what another process's open of a device these nodes share names as its holder (edgetpu/locks.py)
        set_holder_name("bringup: " + ", ".join(f"{s.namespace.rstrip('/')}/{s.name}" for s in self.specs))
        self.executor = MainMultiThreadedExecutor(context=self.context)
        try:
            for spec in self.specs:
                cls = node_class(spec.type)
                node = cls(spec.name, namespace=spec.namespace, context=self.context,
                           parameter_overrides=parameter_overrides(cls, spec.parameters),
                           cli_args=spec.ros_arguments())
                self.nodes.append(node)
                self.executor.add_node(node)
                self._spin_companions(node)
            for spec, node in zip(self.specs, self.nodes, strict=True):
                for step in ("configure", "activate"):
                    ret = getattr(node, f"trigger_{step}")()
                    if ret != TransitionCallbackReturn.SUCCESS:
                        raise ConfigError(f"node {node.get_fully_qualified_name()} ({spec.type}) failed to "
                                          f"{step} (see its log above)")
                self.log(f"{node.get_fully_qualified_name()}: active")
        except BaseException:
            self.stop()
            raise

    def _spin_companions(self, node: Any) -> None:
        from libredgetpu_ros.ros.spinning import CompanionSpinners

        self._companions[id(node)] = CompanionSpinners(node, self.context)

    def _stop_companions(self, node: Any) -> None:
        """The node's data-path executors shut down and their threads joined, after the node's one wait for
        the call in flight (``ManagedNode.settle_data_path``: not again for a call a deactivate gave up on);
        ``spinning.CompanionThreadsStuck`` if a call still runs on them."""
        spinners = self._companions.pop(id(node), None)
        if spinners is not None:
            spinners.stop(getattr(node, "settle_data_path", None))

    def spin_until(self, stop: threading.Event, period_s: float = 0.1) -> None:
        while not stop.is_set() and (self.context is None or self.context.ok()):
            self.executor.spin_once(timeout_sec=period_s)

    def stop(self) -> None:
        """Deactivate, clean up and shut down every node (reverse order), then destroy them. A node whose
        data-path call does not return within its ``deactivate_timeout`` (waited for once: ``_bring_down``)
        does not keep the others up: every other node is brought down, then the first such error is raised
        (``spinning.CompanionThreadsStuck``, naming the node's thread and the call, before any other
        error); every error not raised is logged first, with its traceback (``run()`` exits on a stuck node
        without a traceback: another node's error would be lost)."""
        errors: list[tuple[str, Exception]] = []
        for node in reversed(self.nodes):
            name = "a node"
            try:  # a name that cannot be read must not leave the other nodes up
                name = node.get_fully_qualified_name()  # before the node is destroyed
                self._bring_down(node)
            except Exception as exc:
                errors.append((name, exc))
        self.nodes = []
        if self.executor is not None:
            self.executor.shutdown()
            self.executor = None
        if errors:  # a stuck node first: it decides how the process exits (run(): os._exit, no traceback)
            from libredgetpu_ros.errors import traceback_text
            from libredgetpu_ros.ros.spinning import CompanionThreadsStuck

            raised = next((e for _, e in errors if isinstance(e, CompanionThreadsStuck)), errors[0][1])
            for name, exc in errors:  # every other node's error logged here: nothing else would
                if exc is not raised:
                    self.log(f"{name}: bring-down failed (stop went on with the other nodes):\n"
                             f"{traceback_text(exc)}")
            raise raised

    def _bring_down(self, node: Any) -> None:
        """One node deactivated (its data path still spinning: the result of the call in flight goes out),
        its data-path executor threads stopped, then cleanup and shutdown, and the node destroyed. The call in
        flight is waited for once, at most ``deactivate_timeout``: by deactivate, or (a node not active) by
        the threads' stop; a call deactivate gave up on is not waited for again (before: the shutdown's
        teardown waited ``deactivate_timeout`` again, then the thread's join 5 s). While it still runs the
        node is left as it is, as a node's own ``main()`` leaves it (``ros/stuck_exit.py``): no shutdown
        transition (it would close the engine under the call), not destroyed (its DDS entities not torn
        down under a thread still inside rclpy): ``CompanionThreadsStuck`` says so. A deactivate that raised
        (not a FAILURE result) with the threads stopped cleanly: the node torn down (``teardown``: its
        processor closed, not under a call still running) before it is destroyed, not left open until exit."""
        failed: Exception | None = None
        try:
            if _state(node) == "active":
                node.trigger_deactivate()  # past deactivate_timeout: fails, the node stays active
        except Exception as exc:  # the threads are stopped and the node destroyed all the same
            failed = exc
        self._stop_companions(node)
        try:
            if failed is None:
                if _state(node) == "inactive":
                    node.trigger_cleanup()
                if _state(node) in ("unconfigured", "inactive", "active"):
                    node.trigger_shutdown()
        finally:
            if failed is not None and hasattr(node, "teardown"):
                try:
                    node.teardown()  # idempotent; it leaves open what a call still running runs on
                except Exception as exc:  # destroyed all the same; the deactivate's error is the one raised
                    self.log(f"{node.get_fully_qualified_name()}: teardown after a failed deactivate: {exc}")
            if self.executor is not None:
                self.executor.remove_node(node)
            node.destroy_node()
        if failed is not None:
            raise failed


def _state(node: Any) -> str:
    return node._state_machine.current_state[1]


def run(config: str | Path, duration_s: float | None = None, quiet: bool = False) -> int:
    """``libredgetpu-ros bringup``: bring the file's nodes up, spin until Ctrl-C / SIGTERM (or
    ``duration_s``), bring them down; 0. Uses the caller's ROS environment. ``quiet``: progress lines on
    stderr (stdout is left to a JSON summary). A node whose data-path call still runs once the stop's one
    wait for it is over (``Bringup.stop``: its ``deactivate_timeout``, or less when a second stop signal
    hurried the stop, ``ros/signal_stop.py``): the other nodes are down by then; one ERROR line on that
    node's logger, then the process exits with status 3 without rclpy's shutdown (``ros/stuck_exit.py``, as
    a node's own ``main()`` does), no traceback."""
    import sys

    from libredgetpu_ros.ros.signal_stop import rclpy_until_signal
    from libredgetpu_ros.ros.spinning import CompanionThreadsStuck
    from libredgetpu_ros.ros.stuck_exit import exit_data_path_stuck

    specs = load_config(config)
    out = sys.stderr if quiet else sys.stdout

    def log(text: str) -> None:
        print(text, file=out, flush=True)

    # Our own signal handling: rclpy's would shut the context down before the nodes can be deactivated.
    with rclpy_until_signal() as stop:
        timer = threading.Timer(duration_s, stop.set) if duration_s else None
        bringup = Bringup(specs, log=log)
        try:
            try:
                bringup.start()
                if timer:
                    timer.start()
                bringup.spin_until(stop)
                log("stopping ...")
            finally:
                if timer:
                    timer.cancel()
                bringup.stop()
        except CompanionThreadsStuck as exc:  # no rclpy shutdown under the thread still in that call
            exit_data_path_stuck(exc.node, exc, stop.signum)
    return 0
