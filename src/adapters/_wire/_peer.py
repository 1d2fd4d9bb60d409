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

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from enum import Enum
from typing import TYPE_CHECKING

from execproto import (
    ConnectionClosed,
    ConnectionOpened,
    MessageReceived,
    SendBlocked,
    SendDrained,
)

from ._gate import Gate, source_of
from ._ws import ServerSocket, Token, plain_http_refusal, text_frame_header

if TYPE_CHECKING:
    import ssl

    from execproto import Greeting

    from ._connections import Connections
    from ._tls import ServerTls

Write = Callable[[Sequence[bytes]], None]

log = logging.getLogger("execproto")


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
        self.source = source_of(label.rsplit(":", 1)[0])  # what the gate counts it under
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


def _uuid4() -> str:
    """A random (version 4) UUID as text, as ``str(uuid.uuid4())`` writes it, without
    importing `uuid` (and its C part) at every start."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # the version, 4
    raw[8] = raw[8] & 0x3F | 0x80  # the variant, RFC 4122's
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
