"""One client connection as the server sees it, whatever moves its bytes.

An adapter creates a peer per accepted connection and calls `received` with what it read, `lost`
when the connection is gone, and `blocked` / `drained` as its send buffer crosses its water
marks. While blocked, the adapter stops reading the connection and the peer holds back the
messages already read, so a client that asks for much and reads nothing gets no more answers
queued than one high-water mark's worth. The peer answers through the two functions it was
given: ``write`` (queue bytes for the peer) and ``hang_up`` (close the connection once what was
queued is written). It reaches the rest of the server only through the `Connections` it is
given: the loop, ``feed``, and the core's answers it may read.

Its state is one `PeerState`, as wsproto's connection has one.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from execproto import (
    Config,
    ConnectionClosed,
    ConnectionOpened,
    MessageReceived,
    SendBlocked,
    SendDrained,
)

from ._ws import ServerSocket, Token, plain_http_refusal, text_frame_header

if TYPE_CHECKING:
    import ssl

    from execproto import Greeting

    from ._connections import Connections
    from ._tls import ServerTls

Write = Callable[[Sequence[bytes]], None]

log = logging.getLogger("execproto")

# Send-buffer water marks shared by the adapters: above HIGH the session's processes stop being
# read; below LOW they start again.
HIGH_WATER = 4 << 20
LOW_WATER = 1 << 20

# Seconds before a wrong bearer token is answered: guessing costs time, and only that
# connection waits (the answer is scheduled, nothing sleeps).
AUTH_DELAY = 0.5

# Pings in a row the client may leave unanswered: at the next one its connection is closed,
# and its session detaches, to be resumed.
MISSED_PONGS = 2


class PeerState(Enum):
    """Where a connection is, and what that allows: ``known``, the core knows the connection;
    ``writes``, more than a close may still be written to it. Both are plain attributes of
    each state, since every send asks."""

    #            name           known  writes
    CONNECTING = ("connecting", False, True)  # a websocket in its upgrade, stdio not opened yet
    OPEN = ("open", True, True)  # the core was told (`ConnectionOpened`)
    CLOSING = ("closing", True, False)  # the core knows it; nothing is written but the close
    REFUSING = ("refusing", False, False)  # closing before the core knew it: a refused upgrade
    LOST = ("lost", False, False)  # gone, and the core told if it knew

    def __init__(self, name: str, known: bool, writes: bool) -> None:
        self.known = known
        self.writes = writes


# What opening and starting to close make of each state; a state not listed stays as it is.
# A refusal can race the upgrade it refuses (bytes read in the same batch): the core then
# hears of the connection, and of its close.
OPENED = {PeerState.CONNECTING: PeerState.OPEN, PeerState.REFUSING: PeerState.CLOSING}
CLOSED = {PeerState.CONNECTING: PeerState.REFUSING, PeerState.OPEN: PeerState.CLOSING}


def _nothing() -> None:
    pass


def _discard(parts: Sequence[bytes]) -> None:
    pass


class WaterMarks:
    """The bytes queued for one connection and not yet written, against the water marks: says
    ``blocked`` once they rise above `HIGH_WATER`, ``drained`` once they fall back below
    `LOW_WATER`. Each adapter counts with one, however it moves the bytes."""

    def __init__(self, blocked: Callable[[], None], drained: Callable[[], None]) -> None:
        self.queued = 0
        self.blocked = False
        self._on_blocked = blocked
        self._on_drained = drained

    def changed(self, size: int) -> None:
        """``size`` bytes more queued (less, when negative: written)."""
        self.queued += size
        if not self.blocked and self.queued > HIGH_WATER:
            self.blocked = True
            self._on_blocked()
        elif self.blocked and self.queued < LOW_WATER:
            self.blocked = False
            self._on_drained()

    def drop(self) -> None:
        """The queue was thrown away with its connection: nothing is owed, nothing is told.
        The callbacks go too: they are the connection's, which holds these marks, and that
        cycle would keep the closed connection until a full garbage collection."""
        self.queued = 0
        self._on_blocked = self._on_drained = _nothing


# TLS handshakes (a key exchange and a signature each: half a millisecond of the owner's time
# with RSA-2048 here, several with RSA-4096) that may begin from one address, a second and at
# once; an IPv6 address counts by its /64, which one host is given whole.
HANDSHAKES_PER_ADDRESS, HANDSHAKE_BURST = 32.0, 64.0
# The share of the owner's time handshakes may take, measured, and the most they take at once,
# in seconds: whatever the key costs, established connections keep the rest.
HANDSHAKE_SHARE, HANDSHAKE_TIME_BURST = 0.25, 0.25
# Seconds an address that presented the right token is trusted to be a client's: its handshakes
# wait for no one else's (only for its own rate), so a flood from other addresses delays
# nobody who is known.
PROVEN_FOR = 600.0
ADDRESSES = 4096  # addresses remembered (each kind), the oldest forgotten first
# Wrong tokens waiting for their late answer; past this, the oldest is closed at once.
REFUSED = 16
# Connections an address that gave a wrong token (and not the right one lately) may open, a
# second and at once; past them they are closed at the accept, on every listener. A flood of wrong
# tokens then costs the server an accept and a close each, not a read, a parse and timers: it
# keeps up with the flood, and the listen queue, shared with every client, seldom fills.
WRONG_TOKENS_PER_ADDRESS, WRONG_TOKEN_BURST = 4.0, float(REFUSED)
QUIET = 10.0  # seconds between two lines saying connections were refused at the accept


def _source(host: str) -> str:
    """The address a connection's handshakes count against: its host, IPv6 by its /64."""
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        return host
    if address.ipv4_mapped is not None:  # an IPv4 client of a dual-stack listener
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, 64), strict=False))


