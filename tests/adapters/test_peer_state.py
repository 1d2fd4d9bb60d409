"""A peer's state (`PeerState`) and what the core hears of a connection, whatever order an
adapter reports things in: the core hears of a connection at most once, of its close exactly
once if it heard of it, and of nothing of it before or after; the registry forgets it.

The peers here are real; what they are given is a `Connections` whose ``feed`` records, or a
real `Driver`'s, over a loop that only keeps time (no I/O is involved in any of it).
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from execproto import (
    Config,
    ConnectionClosed,
    ConnectionOpened,
    Event,
    MessageReceived,
    SendBlocked,
    SendDrained,
    ServerCore,
)
from execproto.adapters._files._fs import Files
from execproto.adapters._serving._driver import Driver
from execproto.adapters._wire._connections import Connections
from execproto.adapters._wire._gate import Gate
from execproto.adapters._wire._peer import CLOSED, OPENED, PeerState, WsPeer
from execproto.adapters._wire._stdio import StdioPeer


class Clock:
    """The part of a `Loop` a peer uses: the time, and timers that never fire here."""

    def now(self) -> float:
        return 0.0

    def call_at(self, when: float, callback: Callable[[], None]) -> Callable[[], None]:
        return lambda: None


def stdio_peer() -> tuple[StdioPeer, Connections, list[Event], list[bytes]]:
    fed: list[Event] = []
    written: list[bytes] = []
    core = ServerCore()
    connections = Connections(Clock(), fed.append, lambda: core)  # type: ignore[arg-type]
    peer = StdioPeer(connections, lambda parts: written.extend(parts), lambda: None)
    return peer, connections, fed, written


def test_every_state_has_its_place_in_each_table() -> None:
    # Opening: a refusal that raced its own upgrade is known to the core, and closing.
    assert {s: OPENED.get(s, s) for s in PeerState} == {
        PeerState.CONNECTING: PeerState.OPEN, PeerState.OPEN: PeerState.OPEN,
        PeerState.CLOSING: PeerState.CLOSING, PeerState.REFUSING: PeerState.CLOSING,
        PeerState.LOST: PeerState.LOST}
    # Starting to close: only the two states that may still write move.
    assert {s: CLOSED.get(s, s) for s in PeerState} == {
        PeerState.CONNECTING: PeerState.REFUSING, PeerState.OPEN: PeerState.CLOSING,
        PeerState.CLOSING: PeerState.CLOSING, PeerState.REFUSING: PeerState.REFUSING,
        PeerState.LOST: PeerState.LOST}
    # The core knows a connection from its opening to its loss; only a close is written once
    # closing has begun.
    assert {s for s in PeerState if s.known} == {PeerState.OPEN, PeerState.CLOSING}
    assert {s for s in PeerState if s.writes} == {PeerState.CONNECTING, PeerState.OPEN}


def test_a_stdio_connection_from_open_to_lost() -> None:
    peer, connections, fed, written = stdio_peer()
    assert peer.state is PeerState.CONNECTING and len(connections) == 0
    peer.opened("stdio")
    assert peer.state is PeerState.OPEN and len(connections) == 1
    peer.send(b'{"id":1}')
    peer.close(1000, "bye")
    assert peer.state is PeerState.CLOSING
    peer.send(b'{"id":2}')  # nothing is written once closing
    assert written == [b'{"id":1}', b"\n"]
    peer.received(b"")
    assert peer.state is PeerState.LOST and len(connections) == 0
    assert [type(e) for e in fed] == [ConnectionOpened, ConnectionClosed]


def test_a_connection_lost_before_it_opened_is_never_told() -> None:
    peer, connections, fed, _ = stdio_peer()
    peer.close(1000, "refused")
    assert peer.state is PeerState.REFUSING
    peer.lost()
    assert peer.state is PeerState.LOST and fed == [] and len(connections) == 0


HAPPENINGS = ("opened", "close", "message", "blocked", "drained", "lost")


def happen(peer: StdioPeer, what: str) -> None:
    {"opened": lambda: peer.opened("stdio"), "close": lambda: peer.close(1000, ""),
     "message": lambda: peer.message(b"{}"), "blocked": peer.blocked,
     "drained": peer.drained, "lost": peer.lost}[what]()


@settings(derandomize=True, max_examples=300, deadline=None)  # the same cases on every run
@given(st.lists(st.sampled_from(HAPPENINGS), max_size=12))
def test_the_core_hears_of_a_connection_in_order_whatever_happens(order: list[str]) -> None:
    peer, connections, fed, _ = stdio_peer()
    for what in [*order, "lost"]:  # every connection is lost in the end
        happen(peer, what)
    kinds = [type(event) for event in fed]
    assert kinds.count(ConnectionOpened) == kinds.count(ConnectionClosed) <= 1
    if kinds:
        assert kinds[0] is ConnectionOpened and kinds[-1] is ConnectionClosed
        assert set(kinds[1:-1]) <= {MessageReceived, SendBlocked, SendDrained}
    assert peer.state is PeerState.LOST and len(connections) == 0
    # Nothing more is heard of it afterwards.
    for what in HAPPENINGS:
        happen(peer, what)
    assert [type(event) for event in fed] == kinds


class StillLoop(Clock):
    """A whole `Loop` on which nothing ever fires: enough to build a `Driver` and feed it."""

    def watch_read(self, fd: int, callback: Callable[[], None]) -> None: ...
    def watch_write(self, fd: int, callback: Callable[[], None]) -> None: ...
    def unwatch_read(self, fd: int) -> None: ...
    def unwatch_write(self, fd: int) -> None: ...
    def run_blocking(self, work: Callable[[], Any], done: Callable[[Any], None]) -> None: ...
    def post(self, call: Callable[[], None]) -> None: ...


class FailingFiles(Files):
    """Files whose close fails, as ``close(2)`` may on a network file system (EIO)."""

    def close_connection(self, conn: int) -> None:
        raise OSError(errno.EIO, "close failed")


def test_the_core_hears_a_close_even_when_closing_its_handles_fails() -> None:
    core = ServerCore()
    driver = Driver(core, StillLoop(), files=FailingFiles())
    try:
        first = StdioPeer(driver.connections, lambda parts: None, lambda: None)
        first.opened("stdio")
        assert core.gauges()["connections"] == 1
        first.lost()
        assert core.gauges()["connections"] == 0 and len(driver.connections) == 0
    finally:
        driver.close()


class Timers(Clock):
    """A clock that keeps the timers set on it (never fired), to see what is left pending."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []

    def call_at(self, when: float, callback: Callable[[], None]) -> Callable[[], None]:
        self.pending.append(callback)
        return lambda: self.pending.remove(callback)


UPGRADE = (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


def test_an_upgrade_whose_answer_loses_the_connection_leaves_nothing_behind() -> None:
    # Writing the 101 fails and the adapter reports the connection lost at once (asyncio does,
    # from inside the write): the upgrade then completes on a peer that is gone.
    fed: list[Event] = []
    core = ServerCore()
    timers = Timers()
    connections = Connections(timers, fed.append, lambda: core)  # type: ignore[arg-type]
    peer: WsPeer | None = None

    def write(parts: Sequence[bytes]) -> None:
        assert peer is not None
        peer.lost()

    peer = WsPeer(connections, write, lambda: None, None, Gate(Config()), "127.0.0.1:1",
                  abort=lambda: None, ping_interval=30)
    peer.received(UPGRADE, "127.0.0.1:1")
    assert peer.state is PeerState.LOST
    assert fed == [] and len(connections) == 0
    assert timers.pending == []  # no ping scheduled for it, no upgrade timeout left
