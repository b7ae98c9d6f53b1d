"""One open device per physical accelerator per process, shared by every stream (camera node, engine) in it.

A :class:`DeviceBroker` owns the device (whatever ``opener()`` returns: an ``EdgeTpuDevice``, or the CPU twin
for a shared CPU backend) and one worker thread that runs the requests of its streams one at a time:

- **newest frame per stream**: a stream holds at most one waiting request; a newer one replaces it (the
  replaced request ends :class:`Superseded`, counted), so a slow device never builds a backlog;
- **fair between streams**: start-time fair queuing on each stream's configured rate (``rate_hz``; a stream
  without one is weighted like the highest rate set on the device, all at 0: equal turns): the waiting
  stream with the smallest virtual time runs next, then its virtual time advances by 1/weight. A stream
  that was idle restarts at the virtual time of the request in service, so it cannot claim a burst for the
  time it was away;
- **parameter caching aware**: a request names its ``model``; when it differs from the previous request's,
  that is a switch (a model's first run is its load, not counted), counted per (from, to) with whether it
  re-uploaded parameters (the device's ``uploads``
  grew: models compiled together share a caching token and switch without an upload) and its time;
- **a device fault** (``DeviceError`` raised by a request) is reported to every stream (``on_fault``
  callbacks, ``Stream.faults``), the device is reopened once by the worker (not by each user), and the failed
  request is retried once on it. If reopening fails, the broker is broken: every waiting and later request
  raises ``DeviceLostError`` naming the fault, and each user releases as it does for its own device.

:func:`shared` hands out one broker per key (the device's bus path) per process, reference-counted: the last
:meth:`DeviceBroker.release` closes the device. Across processes the device lock (``edgetpu/locks.py``)
still refuses a second open, naming the holder. ROS-free.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from libredgetpu_ros.errors import DeviceError, DeviceLostError, LibrEdgeTpuError

log = logging.getLogger(__name__)

FaultCallback = Callable[[str, bool], None]  # (what failed, whether the device was reopened)


class Superseded(LibrEdgeTpuError):
    """The request was replaced by a newer one of the same stream before it ran."""


class Request:
    """One job of a stream: ``fn(device)`` run on the broker's worker; :meth:`wait` gives its result."""

    __slots__ = ("_done", "error", "fn", "model", "result", "submitted")

    def __init__(self, fn: Callable[[Any], Any], model: Hashable | None) -> None:
        self.fn, self.model = fn, model
        self.submitted = time.monotonic()
        self.result: Any = None
        self.error: BaseException | None = None
        self._done = threading.Event()

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        if not self._done.wait(timeout):
            raise TimeoutError(f"no result within {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result


class Stream:
    """A user of the broker (one camera, one engine); its counters are read by diagnostics and benches."""

    def __init__(self, broker: DeviceBroker, name: str, rate_hz: float,
                 on_fault: FaultCallback | None) -> None:
        self.broker, self.name = broker, name
        self.rate_hz = float(rate_hz) if rate_hz > 0 else 0.0  # as configured (0: see weight)
        self.on_fault = on_fault
        self.vtime = 0.0
        self.pending: Request | None = None
        self.served = 0
        self.superseded = 0
        self.latencies_ms: list[float] = []  # submit -> result, of served requests (bounded below)
        self.faults = 0
        self.last_fault = ""
        self.closed = False

    @property
    def weight(self) -> float:
        """Its share in the fair queuing: its rate, or without one the highest rate another stream of the
        device has (a node left at 0 is never served less often than a configured one; all at 0: equal
        turns)."""
        if self.rate_hz:
            return self.rate_hz
        return max((s.rate_hz for s in self.broker._streams), default=0.0) or 1.0

    def submit(self, fn: Callable[[Any], Any], model: Hashable | None = None) -> Request:
        """Queue ``fn(device)``; a request of this stream still waiting is superseded by it."""
        return self.broker._submit(self, Request(fn, model))

    def run(self, fn: Callable[[Any], Any], model: Hashable | None = None,
            timeout: float | None = None) -> Any:
        """Submit and wait: ``fn(device)``'s result, or its exception (``Superseded`` if replaced)."""
        return self.submit(fn, model).wait(timeout)

    def record(self, request: Request) -> None:
        self.served += 1
        self.latencies_ms.append((time.monotonic() - request.submitted) * 1e3)
        if len(self.latencies_ms) > 4096:
            del self.latencies_ms[:2048]

    def fault(self, what: str, reopened: bool) -> None:
        self.faults += 1
        self.last_fault = what
        if self.on_fault is not None:
            try:
                self.on_fault(what, reopened)
            except Exception:  # a user's callback must not take the worker down
                log.exception("stream %s: fault callback failed", self.name)

    def close(self) -> None:
        self.broker._close_stream(self)

    def status(self) -> dict[str, Any]:
        """:meth:`stats` plus the device's users, faults and reopens: what a user's diagnostics show."""
        broker = self.broker
        return {**self.stats(), "device_users": broker._refs, "device_faults": broker.faults,
                "device_reopens": broker.reopens, "device_broken": broker.broken}

    def stats(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        pick = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 3)) if lat else (lambda q: None)
        return {"stream": self.name, "rate_hz": self.rate_hz, "served": self.served,
                "superseded": self.superseded, "p50_ms": pick(0.5),
                "p99_ms": pick(0.99), "faults": self.faults, "last_fault": self.last_fault}