class _Bucket:
    """A token bucket: ``rate`` a second, ``burst`` at most; spending may take it below 0."""

    __slots__ = ("level", "at")

    def __init__(self, burst: float, now: float) -> None:
        self.level = burst
        self.at = now

    def left(self, now: float, rate: float, burst: float) -> float:
        self.level = min(burst, self.level + (now - self.at) * rate)
        self.at = now
        return self.level


def _remember(kept: dict[str, Any], key: str, value: Any) -> None:
    """``value`` under ``key`` as the newest, the oldest forgotten past `ADDRESSES`."""
    kept.pop(key, None)
    kept[key] = value
    if len(kept) > ADDRESSES:
        del kept[next(iter(kept))]


class Gate:
    """One server's bounds on connections still in their websocket upgrade.

    Past the cap, an address holding over half the places gives up its oldest to another
    address's newcomer; otherwise the oldest that has had `SPARE` seconds, of the address
    holding the most, is closed to make room (an honest client finishes its upgrade in one
    round trip, and one with the token leaves the gate at once); otherwise the newcomer is.
    So half-open connections, however fast they come, give way to the clients that finish,
    and one address's never to another's.

    A wrong token is answered late (`AUTH_DELAY`): closing its connection early would tell its
    client sooner. Such connections wait apart (`refused`), not in the gate, so a flood of
    wrong tokens holds no place an honest client needs; past `REFUSED`, the oldest is closed
    at once, with no answer.

    Even so each costs a read, a parse and its timers, more than a client's connect costs it,
    and a listener that falls behind drops every client's SYN alike (each then waits a second
    for its retransmit). So an address that gave a wrong token, unless it presented the right
    one lately, may open `WRONG_TOKENS_PER_ADDRESS` connections a second; the rest are closed
    at the accept, before anything is read.

    On a TLS listener every connection begins a handshake, and its signature is most of what
    a flood of canned ClientHellos costs the server. So a connection is let in only within its
    address's rate and, unless the address presented the right token lately, while handshakes
    have taken less than their share of the owner's time (`spent`); otherwise it is closed at
    the accept, before anything is read or computed. All are token buckets, a few numbers per
    address, `ADDRESSES` remembered at most.
    """

    SPARE = 0.05

    def __init__(self, config: Config | None, tls: bool = False) -> None:
        """``tls``: the listener's connections begin with a TLS handshake."""
        config = config or Config()
        self.tls = tls
        self.timeout = config.handshake_timeout
        self.send_timeout = config.send_timeout
        self.limit = config.max_upgrading
        self.upgrading: dict[WsPeer, float] = {}  # oldest first: peer -> when it arrived
        self.refused: dict[WsPeer, None] = {}  # wrong tokens awaiting their answer, oldest first
        self.draining = False  # the server is draining: /readyz and upgrades answer 503
        self._addresses: dict[str, _Bucket] = {}  # oldest first
        self._wrong: dict[str, _Bucket] = {}  # address -> its wrong tokens' bucket, oldest first
        self._proven: dict[str, float] = {}  # address -> when it last presented the token
        self._time: _Bucket | None = None  # the owner's time left for handshakes, in seconds
        self._refusals = 0  # connections refused at the accept since the last line said so
        self._quiet_until = 0.0

    def admit(self, now: float, host: str | None = None) -> bool:
        """Whether a new connection (from ``host``, if known) may begin its upgrade; if not,
        close it at once."""
        if host is not None and self._wrong and not self._guessing_slowly(host, now):
            return False
        if self.tls and host is not None and not self._handshake(host, now):
            return False
        if len(self.upgrading) < self.limit:
            return True
        victim = self._victim(now, None if host is None else _source(host))
        if victim is None:
            return False
        victim.time_out(f"{self.limit} connections in their upgrade")
        return True

    def _victim(self, now: float, newcomer: str | None) -> WsPeer | None:
        """The connection that makes room, or None (the newcomer is closed). An address that
        holds over half the places gives up its oldest to another's newcomer, however young
        (a flood from one address closes its own connections, never a client's); else, and
        to a newcomer of its own, the oldest that has had `SPARE` seconds, of the address
        holding the most."""
        held = Counter(peer.source for peer in self.upgrading)
        hog, most = held.most_common(1)[0]
        if most > self.limit // 2 and hog != newcomer:
            return next(peer for peer in self.upgrading if peer.source == hog)
        chosen: WsPeer | None = None
        for peer, since in self.upgrading.items():  # oldest first
            if now - since < self.SPARE:
                break  # and every later one is younger
            if chosen is None or held[peer.source] > held[chosen.source]:
                chosen = peer
        return chosen

    def refuse(self, peer: WsPeer, now: float) -> None:
        """``peer``'s wrong token waits for its answer apart, the oldest past `REFUSED` closed;
        its address is counted from now on (`admit`)."""
        if peer.source not in self._wrong:  # this one was let in uncounted
            bucket = _Bucket(WRONG_TOKEN_BURST - 1, now)
            _remember(self._wrong, peer.source, bucket)
        self.upgrading.pop(peer, None)
        self.refused[peer] = None
        if len(self.refused) > REFUSED:
            next(iter(self.refused)).cut_short()

    def _guessing_slowly(self, host: str, now: float) -> bool:
        """Whether a connection from ``host`` may be read: it gave no wrong token, or the right
        one lately, or it is within its rate. Each connection of an address that gave a wrong
        token is counted when it is let in, not when its token is read: a batch accepted at
        once takes no more than what the rate left, and the address's client with the right
        token waits 1/rate at most."""
        source = _source(host)
        bucket = self._wrong.get(source)
        if bucket is None or now - self._proven.get(source, -PROVEN_FOR) < PROVEN_FOR:
            return True
        if bucket.left(now, WRONG_TOKENS_PER_ADDRESS, WRONG_TOKEN_BURST) >= 1:
            bucket.level -= 1
            return True
        self._refused(host, f"more than {WRONG_TOKENS_PER_ADDRESS:g} wrong tokens a second "
                            f"from {source}", "wrong token rate", now)
        return False

    def _handshake(self, host: str, now: float) -> bool:
        """Whether a TLS handshake from ``host`` may begin now; its peer reports its cost."""
        source = _source(host)
        bucket = self._addresses.get(source) or _Bucket(HANDSHAKE_BURST, now)
        _remember(self._addresses, source, bucket)
        why = None
        if bucket.left(now, HANDSHAKES_PER_ADDRESS, HANDSHAKE_BURST) < 1:
            why = f"more than {HANDSHAKES_PER_ADDRESS:g} a second from {source}"
        elif now - self._proven.get(source, -PROVEN_FOR) >= PROVEN_FOR:
            if self._time is None:
                self._time = _Bucket(HANDSHAKE_TIME_BURST, now)
            if self._time.left(now, HANDSHAKE_SHARE, HANDSHAKE_TIME_BURST) <= 0:
                why = f"handshakes took {HANDSHAKE_SHARE:.0%} of the server's time"
        if why is None:
            bucket.level -= 1
            return True
        self._refused(host, why, "handshake rate", now)
        return False

    def _refused(self, host: str, why: str, refused: str, now: float) -> None:
        """A connection from ``host`` is closed at the accept: said once in `QUIET` seconds."""
        self._refusals += 1
        if now >= self._quiet_until:  # a line per refusal would cost more than the refusal
            log.warning("connection from %s refused at the accept: %s (%d refused since the "
                        "last such line)", host, why, self._refusals,
                        extra={"fields": {"peer": host, "refused": refused,
                                          "why": why, "count": self._refusals}})
            self._refusals = 0
            self._quiet_until = now + QUIET

    def spent(self, seconds: float, now: float) -> None:
        """A handshake's step took ``seconds`` of the owner's time."""
        if self._time is None:
            self._time = _Bucket(HANDSHAKE_TIME_BURST, now)
        self._time.left(now, HANDSHAKE_SHARE, HANDSHAKE_TIME_BURST)
        self._time.level -= seconds

    def proven(self, label: str, now: float) -> None:
        """A connection from ``label`` (``IP:PORT``) presented the right token (or none was
        needed)."""
        _remember(self._proven, _source(label.rsplit(":", 1)[0]), now)


