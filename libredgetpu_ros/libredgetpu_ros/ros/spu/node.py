"""SPU lifecycle node: a Femtosense SPU program (IOSpec + runner) on ROS topics.

- Every streaming input of the IOSpec is a topic ``~/in/<name>`` (``sensor_msgs/JointState``: header +
  ``position``, see ``io.py``); values are checked (exactly ``length``, finite), quantized with the input's
  scale / zero point and padded to ``padded_length``.
- Every output is published on ``~/out/<name>`` (dequantized, ``length`` values) with the header of the input
  that completed its sequence.
- Latched inputs (sequences without outputs) come from the parameter ``latched.<name>`` (0 at configure, as
  on the SPU) or the transient-local topic ``~/in/<name>``; either may change at any time.
- Each input passes the sequence engine first (femtorun's rules; with ``strict`` also the SPU firmware's
  declared order). A violation is rejected with the rule broken (logged, counted in ``/diagnostics``),
  never reordered, and leaves the engine and the runner as they were.
- ``~/reset`` (std_srvs/Trigger) resets the SPU and drops partial sequences; latched values are sent again.
- Rejections are logged at most once per cause per ``_LOG_PERIOD_S`` (with the count so far); every one is
  counted in diagnostics, which stay WARN while the last input was rejected. Counts are of the messages the
  node received (``inputs_received``): with KEEP_LAST ``qos_depth``, DDS drops a burst it cannot queue
  before the node sees it.
- A femtorun-valid spec whose outputs femtorun's ``recv`` cannot serve (an output no sequence produces, one
  with two producers, one that also feeds another sequence) runs: the engine's ``take_ready`` serves every
  output with one producer, chained ones included; outputs without one producer are never published,
  named at configure (WARN) and in diagnostics (``never_published``). Any sequence or runner error while
  completing a sequence is counted, the SPU is reset (latched values re-sent) and the next input is served.
- configure loads the IOSpec and opens the runner; cleanup closes them (the shared skeleton,
  ``ros/lifecycle.py`` ``ManagedNode``). The input subscriptions are the node's data path: a callback group
  spun on an executor thread of its own (``ros/spinning.py``), so an input never waits behind ``~/reset``, a
  parameter request or the diagnostics timer; one lock keeps the engine and the runner consistent between
  that thread and the main executor (``~/reset``, ``latched.*`` parameters). An exception escaping an input
  callback takes the node through ``on_error`` (``spinning.CompanionFault``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from functools import partial
from typing import Any

import numpy as np
import rclpy
import rclpy.exceptions
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from libredgetpu_ros.errors import ConfigError, IOSpecError, LibrEdgeTpuError, SpuSequenceError
from libredgetpu_ros.femto import SequenceEngine, load_iospec
from libredgetpu_ros.femto.iospec import MAX_TEXT_BYTES, IOSpec, VectorSpec
from libredgetpu_ros.femto.runner import SpuRunner, open_runner
from libredgetpu_ros.femto.vectors import dequantize, prepare_input
from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.frame_busy import FrameBusyError, frame_lock
from libredgetpu_ros.ros.lifecycle import ManagedNode
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main
from libredgetpu_ros.ros.spu.io import check_topics, topic_names, values_of, vector_msg
from libredgetpu_ros.ros.spu.params import LATCHED_PREFIX, PARAM_TABLE, SpuConfig
from libredgetpu_ros.textdata import clip

NODE_NAME = "spu"
# IOSpecs are parsed by PyYAML's pure loader inside configure, on the node's executor: this bound keeps
# configure short whatever the file (real IOSpecs are a few KB; the figures: docs/femto.md). The CLI's
# ``iospec check`` keeps the library's MAX_TEXT_BYTES.
MAX_IOSPEC_BYTES = 256 * 1024
_LOG_PERIOD_S = 10.0  # one WARN line per rejection cause per period; diagnostics carry every count


class SpuNode(ManagedNode):
    """Lifecycle node running one SPU program; see the module docstring."""

    PARAMS = PARAM_TABLE
    DIAGNOSTICS_NAME = "spu"
    FAULT_WHAT = "input path"
    RELEASE_NOTE = "closing the runner"

    def __init__(self, node_name: str = NODE_NAME, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._spec: IOSpec | None = None
        self._engine: SequenceEngine | None = None
        self._runner: SpuRunner | None = None
        # Engine and runner: inputs on the data path's thread, ~/reset and latched parameters on the main one.
        self._lock = threading.RLock()
        self._inputs: dict[str, VectorSpec] = {}
        self._outputs: dict[str, VectorSpec] = {}
        self._latched: dict[str, np.ndarray] = {}   # latched input -> current real values
        self._in_topics: dict[str, str] = {}
        self._out_topics: dict[str, str] = {}
        self._out_pubs: dict[str, Any] = {}
        self.counters = diagnostics.Counters()
        self._log_limit = diagnostics.LogLimiter(_LOG_PERIOD_S)
        self.last_rejection = self.last_fault = ""
        self.rejected = 0
        self._rejections_at_last_report = 0
        self._refusing = False  # the last input was rejected: WARN until one is accepted

    # ----- lifecycle hooks (ros/lifecycle.py) -----------------------------------------------------

    def read_config(self) -> SpuConfig:
        cfg = super().read_config()
        if not cfg.iospec:
            raise ConfigError("parameter iospec is empty: give the IOSpec YAML of the SPU program")
        return cfg

    def open_processor(self) -> None:
        cfg = self.cfg
        try:
            spec = load_iospec(cfg.iospec, max_bytes=MAX_IOSPEC_BYTES)
        except IOSpecError as exc:
            if exc.kind == "limit" and exc.key == "size":  # refused by its size before any parsing
                raise ConfigError(f"{exc} (the SPU node loads IOSpecs of at most {MAX_IOSPEC_BYTES} bytes, "
                                  f"{MAX_IOSPEC_BYTES >> 10} KiB; `libredgetpu-ros iospec check` takes up to "
                                  f"{MAX_TEXT_BYTES >> 20} MiB: docs/femto.md)") from None
            raise
        engine = SequenceEngine(spec, strict=cfg.strict)
        in_topics = topic_names(list(spec.inputs.values()), "in")
        out_topics = topic_names(list(spec.outputs.values()), "out")
        check_topics(self.resolve_topic_name, in_topics | out_topics)
        runner = open_runner(cfg.runner, spec, **cfg.runner_options())
        with self._lock:
            self._spec, self._engine, self._runner = spec, engine, runner
        self._inputs = {v.name: v for v in spec.inputs.values()}
        self._outputs = {v.name: v for v in spec.outputs.values()}
        self._in_topics, self._out_topics = in_topics, out_topics
        self.counters = diagnostics.Counters()
        self._log_limit = diagnostics.LogLimiter(_LOG_PERIOD_S)
        self.last_rejection, self.last_fault, self.rejected, self._rejections_at_last_report = "", "", 0, 0
        self._refusing = False
        self._latched = {}
        for vec in spec.latched_inputs():
            name = LATCHED_PREFIX + vec.name
            try:
                if not self.has_parameter(name):
                    self.declare_parameter(name, [0.0] * vec.length, ParameterDescriptor(
                        description=f"latched input {vec.name!r} ({vec.length} values); set at any time"))
                values = np.asarray(self.get_parameter(name).value or [0.0] * vec.length, dtype=np.float64)
            except (rclpy.exceptions.ParameterException, TypeError, ValueError) as exc:
                values, error = None, f"{type(exc).__name__}: {exc}"
            else:
                error = self._write_latched(vec.name, values, "parameter")
            if error:
                raise ConfigError(f"{name}: {error}")
        if engine.unservable:
            self.get_logger().warning(
                f"outputs {clip(list(engine.unservable))} have no single producing sequence in "
                f"{spec.origin}: they are never published (femtorun accepts the spec; its recv fails on "
                "them)")

    def create_outputs(self) -> None:
        qos = QoSProfile(depth=self.cfg.qos_depth, reliability=ReliabilityPolicy.RELIABLE)
        self._out_pubs = {name: self.output(JointState, self._out_topics[name], qos)
                          for name in self._outputs}
        self.service(Trigger, "~/reset", self._on_reset)

    def describe(self) -> str:
        spec, runner = self._spec, self._runner
        streaming = [v.name for v in spec.streaming_inputs()]
        return (f"{spec.origin} on runner {clip(runner.describe(), 300)}; streaming {clip(streaming)}, "
                f"latched {clip(list(self._latched))}, outputs {clip(list(self._outputs))}, "
                f"strict={self.cfg.strict}")

    def create_inputs(self) -> None:
        assert self._spec is not None
        streaming_qos = QoSProfile(depth=self.cfg.qos_depth, reliability=ReliabilityPolicy.RELIABLE)
        latched_qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.TRANSIENT_LOCAL)
        for vec in self._spec.streaming_inputs():
            self.data_subscription(JointState, self._in_topics[vec.name], partial(self._on_input, vec.name),
                                   streaming_qos)
        for name in self._latched:
            self.data_subscription(JointState, self._in_topics[name], partial(self._on_latched_msg, name),
                                   latched_qos)

    def close_processor(self) -> None:
        """Close the runner, forget the program and its latched parameters (idempotent)."""
        self._out_pubs = {}
        for name in list(self._latched):
            if self.has_parameter(LATCHED_PREFIX + name):
                self.undeclare_parameter(LATCHED_PREFIX + name)
        self._latched = {}
        with self._lock:  # an input in flight on the data path finishes first
            runner, self._runner = self._runner, None
            self._spec = self._engine = None
        if runner is not None:
            runner.close()

    # ----- parameters -----------------------------------------------------------------------------

    def check_parameters(self, params: list[Parameter]) -> str | None:
        """``latched.*`` values checked, then written to the SPU here, where a failure still refuses the
        change (written after it was accepted, a failed send left the parameter showing a value the SPU did
        not take); all or none: a later one failing puts the earlier ones back."""
        latched = [p for p in params if p.name.startswith(LATCHED_PREFIX)]
        for p in latched:
            vec = self._inputs.get(p.name[len(LATCHED_PREFIX):])
            if vec is None:
                return f"{p.name}: no such latched input"
            try:
                prepare_input(np.asarray(p.value, dtype=np.float64), vec)
            except (IOSpecError, TypeError, ValueError) as exc:
                # counted under the lock (the counters are the data path's too), unless a send holds it
                with contextlib.suppress(FrameBusyError), frame_lock(self._lock):
                    self._reject("bad_input", f"{p.name}: {exc}")
                return f"{p.name}: {exc}"
        # configure declares the parameters (this check runs then too) and writes them itself: only inputs
        # it set up already are written here
        live = [p for p in latched if p.name[len(LATCHED_PREFIX):] in self._latched]
        if not live:  # no lock: the data path holds it across a send, and a wedged runner never lets go
            return None
        try:
            with frame_lock(self._lock):  # a send in flight past 1 s (stuck?): refused, nothing written
                return self._write_live(live)
        except FrameBusyError as exc:
            return f"not applied: {exc}"

    def _write_live(self, live: list[Parameter]) -> str | None:
        """``check_parameters``' writes, under the lock: all or none."""
        before = dict(self._latched)
        for i, p in enumerate(live):
            error = self._write_latched(p.name[len(LATCHED_PREFIX):], np.asarray(p.value, np.float64),
                                        "parameter")
            if error is not None:
                if i:  # the earlier ones of this change were sent: the SPU back to the values kept
                    self._latched = before
                    self._reset_spu()
                return f"{p.name}: {error}"
        return None

    # ----- inputs ---------------------------------------------------------------------------------

    def _reject(self, cause: str, text: str) -> None:
        count = self.counters.add(f"rejected.{cause}")
        self.rejected += 1
        self.last_rejection = clip(text, 300)
        if self._log_limit.due(cause):
            self.get_logger().warning(f"rejected ({cause}, {count} so far; one line per cause per "
                                      f"{_LOG_PERIOD_S:g} s): {self.last_rejection}")

    def _fault(self, counter: str, text: str) -> None:
        """A sequence or runner error while completing a sequence: counted, logged (rate-limited), the SPU
        reset with the latched values re-sent; the next input is served from a clean state."""
        count = self.counters.add(counter)
        self.last_fault = clip(text, 300)
        if self._log_limit.due(counter):
            self.get_logger().error(f"{self.last_fault} ({counter}: {count} so far); resetting the SPU")
        self._reset_spu()

    def _send(self, name: str, values: np.ndarray, what: str, *, reset_on_fault: bool = True) -> list | None:
        """Check, quantize, pass the engine then the runner; None when rejected (state unchanged) or the
        runner failed: then the SPU is reset (``_fault``), or, ``reset_on_fault`` false (the reset's own
        re-send of the latched values), the failure only counted and kept in ``last_fault``."""
        engine, runner = self._engine, self._runner
        if engine is None or runner is None:
            return None
        self._refusing = True  # until this input is accepted
        try:
            q = prepare_input(values, self._inputs[name])
        except IOSpecError as exc:  # its message names the input already; ``what`` adds where it came from
            text = str(exc)
            self._reject("bad_input", text if text.startswith(what) else f"{what}: {text}")
            return None
        try:
            fired = engine.send(name, atomic=True)
        except SpuSequenceError as exc:
            self._reject(exc.rule, f"{what}: {exc}")
            return None
        self._refusing = False
        try:
            runner.send(name, q)
        except LibrEdgeTpuError as exc:  # engine and runner disagree now: start both again
            if reset_on_fault:
                self._fault("runner_errors", f"runner failed on {what}: {exc}")
            else:  # resetting from here would re-send, fail and reset again, without end (RecursionError)
                self.counters.add("runner_errors")
                self.last_fault = clip(f"runner failed on {what}: {exc}", 300)
            return None
        self.counters.add("inputs_accepted")
        return fired

    def _why_not_sent(self, faults_before: int) -> str:
        """Why ``_send`` returned None: the runner's failure (``runner_errors`` grew from ``faults_before``),
        else the rejection."""
        if self._engine is None or self._runner is None:
            return "not configured"
        return self.last_fault if self.counters.get("runner_errors") > faults_before else self.last_rejection

    def _write_latched(self, name: str, values: np.ndarray, source: str) -> str | None:
        faults = self.counters.get("runner_errors")
        fired = self._send(name, values, f"latched input {name!r} from {source}")
        if fired is None:
            return self._why_not_sent(faults)
        self._latched[name] = np.array(values, dtype=np.float64)
        self.counters.add("latched_updates")
        return None

    def _on_latched_msg(self, name: str, msg: JointState) -> None:
        with self._lock:
            self.counters.add("inputs_received")
            self._write_latched(name, values_of(msg), "topic")

    def _on_input(self, name: str, msg: JointState) -> None:
        """Data path: one input, and the outputs of the sequence it completes."""
        with self._lock:
            self.counters.add("inputs_received")  # what DDS delivered (a flood beyond qos_depth is not)
            self._serve(name, msg)

    def _serve(self, name: str, msg: JointState) -> None:
        fired = self._send(name, values_of(msg), f"input {name!r}")
        if not fired:
            return
        try:
            ready = self._engine.take_ready()
        except SpuSequenceError as exc:  # take_ready never raises today; a fault here must not kill the node
            self._fault("sequence_errors", f"sequence error after input {name!r}: {exc}")
            return
        if not ready:
            return
        try:
            produced = self._runner.recv()
        except LibrEdgeTpuError as exc:  # SpuSequenceError from a runner's engine included
            self._fault("runner_errors", f"runner recv failed: {exc}")
            return
        for out in ready:
            vec = self._outputs[out]
            q = produced.get(out)
            if q is None:
                self.counters.add("runner_errors")
                if self._log_limit.due("missing_output"):
                    self.get_logger().error(f"runner produced no {out!r} although its sequence completed")
                continue
            self._out_pubs[out].publish(vector_msg(msg.header.stamp, msg.header.frame_id,
                                                   dequantize(np.asarray(q)[: vec.length], vec)))
            self.counters.add("outputs_published")

    # ----- reset and diagnostics --------------------------------------------------------------------

    def _reset_spu(self) -> str | None:
        """Engine and runner back to zero, latched values re-sent; the runner's error text if it failed."""
        if self._engine is None or self._runner is None:
            return "node is not configured"
        self._engine.reset()
        self.counters.add("resets")
        try:
            self._runner.reset()
        except LibrEdgeTpuError as exc:
            self.counters.add("runner_errors")
            self.get_logger().error(f"runner reset failed: {exc}")
            return str(exc)
        for name, values in list(self._latched.items()):
            faults = self.counters.get("runner_errors")
            if self._send(name, values, f"latched input {name!r} after reset", reset_on_fault=False) is None:
                error = self._why_not_sent(faults)
                if self._log_limit.due("runner_errors"):
                    self.get_logger().error(f"SPU reset, but {error}")
                return error
        return None

    def _on_reset(self, req: Trigger.Request, resp: Trigger.Response) -> Trigger.Response:
        try:
            with frame_lock(self._lock):  # an input in flight past 1 s (stuck?): refused, nothing reset
                if self._engine is None:
                    resp.success, resp.message = False, "node is not configured"
                    return resp
                error = self._reset_spu()
        except FrameBusyError as exc:
            resp.success, resp.message = False, str(exc)
            return resp
        resp.success = error is None
        resp.message = error or (f"SPU reset; partial sequences dropped; latched inputs re-sent: "
                                 f"{list(self._latched)}")
        return resp

    def diagnostics_values(self) -> dict[str, object]:
        spec, runner, cfg = self._spec, self._runner, self.cfg
        values: dict[str, object] = {
            "iospec": spec.origin if spec else "", "runner": runner.name if runner else "",
            "strict": cfg.strict if cfg else "", "inputs_received": self.counters.get("inputs_received"),
            "inputs_accepted": self.counters.get("inputs_accepted"), "refusing": self._refusing,
            "outputs_published": self.counters.get("outputs_published"),
            "latched_updates": self.counters.get("latched_updates"),
            "rejected": self.rejected, "resets": self.counters.get("resets"),
            "runner_errors": self.counters.get("runner_errors"),
            "sequence_errors": self.counters.get("sequence_errors"),
            "never_published": ", ".join(self._engine.unservable) if self._engine else "",
        }
        for rule in ("bad_input", "declared-order", "unread-outputs", "too-many-inputs", "not-an-input",
                     "unknown-name", "output-producers"):
            values[f"rejected.{rule}"] = self.counters.get(f"rejected.{rule}")
        values["last_rejection"] = self.last_rejection
        values["last_fault"] = self.last_fault
        return values

    def hardware_id(self) -> str:
        return self._runner.name if self._runner else ""

    def diagnostic_status(self) -> tuple[int, str, dict[str, object]]:
        total = self.rejected
        new = total - self._rejections_at_last_report
        self._rejections_at_last_report = total
        faults = self.counters.get("runner_errors") + self.counters.get("sequence_errors")
        level = diagnostics.WARN if new or faults or self._refusing else diagnostics.OK
        if new:
            message = f"{new} input(s) rejected: {self.last_rejection}"
        elif self._refusing:  # a stream the sequence refuses stays WARN until an input is accepted again
            message = f"inputs refused: the last one was rejected ({self.last_rejection})"
        else:
            message = "running"
        return level, message, self.diagnostics_values()


def main(args: list[str] | None = None) -> int:
    """``ros2 run libredgetpu_ros spu_node`` / ``python -m libredgetpu_ros.ros.spu.node``."""
    return run_lifecycle_node_main(SpuNode, args)


if __name__ == "__main__":
    sys.exit(main())
