"""The worker's one session: which Data Source owns the worker, its request ids and its stored replies.

The first Data Source to assign a pipeline (ASN_DP) owns the worker until it releases it (RELEASE) or has
been silent for ``session_timeout`` seconds (no new request id: retransmissions and replays of old ids do
not count) and another Data Source claims it. With a shared key a claim must carry a nonce the worker issued
(:class:`Challenges`), so a replayed ASN_DP of an earlier session cannot take the worker. A session is the
owner's address *and* the session number it put in every datagram's trailer, so a datagram from an earlier
Data Source on the same address cannot pass for the current one.

Exactly-once within a session: the Data Source sends one request at a time with increasing ids, so the
worker keeps the highest id it has executed. A new id (ahead of it by at most ``id_window``) is executed;
the id just executed, when it was a read, is executed again (its reply was lost and it changes nothing);
the replies of state-changing requests (ASN_DP, ASN_MD, BATCH, RELEASE) are stored, within a count and a
byte budget, and a repeat gets the stored reply; any other id is stale and dropped. Only datagrams that
passed the integrity check reach this, so one corrupted datagram can neither execute twice, poison the next
id nor push the highest id out of the Data Source's reach.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

ID_MODULUS = 1 << 32


@dataclass
class Session:
    peer: Hashable
    number: int  # the Data Source's session number (datagram trailer)
    highest: int  # the latest request id executed
    last_seen: float
    replies: OrderedDict[int, list[bytes]] = field(default_factory=OrderedDict)
    reply_bytes: int = 0

    def owns(self, peer: Hashable, number: int) -> bool:
        return self.peer == peer and self.number == number

    def is_new(self, rid: int, window: int) -> bool:
        """Ahead of the latest executed id by 1..window (modulo 2**32)."""
        return 0 < (rid - self.highest) % ID_MODULUS <= window

    def store(self, rid: int, reply: list[bytes], max_replies: int, max_bytes: int) -> None:
        """Keep ``reply`` for repeats of ``rid``; oldest first out past either budget, never the newest."""
        self.replies[rid] = reply
        self.reply_bytes += sum(len(d) for d in reply)
        while len(self.replies) > 1 and (len(self.replies) > max_replies or self.reply_bytes > max_bytes):
            _, old = self.replies.popitem(last=False)
            self.reply_bytes -= sum(len(d) for d in old)


class Challenges:
    """Claim nonces a keyed worker issues (HMAC mode): freshness for ASN_DP.

    A keyless attacker cannot seal a datagram, but can replay one: an ASN_DP captured from an earlier
    session is a valid claim forever unless the claim carries something the worker chose recently. So a
    keyed worker answers a claim it would grant with NACK CHALLENGE carrying a random 32-bit nonce; the Data
    Source claims again with that nonce as its session number (the HMAC covers it). A nonce is good once,
    for its peer, within ``ttl`` seconds; the claim's session then lives under that number, so no datagram
    of an earlier session (nor the earlier claim itself) is ever valid again, across worker restarts too
    (nothing to persist). At most ``size`` nonces are outstanding (oldest dropped): a flood of replayed
    claims costs a legitimate claimant a retry, never memory.
    """

    def __init__(self, ttl: float = 10.0, size: int = 16) -> None:
        self.ttl, self.size = ttl, size
        self._issued: OrderedDict[int, tuple[Hashable, float]] = OrderedDict()

    def issue(self, peer: Hashable, now: float, avoid: int = 0) -> int:
        """A fresh nonce for ``peer`` (never 0, never ``avoid`` nor one outstanding)."""
        while True:
            nonce = secrets.randbelow(ID_MODULUS - 1) + 1
            if nonce != avoid and nonce not in self._issued:
                break
        self._issued[nonce] = (peer, now)
        while len(self._issued) > self.size:
            self._issued.popitem(last=False)
        return nonce

    def redeem(self, nonce: int, peer: Hashable, now: float) -> bool:
        """Whether ``nonce`` was issued to ``peer`` less than ``ttl`` s ago and not redeemed yet (it is
        consumed either way when it was issued to ``peer``)."""
        issued = self._issued.get(nonce)
        if issued is None or issued[0] != peer:
            return False
        del self._issued[nonce]
        return now - issued[1] <= self.ttl