class Peer:
    """The part every connection shares: its handle, and telling the core what happened."""

    def __init__(self, connections: Connections, write: Write,
                 hang_up: Callable[[], None]) -> None:
        self.connections = connections
        self.conn = connections.next_conn()
        self.write = write
        self.hang_up = hang_up
        self.state = PeerState.CONNECTING
        self.stuck = False  # blocked: the send buffer is above HIGH_WATER
        self._held: deque[bytes | str] = deque()  # messages read while stuck, not yet handled
        self.label = ""
        # The core's answer to `initialize` last logged, and the session it gave: the log line
        # for a connection names its session, which only that answer says (see `_greeted`).
        self._greeting: Greeting | None = None
        self._session: str | None = None

    def _close_starts(self) -> None:
        self.state = CLOSED.get(self.state, self.state)

    def opened(self, label: str) -> None:
        if self.state not in OPENED:
            return  # told already, or gone: the core hears of a connection once
        self.state = OPENED[self.state]
        self.label = label
        log.debug("connection %d opened: %s", self.conn, label)
        self.connections.add(self)
        address = label.removeprefix("websocket ").rpartition(":")[0]  # of "IP:PORT"; stdio: ""
        self.connections.feed(ConnectionOpened(conn=self.conn, session_id=_uuid4(),
                                               label=label, peer=address))

    def lost(self) -> None:
        self._held.clear()
        known = self.state.known
        self.state = PeerState.LOST
        if known:
            log.debug("connection %d closed: %s, session %s", self.conn, self.label,
                      self._session or "none")
            self.connections.remove(self.conn)
            self.connections.feed(ConnectionClosed(conn=self.conn))
        # The connection's functions hold the connection, which holds this peer: let go, so
        # that both (and the websocket's buffers) are freed now rather than at a full collection.
        self.write = _discard
        self.hang_up = _nothing

    def blocked(self) -> None:
        self.stuck = True
        if self.state.known:
            self.connections.feed(SendBlocked(conn=self.conn))

    def drained(self) -> None:
        self.stuck = False
        if self.state.known:
            self.connections.feed(SendDrained(conn=self.conn))
            if self._held:
                # Not now: this may run while the driver is busy, where each message would
                # only be queued, and every answer made before the first could block again.
                loop = self.connections.loop
                loop.call_at(loop.now(), self._release)

    def _release(self) -> None:
        while self._held and not self.stuck and self.state.known:
            self._handle(self._held.popleft())

    def message(self, data: bytes | str) -> None:
        if self.stuck or self._held:
            self._held.append(data)  # handled once the client has read its answers, in order
            return
        self._handle(data)

    def _handle(self, data: bytes | str) -> None:
        # A frame read in the same batch as one that got the connection closed comes after the
        # close: the core has forgotten the connection, and the frame is moot.
        if self.state.known:
            self.connections.feed(MessageReceived(conn=self.conn, data=data))

    def _greeted(self) -> None:
        """Log the core's answer to `initialize`, once it has given one: the connection's one
        line at INFO. Asked at each send until a session is attached, since the answer is a
        send; the core says what it answered (`ServerCore.greeting`), nothing is parsed here."""
        greeting = self.connections.greeting(self.conn)
        if greeting is None or greeting is self._greeting:
            return
        self._greeting = greeting
        if greeting.session_id is None:
            log.info("connection %d from %s: initialize refused: %s", self.conn, self.label,
                     greeting.refused, extra={"fields": {"conn": self.conn, "peer": self.label,
                                                         "refused": greeting.refused}})
            return
        self._session = greeting.session_id
        how = "resumed" if greeting.resumed else "new"
        log.info("connection %d from %s: %s session %s", self.conn, self.label, how,
                 greeting.session_id, extra={"fields": {
                     "conn": self.conn, "peer": self.label, "session": greeting.session_id,
                     "resumed": greeting.resumed}})

    # -- what the driver asks of it -------------------------------------------------------------

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def close(self, code: int, reason: str) -> None:
        raise NotImplementedError


