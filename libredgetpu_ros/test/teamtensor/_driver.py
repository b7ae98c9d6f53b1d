"""One Data Source's datagrams (address, session number, request ids) into a WorkerCore, no sockets."""

from __future__ import annotations

import itertools

from libredgetpu_ros.teamtensor import datagrams, packets
from libredgetpu_ros.teamtensor.worker import WorkerCore

PEER = ("127.0.0.1", 40000)


class Driver:
    """One Data Source's datagrams (peer address, session number, request ids) straight into a WorkerCore."""

    def __init__(self, core: WorkerCore, peer: tuple[str, int] = PEER, session: int = 1) -> None:
        self.core, self.peer, self.session = core, peer, session
        self.ids = itertools.count(1)

    def raw(self, req: packets.Request, rid: int | None = None) -> tuple[int, list[bytes]]:
        rid = next(self.ids) if rid is None else rid
        out: list[bytes] = []
        for d in datagrams.to_datagrams(packets.encode_request(req), rid, session=self.session):
            out += self.core.handle(self.peer, d)
        return rid, out

    def ask(self, req: packets.Request):
        """Send ``req``; the decoded reply (NACK raises ``packets.Refused``)."""
        rid, out = self.raw(req)
        assert len(out) >= 1
        return packets.decode_reply(req, self.replies(rid, out))

    def replies(self, rid: int, out: list[bytes]) -> bytes:
        """The reply packet carried by ``out`` (reassembled), checking it answers ``rid`` of our session."""
        r = datagrams.Reassembler()
        packet = b""
        for d in out:
            sealed = datagrams.Framer().open(d)
            assert (sealed.rid, sealed.session) == (rid, self.session)
            body = sealed.body
            packet = r.feed("reply", body) if r.is_fragment(body) else bytes(body)
        return packet
