"""The control node's engine side: a MatMulEngine sized to the controller, and the weight services' logic.

Created at configure and closed at cleanup. The controller (``command_size`` × ``state_size``) occupies the
top-left block of the N×N template; the rest stays zero.
"""

from __future__ import annotations

import array
import time
from collections import OrderedDict
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ConfigError, LibrEdgeTpuError, WeightsError
from libredgetpu_ros.ros.control.codec import JointOrder, to_float32_array, validate_weights_request
from libredgetpu_ros.ros.control.params import ControlConfig
from libredgetpu_ros.ros.frame_busy import FrameBusyError
from libredgetpu_ros.ros.params import dense_stream
from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

REPLY_RECORD_SIZE = 1024  # answers kept per request_id: a retry must come within this many calls


def converted_request(rows: int, cols: int) -> SetWeights.Request:
    """A zero ``rows``×``cols`` request with a bias, serialized and deserialized as rclpy does to send and
    take one: the type support's first conversion of a request that size (and the heap blocks it maps) is
    paid by this call. The result is what a service's take yields."""
    from rclpy.serialization import deserialize_message, serialize_message

    request = SetWeights.Request(rows=rows, cols=cols)
    request.data = array.array("f", bytes(4 * rows * cols))
    request.bias = array.array("f", bytes(4 * rows))
    converted = deserialize_message(serialize_message(request), SetWeights.Request)
    deserialize_message(serialize_message(SetWeights.Response()), SetWeights.Response)
    return converted


class ReplyRecord:
    """The answers of the last ``size`` ``set_weights`` calls that carried a ``request_id`` (idempotency).

    A reply can be lost in the middleware although the call was applied (measured in docs/control_node.md).
    A client that retries with the same ``request_id`` gets the recorded answer,
    flagged ``replayed``, and the swap is not applied a second time.
    """

    def __init__(self, size: int = REPLY_RECORD_SIZE) -> None:
        self._size = size
        self._answers: OrderedDict[str, SetWeights.Response] = OrderedDict()

    def replay(self, request_id: str) -> SetWeights.Response | None:
        recorded = self._answers.get(request_id)
        if recorded is None:
            return None
        answer = SetWeights.Response()
        for name in recorded.get_fields_and_field_types():
            setattr(answer, name, getattr(recorded, name))
        answer.replayed = True
        return answer

    def record(self, request_id: str, answer: SetWeights.Response) -> None:
        self._answers[request_id] = answer  # rclpy builds a fresh response per call: kept as is
        while len(self._answers) > self._size:
            self._answers.popitem(last=False)


