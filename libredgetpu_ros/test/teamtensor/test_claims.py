"""Issue 30, failure 8: with a shared key, a replayed claim must not take the worker.

The attack: a keyless attacker captures session A's datagrams (its ASN_DP among them); A releases; B claims
and then stays silent past ``--session-timeout``; the attacker replays A's ASN_DP (once a second keeps B
out). Before the fix the worker answered, logged "taken over" and wiped B's model: the HMAC proves who made a
datagram, not when. Now a keyed worker answers a claim with a challenge nonce that the claim must carry as
its session number, so a captured claim is never fresh again (tests below: the worker's state machine with a
fake clock, and ``tt-worker`` processes with a capturing relay and an attacker socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.teamtensor import DataSource, ModelSpec, datagrams, linear, packets
from libredgetpu_ros.teamtensor.wire import Metric, Refusal
from libredgetpu_ros.teamtensor.worker import WorkerConfig, WorkerCore

from .._helpers import load_helper

pytestmark = [pytest.mark.timeout(60)]
training = load_helper(Path(__file__).resolve().parent / "_training.py")
_proxy = load_helper(Path(__file__).resolve().parent / "_proxy.py")
KEY = b"robot-cell-7"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class KeyedPeer:
    """One key holder's datagrams into a WorkerCore; every datagram it sends is kept (the capture)."""

    def __init__(self, core: WorkerCore, port: int, session: int) -> None:
        self.core, self.peer, self.session = core, ("127.0.0.1", port), session
        self.framer = datagrams.Framer(key=KEY)
        self.rid = 0
        self.sent: list[bytes] = []

    def ask(self, req: packets.Request):
        self.rid += 1
        replies = []
        for d in self.framer.seal(packets.encode_request(req), self.session, self.rid):
            self.sent.append(d)
            replies += self.core.handle(self.peer, d)
        assert len(replies) == 1, replies
        sealed = self.framer.open(replies[0])
        assert (sealed.session, sealed.rid) == (self.session, self.rid)
        return packets.decode_reply(req, sealed.body)

    def claim(self, pipeline: int) -> int:
        """ASN_DP as DataSource.assign_pipeline sends it (answering a challenge when one comes)."""
        for _ in range(3):
            try:
                return self.ask(packets.AssignPipeline(pipeline))
            except packets.Refused as exc:
                if exc.reason != Refusal.CHALLENGE:
                    raise
                self.session = exc.nonce
        raise AssertionError("no claim after 3 challenges")


def _model(value: float) -> ModelSpec:
    return ModelSpec([linear(np.full((2, 3), value, np.float32))], [Metric.MSE])


def test_a_replayed_claim_of_a_released_session_does_not_take_a_silent_owners_worker():
    clock = Clock()
    core = WorkerCore(WorkerConfig(session_timeout=10.0), key=KEY, clock=clock)
    a = KeyedPeer(core, 40001, session=111)
    assert a.claim(1) == 1
    assert a.ask(packets.AssignModel(1, 3, _model(0.5))) == 1
    assert a.ask(packets.Release()) is None
    captured = list(a.sent)
    b = KeyedPeer(core, 40002, session=222)
    assert b.claim(2) == 2
    assert b.ask(packets.AssignModel(2, 7, _model(0.25))) == 1
    clock.now += 11.0  # B silent past the session timeout
    for attacker_port in (40001, 40666):  # from A's own address and from another one
        for _ in range(3):  # "replaying it once a second keeps B out"
            for d in captured:
                core.handle(("127.0.0.1", attacker_port), d)
            clock.now += 1.0
    assert core.stats.sessions["taken over"] == 0
    assert core.pipeline == 2 and list(core.managers) == [7]
    assert b.ask(packets.GetModel(7)).layers[0].weights[0, 0] == np.float32(0.25)  # B still holds it
    assert core.stats.refused["CHALLENGE"] >= 6  # every replayed claim was answered with a new challenge