class DeviceBroker:
    """See the module docstring. ``opener()`` opens the device (again, after a fault)."""

    def __init__(self, key: str, opener: Callable[[], Any]) -> None:
        self.key = key
        self._opener = opener
        self._cv = threading.Condition()
        self._streams: list[Stream] = []
        self._vnow = 0.0  # virtual start time of the request in service
        self._refs = 0
        self._closing = False
        self.broken = ""  # why the device is gone for good ("" while usable)
        self.faults = 0
        self.reopens = 0
        self.switches: dict[tuple[Hashable, Hashable], dict[str, float]] = {}
        self._last_model: Hashable | None = None
        self._seen: set[Hashable] = set()  # models run on this device since it was opened
        self.device: Any = opener()
        self._worker = threading.Thread(target=self._work, name=f"broker {key}", daemon=True)
        self._worker.start()

    # -- users --------------------------------------------------------------------------------------------

    def stream(self, name: str, rate_hz: float = 0.0, on_fault: FaultCallback | None = None) -> Stream:
        with self._cv:
            taken = {s.name for s in self._streams}
            unique, n = name, 1
            while unique in taken:  # e.g. several cameras' nodes on one model file: "model.tflite#2"
                n += 1
                unique = f"{name}#{n}"
            stream = Stream(self, unique, rate_hz, on_fault)
            stream.vtime = self._vnow
            self._streams.append(stream)
            return stream

    def _close_stream(self, stream: Stream) -> None:
        with self._cv:
            stream.closed = True
            if stream in self._streams:
                self._streams.remove(stream)
            pending, stream.pending = stream.pending, None
        if pending is not None:
            pending.finish(error=Superseded(f"stream {stream.name} closed"))

    def _submit(self, stream: Stream, request: Request) -> Request:
        with self._cv:
            if self.broken or self._closing or stream.closed:
                why = "stream closed" if stream.closed else (self.broken or f"device {self.key} is closed")
                request.finish(error=DeviceLostError(f"{self.key}: {why}"))
                return request
            old, stream.pending = stream.pending, request
            if old is None:  # an idle stream starts no earlier than the request in service (no burst)
                stream.vtime = max(stream.vtime, self._vnow)
            self._cv.notify_all()
        if old is not None:
            stream.superseded += 1
            old.finish(error=Superseded(f"stream {stream.name}: replaced by a newer request"))
        return request

    # -- worker -------------------------------------------------------------------------------------------

    def _next(self) -> tuple[Stream, Request] | None:
        with self._cv:
            while True:
                waiting = [s for s in self._streams if s.pending is not None]
                if waiting:
                    stream = min(waiting, key=lambda s: s.vtime)  # first listed wins ties: round robin below
                    request, stream.pending = stream.pending, None
                    self._vnow = stream.vtime
                    stream.vtime += 1.0 / stream.weight
                    self._streams.remove(stream)  # served last among equals next time
                    self._streams.append(stream)
                    return stream, request
                if self._closing:
                    return None
                self._cv.wait()

    def _work(self) -> None:
        while (item := self._next()) is not None:
            stream, request = item
            if self.broken:
                request.finish(error=DeviceLostError(f"{self.key}: {self.broken}"))
                continue
            try:
                result = self._run(request)
            except DeviceError as exc:
                if not self._recover(f"{type(exc).__name__}: {exc}"):
                    request.finish(error=DeviceLostError(f"{self.key}: {self.broken}"))
                    continue
                try:
                    result = self._run(request)  # once, on the reopened device
                except BaseException as again:
                    request.finish(error=again)
                    continue
            except BaseException as exc:  # the request's own failure (bad input...): its caller's business
                request.finish(error=exc)
                continue
            stream.record(request)
            request.finish(result)

    def _run(self, request: Request) -> Any:
        device = self.device
        switched = request.model is not None and request.model != self._last_model
        before = getattr(device, "uploads", 0)
        start = time.perf_counter()
        result = request.fn(device)
        if switched:
            if request.model in self._seen:  # a first run is the model's load, not a switch
                entry = self.switches.setdefault((self._last_model, request.model),
                                                 {"count": 0, "uploads": 0, "ms": 0.0})
                entry["count"] += 1
                entry["uploads"] += int(getattr(device, "uploads", 0) > before)
                entry["ms"] += (time.perf_counter() - start) * 1e3
            self._seen.add(request.model)
            self._last_model = request.model
        return result

    def _recover(self, what: str) -> bool:
        """Worker thread, after a device fault: reopen once; every stream hears of it. True if reopened."""
        self.faults += 1
        self._last_model = None
        self._seen.clear()
        log.error("shared device %s failed (%s); reopening it once for its %d user(s)", self.key, what,
                  len(self._streams))
        old, self.device = self.device, None
        try:
            old.close()
        except Exception as exc:  # it is already lost; closing is best effort
            log.warning("shared device %s: closing after the fault: %s", self.key, exc)
        try:
            self.device = self._opener()
        except BaseException as exc:
            self.broken = f"device fault ({what}); reopening failed: {exc}"
            reopened = False
        else:
            self.reopens += 1
            reopened = True
        with self._cv:
            streams = list(self._streams)
            if not reopened:  # nothing will run again: fail what waits
                waiting = [(s, s.pending) for s in streams if s.pending is not None]
                for s, _ in waiting:
                    s.pending = None
        for s in streams:
            s.fault(what, reopened)
        if not reopened:
            for _, req in waiting:
                req.finish(error=DeviceLostError(f"{self.key}: {self.broken}"))
        return reopened

    # -- sharing ------------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        with self._cv:
            streams = {s.name: s.stats() for s in self._streams}
        switches = [{"from": str(a), "to": str(b), **v} for (a, b), v in self.switches.items()]
        return {"device": self.key, "faults": self.faults, "reopens": self.reopens, "broken": self.broken,
                "users": self._refs, "streams": streams, "switches": switches}

    def retain(self) -> DeviceBroker:
        """One more reference (a further user that got the broker itself); released by :meth:`release`."""
        with _registry_lock:
            self._refs += 1
        return self

    def release(self) -> None:
        """Drop one reference (from :func:`shared`); the last one stops the worker and closes the device."""
        with _registry_lock:
            self._refs -= 1
            if self._refs > 0:
                return
            if _registry.get(self.key) is self:
                del _registry[self.key]
        self.close()

    def close(self) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        if threading.current_thread() is not self._worker:
            self._worker.join()
        device, self.device = self.device, None
        if device is not None:
            device.close()