class Controller:
    """An open engine plus the controller's shape, weight range and state buffer."""

    def __init__(self, cfg: ControlConfig, node: str = "") -> None:
        """The engine the parameters ask for; ``node`` (the node's fully qualified name) names its stream on
        an Edge TPU shared in the process (``params.share_stream``)."""
        from libredgetpu_ros.matmul import MatMulEngine  # LiteRT / libusb: imported only when configuring

        template: int | str = cfg.template_path or cfg.template
        self.engine: Any = MatMulEngine.from_template(template, backend=cfg.backend,
                                                      device=cfg.device or None,
                                                      rate_hz=cfg.device_share_hz,
                                                      stream=dense_stream(node, template))
        try:
            self._setup(cfg, template)
        except BaseException:
            self.close()
            raise

    def _setup(self, cfg: ControlConfig, template: int | str) -> None:
        n_rows, n_cols = self.engine.rows, self.engine.cols
        self.rows = cfg.command_size or n_rows
        self.cols = cfg.state_size or n_cols
        if self.rows > n_rows or self.cols > n_cols:
            raise ConfigError(f"parameters command_size×state_size = {self.rows}×{self.cols} do not fit "
                              f"the {n_rows}×{n_cols} template {template!r}")
        if cfg.state_type == "joint_state" and cfg.joint_names and len(cfg.joint_names) != self.cols:
            raise ConfigError(f"parameter joint_names has {len(cfg.joint_names)} names but the controller "
                              f"has state_size = {self.cols}")
        if len(set(cfg.joint_names)) != len(cfg.joint_names):
            raise ConfigError(f"parameter joint_names={list(cfg.joint_names)!r} repeats a name")
        w_min, w_max = self.engine.weight_range()
        self.w_min = np.asarray(w_min, np.float32)[: self.rows]
        self.w_max = np.asarray(w_max, np.float32)[: self.rows]
        self.joint_order = JointOrder(cfg.joint_names) if cfg.joint_names else None
        self.x = np.zeros(n_cols, np.float32)  # template-wide input, zero beyond state_size
        weights = np.zeros((self.rows, self.cols), np.float32)
        if cfg.initial_weights:
            weights = self._load_initial_weights(Path(cfg.initial_weights))
        self.engine.set_weights(self.embed(weights))
        self.replies = ReplyRecord()
        self.applied_by: tuple[int, str] = (int(self.engine.version), "")  # (version, its request_id)

    def _load_initial_weights(self, path: Path) -> np.ndarray:
        from libredgetpu_ros.npyfile import read_npy

        # The header is checked against the file's size (and a float64 matrix of this shape) before
        # NumPy allocates: a lying header must fail configure with a ConfigError, not a MemoryError.
        weights = read_npy(path, "parameter initial_weights:", max_bytes=8 * self.rows * self.cols,
                           error=ConfigError)
        if weights.shape != (self.rows, self.cols):
            raise ConfigError(f"parameter initial_weights: {path} holds shape {weights.shape}, expected "
                              f"({self.rows}, {self.cols}) = (command_size, state_size)")
        if not np.isfinite(weights).all():
            raise ConfigError(f"parameter initial_weights: {path} contains NaN or inf")
        return weights.astype(np.float32)

    def embed(self, weights: np.ndarray) -> np.ndarray:
        """The controller block in the top-left corner of a zero template-sized matrix (as is if full)."""
        if weights.shape == (self.engine.rows, self.engine.cols):
            return weights  # the engine quantizes into its own arrays and keeps no reference to this one
        full = np.zeros((self.engine.rows, self.engine.cols), np.float32)
        full[: weights.shape[0], : weights.shape[1]] = weights
        return full

    def describe(self) -> str:
        engine = self.engine
        return f"MatMulEngine {engine.template.name} ({engine.rows}×{engine.cols}) on {engine.backend}"

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()

    # ----- services -------------------------------------------------------------------------------

    def set_weights(self, req: SetWeights.Request, resp: SetWeights.Response, clip_policy: str,
                    t0: float, guard: AbstractContextManager[Any] | None = None) -> str | None:
        """Validate, quantize and (unless a dry run) swap; fills ``resp``. Returns an error worth logging
        at ERROR level (device trouble), else None. ``guard`` is entered around the staging alone
        (``MatMulEngine.set_weights``); its ``FrameBusyError`` is raised, the weights unchanged."""
        engine = self.engine
        resp.accepted = False
        resp.version = int(engine.version)
        try:
            weights, bias = validate_weights_request(req.data, req.bias, req.rows, req.cols,
                                                     (self.rows, self.cols), self.w_min, self.w_max,
                                                     clip_policy)
            full_bias = None
            if bias is not None:
                full_bias = np.zeros(engine.rows, np.float32)
                full_bias[: self.rows] = bias
            full = self.embed(weights)
            node_validate_ms = (time.perf_counter() - t0) * 1e3
            report = engine.set_weights(full, bias=full_bias, dry_run=req.dry_run, guard=guard)
        except FrameBusyError:  # the caller's bounded wait for a call in flight: not device trouble
            raise
        except WeightsError as exc:
            resp.message = str(exc)
            resp.validate_ms = (time.perf_counter() - t0) * 1e3
            return None
        except LibrEdgeTpuError as exc:  # device trouble: refuse and keep serving the old weights
            resp.message = f"{type(exc).__name__}: {exc}"
            return f"set_weights failed, the old weights stay active: {resp.message}"
        # The engine's `accepted` means "published"; for the service a passing dry run is accepted too.
        resp.accepted = True
        resp.version = int(report.version)
        resp.clipped_count = int(report.clipped_count)
        resp.max_quantization_error = float(report.max_quantization_error)
        timings = report.timings_ms
        resp.validate_ms = node_validate_ms + float(timings["validate"])
        resp.quantize_ms = float(timings["quantize"])
        resp.blob_ms = float(timings["blob"])
        resp.swap_ms = float(timings["swap"])
        verb = "validated (dry run, nothing swapped)" if req.dry_run else "swapped"
        resp.message = (f"{verb}: version {resp.version}, {resp.clipped_count} clipped, max quantization "
                        f"error {resp.max_quantization_error:.3g}")
        if not req.dry_run:
            self.applied_by = (resp.version, req.request_id)
        return None

    def warm_service_path(self, clip_policy: str) -> SetWeights.Response:
        """One full-size ``~/set_weights`` request through everything a real call runs in this process, with
        nothing swapped: the request serialized and deserialized as rclpy does on take (type support
        conversion and CDR, first used here and not on the first call), then validated, quantized and blob'ed
        as a dry run, and its response serialized. Its buffers are the size of a real request's, so the heap
        blocks of the first take are mapped here too. Run on the thread that later serves the calls (the
        node's main executor). Returns the dry run's response (accepted, the version unchanged)."""
        request = converted_request(self.rows, self.cols)
        request.dry_run = True
        response = SetWeights.Response()
        self.set_weights(request, response, clip_policy, time.perf_counter())
        return response

    def get_weights(self, resp: GetWeights.Response) -> None:
        weights, bias, version = self.engine.get_weights()
        resp.success, resp.message = True, ""
        resp.version = int(version)
        applied_version, request_id = self.applied_by
        resp.last_request_id = request_id if applied_version == resp.version else ""
        resp.rows, resp.cols = self.rows, self.cols
        resp.data = to_float32_array(np.asarray(weights)[: self.rows, : self.cols])
        if bias is not None:
            resp.bias = to_float32_array(np.asarray(bias)[: self.rows])
        resp.weight_min = to_float32_array(self.w_min)
        resp.weight_max = to_float32_array(self.w_max)