def test_a_challenge_is_good_once_for_its_peer_within_its_time():
    clock = Clock()
    core = WorkerCore(WorkerConfig(challenge_ttl=5.0), key=KEY, clock=clock)
    a = KeyedPeer(core, 40001, session=5)
    with pytest.raises(packets.Refused) as first:
        a.ask(packets.AssignPipeline(1))
    nonce = first.value.nonce
    assert first.value.reason == Refusal.CHALLENGE and nonce not in (None, 0, 5)
    other = KeyedPeer(core, 40009, session=nonce)  # another address with the nonce: not its challenge
    with pytest.raises(packets.Refused, match="CHALLENGE"):
        other.ask(packets.AssignPipeline(1))
    a.session = nonce
    clock.now += 6.0  # expired (and consumed by this try)
    with pytest.raises(packets.Refused, match="CHALLENGE") as again:
        a.ask(packets.AssignPipeline(1))
    a.session = again.value.nonce
    assert a.ask(packets.AssignPipeline(1)) == 1 and core.session.number == again.value.nonce
    assert core.stats.sessions["claimed"] == 1
    # Without a key nothing is challenged (a CRC-32 proves nothing about the sender anyway).
    plain = WorkerCore(WorkerConfig())
    (d,) = datagrams.Framer().seal(packets.encode_request(packets.AssignPipeline(1)), 9, 1)
    reply = datagrams.Framer().open(plain.handle(("127.0.0.1", 1), d)[0]).body.tobytes()
    assert reply == b"\x02\x00\x01"


def test_replays_of_the_owners_old_ids_do_not_keep_a_silent_session_alive():
    clock = Clock()
    core = WorkerCore(WorkerConfig(session_timeout=10.0), key=KEY, clock=clock)
    b = KeyedPeer(core, 40002, session=222)
    assert b.claim(2) == 2
    for _ in range(15):  # B's own datagrams replayed from B's address every second
        clock.now += 1.0
        for d in b.sent:
            core.handle(b.peer, d)
    c = KeyedPeer(core, 40003, session=333)
    assert c.claim(3) == 3 and core.stats.sessions["taken over"] == 1


class CapturingRelay(_proxy.ImpairmentProxy):
    """A relay that forwards unchanged and keeps a copy of everything the client sends (the eavesdropper)."""

    def __init__(self, upstream) -> None:
        super().__init__(upstream, _proxy.Impairment())
        self.captured: list[bytes] = []

    def _from_client(self, data: bytes, addr: tuple) -> None:
        self.captured.append(data)
        super()._from_client(data, addr)


@pytest.mark.slow
def test_the_attack_of_the_issue_against_tt_worker_processes(tmp_path):
    key_file = tmp_path / "tt.key"
    key_file.write_text(KEY.decode() + "\n")

    async def run(address) -> None:
        relay = CapturingRelay(address)
        via = await relay.start()
        async with DataSource(via, key=KEY, **training.FAST_RETRIES) as a:
            await a.hello(timeout=5.0)
            await a.assign_pipeline(1)
            await a.assign_model(1, 3, _model(0.5))
        relay.close()
        b = DataSource(address, key=KEY, **training.FAST_RETRIES)
        await b.open()
        try:
            await b.assign_pipeline(2)
            await b.assign_model(2, 7, _model(0.25))
            await asyncio.sleep(0.5)  # silent past --session-timeout 0.2
            attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            attacker.bind(("127.0.0.1", 0))
            attacker.settimeout(0.2)
            answers = []
            for _ in range(3):
                for d in relay.captured:
                    attacker.sendto(d, address)
                    with contextlib.suppress(TimeoutError):
                        answers.append(attacker.recv(65536))
                await asyncio.sleep(0.1)
            attacker.close()
            assert answers  # the worker answered the replays (challenges, BUSY), it did not ignore them
            trained = await b.get_model(7)  # refused BUSY before the fix: the attacker held the worker
            assert trained.layers[0].weights[0, 0] == np.float32(0.25)
        finally:
            await b.release()
            b.close()

    with training.worker_process("--key-file", str(key_file), "--session-timeout", "0.2") as worker:
        asyncio.run(run(worker.address))
    assert worker.stats["sessions"] == {"claimed": 2, "released": 2}
    assert worker.stats["refused"]["CHALLENGE"] >= 3 + 2  # 3 replays, 1 per honest claim
