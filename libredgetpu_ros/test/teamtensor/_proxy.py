"""A user-space UDP impairment proxy on 127.0.0.1 (this machine has no ``tc netem``).

It sits between one client and one upstream server and, in both directions and from a seeded RNG, drops,
duplicates, corrupts (one byte of a datagram replaced by another value), delays and reorders datagrams.
A random delay per datagram (``delay``, jitter) reorders by itself; ``reorder`` also holds a datagram back
until the next one in the same direction has gone (or ``hold`` seconds pass). Runs on the caller's asyncio
loop.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Impairment:
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    delay: tuple[float, float] = (0.0, 0.0)  # uniform extra latency, seconds
    corrupt: float = 0.0  # probability that one byte of a datagram (a copy of it) is changed
    hold: float = 0.005  # longest a reordered datagram waits for a successor


class _Endpoint(asyncio.DatagramProtocol):
    def __init__(self, on_datagram) -> None:
        self.on_datagram = on_datagram

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.on_datagram(data, addr)


class ImpairmentProxy:
    def __init__(self, upstream: tuple[str, int], impairment: Impairment, seed: int = 0) -> None:
        self.upstream = upstream
        self.impairment = impairment
        self.rng = random.Random(seed)
        self.stats: Counter = Counter()
        self._client: tuple | None = None
        self._front = self._back = None
        self._closed = False  # datagrams still delayed when the proxy closes are dropped
        self._held: dict[str, tuple[bytes, asyncio.TimerHandle] | None] = {"up": None, "down": None}

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._front, _ = await loop.create_datagram_endpoint(lambda: _Endpoint(self._from_client),
                                                             local_addr=("127.0.0.1", 0))
        self._back, _ = await loop.create_datagram_endpoint(lambda: _Endpoint(self._from_upstream),
                                                            local_addr=("127.0.0.1", 0))
        return self._front.get_extra_info("sockname")[:2]

    def close(self) -> None:
        self._closed = True
        for held in self._held.values():
            if held is not None:
                held[1].cancel()
        for t in (self._front, self._back):
            if t is not None:
                t.close()

    def _from_client(self, data: bytes, addr: tuple) -> None:
        self._client = addr
        self._impair("up", data)

    def _from_upstream(self, data: bytes, addr: tuple) -> None:
        if tuple(addr[:2]) == tuple(self.upstream) and self._client is not None:
            self._impair("down", data)

    def _send(self, direction: str, data: bytes) -> None:
        if self._closed:
            return
        if direction == "up":
            self._back.sendto(data, self.upstream)
        elif self._client is not None:
            self._front.sendto(data, self._client)
        self.stats[f"{direction} forwarded"] += 1

    def _impair(self, direction: str, data: bytes) -> None:
        imp, rng = self.impairment, self.rng
        self.stats[f"{direction} received"] += 1
        if rng.random() < imp.loss:
            self.stats[f"{direction} dropped"] += 1
            return
        copies = 2 if rng.random() < imp.duplicate else 1
        self.stats[f"{direction} duplicated"] += copies - 1
        for _ in range(copies):
            out = data
            if rng.random() < imp.corrupt and data:
                bad = bytearray(data)
                bad[rng.randrange(len(bad))] ^= rng.randrange(1, 256)
                out = bytes(bad)
                self.stats[f"{direction} corrupted"] += 1
            delay = rng.uniform(*imp.delay)
            if delay > 0:
                asyncio.get_running_loop().call_later(delay, self._pass, direction, out)
            else:
                self._pass(direction, out)

    def _pass(self, direction: str, data: bytes) -> None:
        held = self._held[direction]
        if held is None and self.rng.random() < self.impairment.reorder:
            timer = asyncio.get_running_loop().call_later(self.impairment.hold, self._release, direction)
            self._held[direction] = (data, timer)
            self.stats[f"{direction} reordered"] += 1
            return
        self._send(direction, data)
        if held is not None:  # the held datagram goes out after its successor
            self._release(direction)

    def _release(self, direction: str) -> None:
        held = self._held[direction]
        if held is not None:
            self._held[direction] = None
            held[1].cancel()
            self._send(direction, held[0])