_registry_lock = threading.Lock()
_registry: dict[str, DeviceBroker] = {}
_opening: dict[str, threading.Lock] = {}  # per device key: one open at a time (one per physical device)


def shared(key: str, opener: Callable[[], Any]) -> DeviceBroker:
    """The process's broker of device ``key`` (opened with ``opener`` if none yet), one more reference:
    call :meth:`DeviceBroker.release` once done.

    The open runs outside the registry lock (it uploads firmware and may wait on USB for seconds): nodes of
    one process opening other devices, or releasing theirs, never wait behind it; a second user of the same
    device waits for that open and shares its broker."""
    with _registry_lock:
        gate = _opening.setdefault(key, threading.Lock())
    with gate:
        with _registry_lock:
            broker = _registry.get(key)
            if broker is not None and not broker.broken:
                broker._refs += 1
                return broker
        broker = DeviceBroker(key, opener)  # a DeviceError propagates: nothing registered
        with _registry_lock:
            _registry[key] = broker
            broker._refs += 1
        return broker


def open_shared(device: Any = None, firmware: Any = None,
                transport_factory: Callable[[], Any] | None = None) -> DeviceBroker:
    """A reference to the process's broker of an Edge TPU: ``device`` is a ``DeviceBroker`` (one more
    reference), or a selector (``device.parse_selector``: an index, "usb:<bus path>", or None: the first one
    no other process holds, so one this process shares comes first) resolved to its bus path, one broker
    per physical device, opened on first use; ``transport_factory`` replaces USB (tests, the simulated
    accelerator: its transport's ``bus_path`` is the key; a reopen after a fault asks the factory for a
    fresh transport)."""
    from libredgetpu_ros.edgetpu.device import EdgeTpuDevice, select_device
    from libredgetpu_ros.edgetpu.locks import held_elsewhere

    if isinstance(device, DeviceBroker):
        return device.retain()
    if transport_factory is not None:
        first = [transport_factory()]  # the first open uses the transport made here, a reopen a fresh one

        def opener() -> Any:
            made = first.pop() if first else transport_factory()
            return EdgeTpuDevice.open(transport_factory=lambda: made)

        return shared(first[0].bus_path, opener)
    taken: set[str] = set()  # auto: devices another process took between the check and the open
    while True:
        bus_path = select_device(device, lambda info: info.bus_path in taken
                                 or held_elsewhere(info.bus_path)).bus_path
        try:
            return shared(bus_path, lambda path=bus_path: EdgeTpuDevice.open(path, firmware))
        except DeviceError:
            # two processes starting together both saw this one free: the loser takes the next free one
            if device is not None or bus_path in taken or not held_elsewhere(bus_path):
                raise
            taken.add(bus_path)


def brokers() -> dict[str, DeviceBroker]:
    """The open brokers of this process by key (for diagnostics and ``doctor``)."""
    with _registry_lock:
        return dict(_registry)
