"""Fuzz targets of what the nodes' services take: learned-state files and the service requests themselves.

- ``readout``: a reservoir readout file (``ReservoirComputer.load_readout``, the reservoir node's
  ``~/load_readout``, ``robotics reservoir predict``). The first byte picks what is mutated, the rest is it:
  the metadata JSON text (0) or the weights' ``.npy`` bytes (1); the file is written as a valid zip around
  them (CRCs right, so cases reach the readers instead of stopping at zipfile's CRC check). Loaded with
  ``outputs=2``, then a 30-step prediction. Seeds: a real readout's parts, and metadata with each field of
  issue 30's crafted readouts.
- ``embedding_db``: the same for an embedding database (``EmbeddingSimilarity.load``, the recognition node's
  ``~/load``): metadata JSON (0) or the embeddings' ``.npy`` (1); loaded, then queried.
- ``service_requests``: a request to one service of a live node (tracker spot and pattern, reservoir,
  recognition, control; nodes made in this process, configured and given a good state, their services
  read from the nodes, those that write a file aside): the first byte picks the service, the rest is the
  request's CDR bytes (seeds: the hostile requests of ``test/ros/_hostile_requests.py`` with short strings
  and sequences). Bytes that do not deserialize, or are fewer than the smallest request's (rmw_fastrtps_cpp's
  deserializer reads past such a buffer: a SIGSEGV in the worker), are refused; otherwise the node's own
  service callback runs and its answer must not be the guard's ``internal error`` (an exception escaping
  the handler, ``ros/services.py``); ``success`` / ``accepted`` false counts as refused. Workers are
  forked from this process and use its nodes without spinning (the handlers do not publish; rosout is off).

``test_fuzz_services.py`` runs a bounded budget in CI; a long run::

    nice -n 19 .venv/bin/python libredgetpu_ros/test/fuzz/service_targets.py --cases 100000 --seed 1
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

try:
    from .harness import FuzzTarget, long_run
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import FuzzTarget, long_run

from libredgetpu_ros.errors import InputError

_SERIES = np.stack([np.sin(np.arange(320) * 0.25), 0.6 * np.cos(0.73 * np.arange(320) * 0.25)], axis=1)


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _case_file(members: dict[str, bytes]) -> Path:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    fd, name = tempfile.mkstemp(prefix="svcfuzz-", suffix=".npz", dir=base)
    with os.fdopen(fd, "wb") as handle, zipfile.ZipFile(handle, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return Path(name)


def _two_part(data: bytes, meta_name: str, array_name: str, good_meta: str, good_array: bytes) -> Path:
    """The file of a case: byte 0 even -> data[1:] is the metadata text, odd -> the array's .npy."""
    if not data:
        raise InputError("empty case")
    body = data[1:]
    if data[0] % 2 == 0:
        meta = body.decode("utf-8", errors="replace")
        return _case_file({f"{array_name}.npy": good_array, f"{meta_name}.npy": _npy(np.array(meta))})
    return _case_file({f"{array_name}.npy": body, f"{meta_name}.npy": _npy(np.array(good_meta))})


def _consume(path: Path, use: Callable[[Path], Any]) -> Any:
    try:
        return use(path)
    finally:
        path.unlink()


# ----- readout --------------------------------------------------------------------------------------------

def readout_target(tmp: Path) -> FuzzTarget:
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig

    engine = MatMulEngine.from_template(256, backend="cpu")
    rc = ReservoirComputer(engine, ReservoirConfig(input_dim=2, seed=5, washout=20))
    rc.fit(_SERIES[:-1], _SERIES[1:])
    rc.save_readout(tmp / "readout.npz")
    with np.load(tmp / "readout.npz") as data:
        weights, meta_text = data["weights"], str(data["meta"])
    meta = json.loads(meta_text)
    crafted = [json.dumps({**meta, key: value}) for key, value in (
        ("samples", "x"), ("samples", []), ("samples", 1e300), ("train_nrmse", "x"), ("train_nrmse", {}),
        ("train_nrmse", -1.0), ("seed", None), ("format", ["nested"] * 3))]
    crafted.append(meta_text.replace('"samples": ', '"samples": 1e400, "x": '))
    seeds = [b"\0" + t.encode() for t in (meta_text, *crafted)]
    seeds += [b"\1" + _npy(w) for w in (weights, weights[:1], np.vstack([weights] * 3),
                                        weights.astype(np.float32), weights[:, :10])]

    def run(data: bytes) -> Any:
        path = _two_part(data, "meta", "weights", meta_text, _npy(weights))
        return _consume(path, lambda p: rc.predict(_SERIES[:30]) if rc.load_readout(p, outputs=2) else None)

    return FuzzTarget("readout", seeds, run, (InputError,), hot=lambda seed: [(0, min(len(seed), 200))])


# ----- embedding database ---------------------------------------------------------------------------------

def embedding_target(tmp: Path) -> FuzzTarget:
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.embedding import EmbeddingSimilarity

    rng = np.random.default_rng(4)
    engine = MatMulEngine.from_template(256, backend="cpu")
    db = EmbeddingSimilarity(engine, 256)
    db.add_many([(f"place {i}", rng.normal(size=256)) for i in range(3)])
    db.save(tmp / "db.npz")
    with np.load(tmp / "db.npz") as data:
        vectors, meta_text = data["embeddings"], str(data["meta"])
    meta = json.loads(meta_text)
    crafted = [json.dumps({**meta, key: value}) for key, value in (
        ("labels", ["a", "b"]), ("labels", [1, 2, 3]), ("labels", ["x" * 300] * 3),
        ("labels", ["\n", "", " "]),
        ("embedding_dim", 1e400), ("embedding_dim", "256"), ("labels", None))]
    seeds = [b"\0" + t.encode() for t in (meta_text, *crafted)]
    seeds += [b"\1" + _npy(v) for v in (vectors, vectors.astype(np.float64), vectors[:, :10],
                                        np.full_like(vectors, np.nan))]
    query = rng.normal(size=256)

    def run(data: bytes) -> Any:
        path = _two_part(data, "meta", "embeddings", meta_text, _npy(vectors))
        return _consume(path, lambda p: db.query(query, top_k=2) if db.load(p) >= 0 else None)

    return FuzzTarget("embedding_db", seeds, run, (InputError,), hot=lambda seed: [(0, min(len(seed), 200))])


