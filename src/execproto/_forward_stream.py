"""One forwarded stream's state, and the only code that writes it.

A stream is a TCP connection the adapter made for a client (``forward/open``), whose bytes
move both ways: the target's as ``forward/data`` notifications the client acknowledges, the
client's as ``forward/write`` calls answered once written. `ForwardStream` holds what its
rules rule, as `_lifecycle.ProcessLife` does for a process; the handlers in `_forwards` ask
it for a change and carry out what it answers. An input it cannot take in its phase is the
adapter's mistake (`LocalProtocolError`) or, for the client's inputs, refused by the handler
before it gets here.

    CONNECTING --connected--> OPEN --both sides at EOF, or a close, or a failure--> CLOSED
        \\--failed, refused, or closed------------------------------------------------/

In OPEN each direction ends on its own: the target's EOF (``forward/eof``) ends what the
client receives, the client's ``eof`` what the target does; once both have ended and every
write is written, the stream is done. The target's bytes in flight (sent, not acknowledged)
are bounded by `WINDOW_BYTES` and `WINDOW_CHUNKS`: at either bound the adapter stops reading
the target (`paused`), so a client that reads slowly holds the target back, not the memory.
"""

from __future__ import annotations

import enum
from collections import deque

from ._errors import LocalProtocolError
from ._jsonrpc import Id

# The target's bytes and chunks a client may have unacknowledged: past either, reading the
# target pauses until an ack makes room. One read is at most 64 KiB (the adapter's), so a
# window may be overrun by one read.
WINDOW_BYTES = 1 << 20
WINDOW_CHUNKS = 256


class Phase(enum.Enum):
    CONNECTING = "connecting"  # asked of the adapter; the open call waits for the answer
    OPEN = "open"  # connected: bytes move
    CLOSED = "closed"  # over: nothing more moves, and the handle is forgotten


class ForwardStream:
    """A stream's phase, its window and its writes waiting to be written."""

    __slots__ = ("stream", "stream_id", "conn", "session_id", "target", "open_id", "phase",
                 "seq", "unacked", "unacked_bytes", "their_eof", "our_eof", "writes",
                 "backlog", "paused", "route")

    def __init__(self, stream: int, stream_id: int, conn: int, session_id: str,
                 target: tuple[str, int], open_id: Id) -> None:
        self.stream = stream  # the core's handle, in actions and events
        self.stream_id = stream_id  # the client's name for it, on its connection
        self.conn = conn  # the connection that opened it, which its bytes go to
        self.session_id = session_id  # whose network it reaches
        self.target = target  # (host, port)
        self.open_id: Id | None = open_id  # the forward/open to answer, while CONNECTING
        self.route = "session"  # where the adapter was asked to connect: "session" or "host"
        self.phase = Phase.CONNECTING
        self.seq = 0  # the last forward/data's
        self.unacked: deque[tuple[int, int]] = deque()  # (seq, bytes) sent, not acknowledged
        self.unacked_bytes = 0
        self.their_eof = False  # the target sent EOF
        self.our_eof = False  # the client asked for EOF after its writes
        self.writes: deque[list[object]] = deque()  # [request id, bytes not yet written]
        self.backlog = 0  # bytes asked to be written and not yet written
        self.paused = False  # what the adapter was last told

    def _expect(self, *phases: Phase) -> None:
        if self.phase not in phases:
            raise LocalProtocolError(f"forward stream {self.stream} is {self.phase.value}")

    # -- the adapter's inputs ---------------------------------------------------------------------

    def rerouted(self, route: str) -> None:
        """The session's network was refused: try ``route`` instead."""
        self._expect(Phase.CONNECTING)
        self.route = route

    def connected(self) -> Id:
        """The target accepted: the open call's id, to answer."""
        self._expect(Phase.CONNECTING)
        self.phase = Phase.OPEN
        open_id, self.open_id = self.open_id, None
        assert open_id is not None
        return open_id

    def received(self, size: int) -> int:
        """``size`` bytes of the target's to send on: their seq."""
        self._expect(Phase.OPEN)
        if self.their_eof:
            raise LocalProtocolError(f"forward stream {self.stream}: data after its EOF")
        self.seq += 1
        self.unacked.append((self.seq, size))
        self.unacked_bytes += size
        return self.seq

    def ended(self) -> None:
        """The target sent EOF."""
        self._expect(Phase.OPEN)
        if self.their_eof:
            raise LocalProtocolError(f"forward stream {self.stream}: EOF twice")
        self.their_eof = True

    def written(self, size: int) -> list[Id]:
        """``size`` more bytes reached the target: the writes now whole, in order."""
        self._expect(Phase.OPEN)
        if size > self.backlog:
            raise LocalProtocolError(f"forward stream {self.stream}: {size} bytes written "
                                     f"of {self.backlog} asked")
        self.backlog -= size
        return self._settled(size)

    def _settled(self, size: int) -> list[Id]:
        done: list[Id] = []
        while self.writes:
            head = self.writes[0]
            remaining = head[1]
            assert isinstance(remaining, int)
            taken = min(size, remaining)
            head[1] = remaining - taken
            size -= taken
            if head[1]:
                break
            self.writes.popleft()
            done.append(head[0])  # type: ignore[arg-type]
        return done

    # -- the client's inputs --------------------------------------------------------------------

    def write(self, msg_id: Id, size: int, eof: bool) -> bool:
        """A write of ``size`` bytes (then EOF, if ``eof``) was asked; True when it is whole
        already (nothing of it to write, and nothing before it)."""
        self._expect(Phase.OPEN)
        if self.our_eof:
            raise LocalProtocolError(f"forward stream {self.stream}: a write after EOF")
        self.our_eof = eof
        if size == 0 and not self.writes:
            return True
        self.writes.append([msg_id, size])
        self.backlog += size
        return False

    def acked(self, seq: int) -> None:
        """The client has taken every chunk up to ``seq``."""
        while self.unacked and self.unacked[0][0] <= seq:
            self.unacked_bytes -= self.unacked.popleft()[1]

    def close(self) -> list[Id]:
        """Over: the calls still waiting (the open, or the writes), to fail."""
        waiting: list[Id] = [] if self.open_id is None else [self.open_id]
        waiting += [write[0] for write in self.writes]  # type: ignore[misc]
        self.phase = Phase.CLOSED
        self.open_id = None
        self.writes.clear()
        self.backlog = 0
        return waiting

    # -- what follows ---------------------------------------------------------------------------

    @property
    def window_full(self) -> bool:
        return self.unacked_bytes >= WINDOW_BYTES or len(self.unacked) >= WINDOW_CHUNKS

    def pause_change(self, blocked: bool) -> bool | None:
        """Whether reading the target must now pause (True) or resume (False), its
        connection being ``blocked`` or not; None: no change."""
        if self.phase is not Phase.OPEN or self.their_eof:
            return None
        want = blocked or self.window_full
        if want == self.paused:
            return None
        self.paused = want
        return want

    @property
    def done(self) -> bool:
        """Both directions have ended and every write is written."""
        return (self.phase is Phase.OPEN and self.their_eof and self.our_eof
                and not self.writes)