class WsPeer(Peer):
    def __init__(
        self, connections: Connections, write: Write, hang_up: Callable[[], None], token: Token,
        gate: Gate, label: str, abort: Callable[[], None], ping_interval: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``abort``: close now, dropping whatever is queued. Once upgraded, the peer pings
        every ``ping_interval`` seconds on the server's loop until the connection closes.

        With ``tls`` the connection's bytes are TLS records: what is read is decrypted before
        the upgrade sees it, what is written encrypted on its way (see `_tls`); ``write`` and
        ``hang_up`` then move records, and the rest of the peer never sees them."""
        self._tls: ServerTls | None = None
        self._raw_write, self._raw_hang_up = write, hang_up
        if tls is not None:
            from ._tls import ServerTls  # here: ssl is loaded only for a TLS listener

            self._tls = ServerTls(tls)
            write, hang_up = self._write_tls, self._hang_up_tls
        super().__init__(connections, write, hang_up)
        self._abort = abort
        self._ping_interval = ping_interval
        self._next_ping: Callable[[], None] | None = None  # cancels the scheduled ping
        self._send_timeout = gate.send_timeout
        self._stuck_since: Callable[[], None] | None = None  # cancels the send timeout
        self._unanswered = 0  # our pings since the last pong
        self._socket = ServerSocket(token=token, metrics=connections.metrics,
                                    draining=lambda: gate.draining)
        self._label = label
        self.source = _source(label.rsplit(":", 1)[0])  # what the gate counts it under
        self._gate: Gate | None = gate  # until the upgrade is done or the connection gone
        loop = connections.loop
        gate.upgrading[self] = loop.now()
        self._too_slow = loop.call_at(loop.now() + gate.timeout,
                                      lambda: self.time_out(f"no upgrade in {gate.timeout} s"))

    def _upgraded(self) -> None:
        """Out of the upgrade, one way or another: the connection no longer counts as one."""
        if self._gate is not None:
            self._gate.upgrading.pop(self, None)
            self._gate.refused.pop(self, None)
            self._gate = None
            self._too_slow()

    def time_out(self, why: str) -> None:
        """Close a connection still in its upgrade."""
        if self._gate is not None and self.state.writes:
            log.warning("connection from %s refused: %s", self._label, why,
                        extra={"fields": {"peer": self._label, "refused": why}})
            self._upgraded()
            self._close_starts()
            self.hang_up()

    def cut_short(self) -> None:
        """Close a connection whose wrong token waits for its answer, at once and with none."""
        if self._gate is not None and self.state.writes:
            log.debug("connection from %s closed: too many wrong tokens waiting", self._label)
            self._upgraded()
            self._close_starts()
            self.hang_up()

    def opened(self, label: str) -> None:
        if self._gate is not None:
            self._gate.proven(self._label, self.connections.loop.now())
        self._upgraded()
        super().opened(label)
        if self.state.known:  # not when lost during its own upgrade (its 101's write failed)
            self._schedule_ping()

    def _schedule_ping(self) -> None:
        loop = self.connections.loop
        self._next_ping = loop.call_at(loop.now() + self._ping_interval, self._ping_due)

    def _ping_due(self) -> None:
        self._next_ping = None
        self.ping()  # which may close the connection: a client that stopped answering
        if self.state is PeerState.OPEN:
            self._schedule_ping()

    def received(self, data: bytes, label: str) -> None:
        """Bytes from the socket (b"" at EOF). ``label`` names the peer in messages."""
        if self._tls is None:
            self._received(data, label)
            return
        if self._tls.handshaken or not data:
            got = self._tls.receive(data)
        else:
            gate = self._gate
            if gate is None:
                return  # timed out or gone: no handshake is owed
            began = time.thread_time()  # the owner's own time: what the others wait for
            got = self._tls.receive(data)
            gate.spent(time.thread_time() - began, self.connections.loop.now())
        if got.send:
            self._raw_write((got.send,))
        if got.failed is not None:
            # A client that does not speak TLS or does not trust the certificate: it cannot
            # be answered (but a plain HTTP one can be told why), and nothing went wrong here.
            log.info("connection from %s refused: TLS handshake failed: %s", label, got.failed,
                     extra={"fields": {"peer": label, "refused": "tls", "why": got.failed}})
            if got.plain_http:
                self._raw_write((plain_http_refusal(),))
            self._hang_up_now()
            return
        if not self._tls.handshaken and got.eof:
            log.debug("connection from %s closed during its TLS handshake", label)
            self._hang_up_now()
            return
        if got.plain:
            self._received(got.plain, label)
        if got.eof:
            self._received(b"", label)

    def _hang_up_now(self) -> None:
        """Hang up below TLS: what is queued goes, no close_notify follows it."""
        if self.state.writes:
            self._close_starts()
            self._raw_hang_up()

    def _write_tls(self, parts: Sequence[bytes]) -> None:
        assert self._tls is not None
        records = self._tls.encrypt(parts)
        if records:
            self._raw_write((records,))

    def _hang_up_tls(self) -> None:
        assert self._tls is not None
        notify = self._tls.close()
        if notify:
            self._raw_write((notify,))
        self._raw_hang_up()

    def _received(self, data: bytes, label: str) -> None:
        got = self._socket.receive(data)
        if got.pongs:
            self._unanswered = 0
        if got.refused is not None:
            log.warning("connection from %s refused: %s", label, got.refused,
                        extra={"fields": {"peer": label, "refused": got.refused}})
        if got.delayed:
            loop = self.connections.loop
            if self._gate is not None:
                self._gate.refuse(self, loop.now())
            loop.call_at(loop.now() + AUTH_DELAY, lambda: self._refuse_late(bytes(got.send)))
            return
        if got.send:
            self.write((bytes(got.send),))
        if got.opened:
            self.opened(f"websocket {label}")
        for message in got.messages:
            self.message(message)
        if got.closed:
            self._close_starts()
            self.hang_up()

    def lost(self) -> None:
        self._close_starts()  # nothing more may be written, such as a refusal still to come
        self._upgraded()
        self._unstuck()
        if self._next_ping is not None:
            self._next_ping()
            self._next_ping = None
        super().lost()
        # The connection's, as write and hang_up.
        self._abort = self._raw_hang_up = _nothing
        self._raw_write = _discard

    def blocked(self) -> None:
        super().blocked()
        if self.state.known and self._stuck_since is None:
            loop = self.connections.loop
            self._stuck_since = loop.call_at(loop.now() + self._send_timeout, self._stuck_too_long)

    def drained(self) -> None:
        self._unstuck()
        self._unanswered = 0  # a pong may still be unread behind the requests held back
        super().drained()

    def _unstuck(self) -> None:
        if self._stuck_since is not None:
            self._stuck_since()
            self._stuck_since = None

    def _stuck_too_long(self) -> None:
        self._stuck_since = None
        if self.state.known and self.stuck:
            log.warning("connection %d from %s closed: nothing read for %s s", self.conn,
                        self._label, self._send_timeout,
                        extra={"fields": {"conn": self.conn, "peer": self._label,
                                          "closed": "send timeout"}})
            self._close_starts()
            self._abort()

    def _refuse_late(self, answer: bytes) -> None:
        if self.state.writes:
            self._upgraded()
            self._close_starts()
            self.write((answer,))
            self.hang_up()

    def send(self, data: bytes) -> None:
        if self._session is None:
            self._greeted()
        if self.state.writes:
            self.write((text_frame_header(len(data)), data))

    def close(self, code: int, reason: str) -> None:
        if self.state.writes:
            self._close_starts()
            self.write((self._socket.close(code, reason),))
            self.hang_up()

    def ping(self) -> None:
        # While blocked nothing is read, pongs included: the send timeout covers that case.
        if self.state is not PeerState.OPEN or self.stuck:
            return
        if self._unanswered >= MISSED_PONGS:
            log.warning("connection %d from %s closed: %d pings unanswered", self.conn,
                        self._label, self._unanswered,
                        extra={"fields": {"conn": self.conn, "peer": self._label,
                                          "closed": "no pong"}})
            self._close_starts()
            self._abort()
            return
        self._unanswered += 1
        self.write((self._socket.ping(),))


class StdioPeer(Peer):
    """``--listen stdio``: one connection, newline-delimited JSON. Blank lines are ignored."""

    def __init__(self, connections: Connections, write: Write,
                 hang_up: Callable[[], None]) -> None:
        super().__init__(connections, write, hang_up)
        self._partial = bytearray()

    def received(self, data: bytes) -> None:
        if not data:
            if self._partial.strip():
                self.message(bytes(self._partial))
            self._partial.clear()
            self.lost()
            return
        self._partial += data
        *lines, rest = self._partial.split(b"\n")
        self._partial = bytearray(rest)
        for line in lines:
            if line.strip():
                self.message(bytes(line))

    def send(self, data: bytes) -> None:
        if self._session is None:
            self._greeted()
        if self.state.writes:
            self.write((data, b"\n"))

    def close(self, code: int, reason: str) -> None:
        self._close_starts()
        self.hang_up()


def _uuid4() -> str:
    """A random (version 4) UUID as text, as ``str(uuid.uuid4())`` writes it, without
    importing `uuid` (and its C part) at every start."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # the version, 4
    raw[8] = raw[8] & 0x3F | 0x80  # the variant, RFC 4122's
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