# ----- service requests to live nodes ---------------------------------------------------------------------

# Services that write the path they are given: a mutated path could name any file, so they are left to the
# cross-process test (test/ros/test_services_hostile.py), which gives them hostile paths of its own.
WRITERS = ("/save", "/save_readout")


class _Refused(InputError):
    """A request the service answered with success / accepted false (a typed refusal, as the fuzz counts)."""


class _Escaped(RuntimeError):
    """The guard's answer: an exception escaped the handler."""


def _nodes(tmp: Path) -> list[Any]:
    """The nodes (configured, a good state each) whose services the target calls."""
    import rclpy
    from libredgetpu_ros.ros.control_node import ControlNode
    from libredgetpu_ros.ros.recognition.node import RecognitionNode
    from libredgetpu_ros.ros.reservoir.node import ReservoirNode
    from libredgetpu_ros.ros.robotics.tracker_node import TrackerNode
    from rclpy.context import Context
    from rclpy.parameter import Parameter

    context = Context()
    rclpy.init(context=context, args=["--ros-args", "--disable-rosout-logs", "--log-level", "fatal"])

    def made(cls: Any, name: str, **params: Any) -> Any:
        overrides = [Parameter(k, value=v) for k, v in {"backend": "cpu", **params}.items()]
        node = cls(name, context=context, parameter_overrides=overrides, enable_rosout=False)
        node.trigger_configure()
        assert node._state_machine.current_state[1] == "inactive", f"{name} did not configure"
        return node

    spot = made(TrackerNode, "fuzz_spot", module="spot", template="color_red_64x64")
    pattern = made(TrackerNode, "fuzz_pattern", module="pattern", template="pattern_64x64_8x8_1ch")
    rgb = np.random.default_rng(1).integers(0, 256, (64, 64, 3), np.uint8)
    pattern.processor.last = (pattern.processor.tracker.fit(rgb), 64, 64)
    reservoir = made(ReservoirNode, "fuzz_reservoir", template=256, state_size=2, seed=5, washout=20)
    reservoir._rc.fit(_SERIES[:-1], _SERIES[1:])
    reservoir._buffer.extend(_SERIES)
    recognition = made(RecognitionNode, "fuzz_recognition", template=256)
    recognition.processor.last_rgb = np.random.default_rng(2).integers(0, 256, (96, 96, 3), np.uint8)
    db = recognition.processor.db
    db.add("good", np.random.default_rng(3).normal(size=db.embedding_dim))
    control = made(ControlNode, "control_node", template=256)
    return [spot, pattern, reservoir, recognition, control]


def service_target(tmp: Path) -> FuzzTarget:
    from rclpy.serialization import deserialize_message, serialize_message

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ros"))
    import _hostile_requests as hostile

    services = [s for node in _nodes(tmp) for s in sorted(node.services, key=lambda s: s.srv_name)
                if not s.srv_type.__module__.startswith(("lifecycle_msgs", "rcl_interfaces",
                                                         "type_description_interfaces"))
                and not s.srv_name.endswith(WRITERS)]
    paths = hostile.hostile_paths(tmp / "paths")
    shortest = {s.srv_name: len(serialize_message(s.srv_type.Request())) for s in services}
    seeds = []
    for index, service in enumerate(services):
        for _, request in hostile.hostile_requests(service.srv_type, paths):
            raw = serialize_message(request)
            if len(raw) <= 4096:  # the 100k-character strings and long sequences: mutated from short ones
                seeds.append(bytes([index]) + raw)

    def run(data: bytes) -> Any:
        if not data:
            raise InputError("empty case")
        service = services[data[0] % len(services)]
        if len(data) - 1 < shortest[service.srv_name]:
            # rmw_fastrtps_cpp's rmw_deserialize reads past a buffer shorter than the smallest request (a
            # 4-byte one: SIGSEGV, or garbage values for SetColor; 3 in 20,000 cases): rmw's, not ours
            raise InputError("shorter than the smallest request")
        try:
            request = deserialize_message(data[1:], service.srv_type.Request)
        except Exception as exc:  # rmw's CDR reader on the mutated bytes: not a request at all
            raise InputError(f"not a {service.srv_type.__name__} request: {type(exc).__name__}") from None
        response = service.callback(request, service.srv_type.Response())
        message = getattr(response, "message", "")
        if message.startswith("internal error"):
            raise _Escaped(f"{service.srv_name}: {message}")
        ok = getattr(response, "success", getattr(response, "accepted", True))
        if not ok:
            raise _Refused(message[:200])
        return response

    return FuzzTarget("service_requests", seeds, run, (InputError,))


def targets(tmp: Path, names: list[str] | None = None) -> dict[str, FuzzTarget]:
    builders = {"readout": readout_target, "embedding_db": embedding_target,
                "service_requests": service_target}
    return {name: build(tmp) for name, build in builders.items() if names is None or name in names}


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="service-fuzz-"))
    return long_run("long fuzz run of the services' inputs", lambda names: targets(tmp, names),
                    cases=100_000, time_limit_s=5.0, memory_limit_mb=1024)


if __name__ == "__main__":
    sys.exit(main())
