"""The open connections, by the handle the core knows each by: what a peer is given in place of
the driver, and what the driver's connection actions go through.

A peer takes its handle here, registers once the core is told of it (`ConnectionOpened`) and
leaves when the core is told it is gone. Beyond that a peer needs the loop (its timers), ``feed``
(its events) and two read-only answers of the core's: how its ``initialize`` was answered (its
log line) and the metrics (``/metrics``). Both are asked of the core the driver holds at the
time: a trace whose file failed leaves the driver with the core inside it.

What other rooms keep for a connection (its fs handles, its queued calls) follows the events
the peer feeds: the owner hands a table of reactions, run here before each such event goes on.
Only a connection's events pass here, so the output path pays nothing for them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from execproto import CloseConnection, Event, Send, ServerCore
from execproto.actions import CloseCode

from . import _metrics

if TYPE_CHECKING:
    from execproto import Greeting
    from execproto.trace import Recorder

    from .._loop import Loop
    from ._peer import Peer

log = logging.getLogger("execproto")


class Connections:
    """The peers the core knows, and the few things each may ask of the server."""

    def __init__(self, loop: Loop, feed: Callable[[Event], None],
                 core: Callable[[], ServerCore | Recorder],
                 reactions: dict[type, Callable[[Any], None]] | None = None) -> None:
        self.loop = loop
        self._feed = feed
        self._core = core
        self._reactions = reactions or {}
        self._peers: dict[int, Peer] = {}
        self._last = 0
        # The core's actions carried out here (the driver's table takes these).
        self.run: dict[type, Callable[[Any], None]] = {
            Send: self.send, CloseConnection: self.close}

    def __len__(self) -> int:
        return len(self._peers)

    def next_conn(self) -> int:
        self._last += 1
        return self._last

    def add(self, peer: Peer) -> None:
        self._peers[peer.conn] = peer

    def remove(self, conn: int) -> None:
        self._peers.pop(conn, None)

    # -- what a peer asks -----------------------------------------------------------------------

    def feed(self, event: Event) -> None:
        """A connection's event, after the owner's reaction to it (if any). Even after the
        core failed, so a closed connection's handles are closed; and a reaction that raises
        (a close the OS refused, or a bug) is logged, so the core still hears of the event."""
        react = self._reactions.get(type(event))
        if react is not None:
            try:
                react(event)
            except Exception:
                log.exception("the reaction to %s failed", type(event).__name__)
        self._feed(event)

    def greeting(self, conn: int) -> Greeting | None:
        return self._core().greeting(conn)

    def metrics(self) -> bytes:
        return _metrics.render(self._core())

    # -- what the driver asks -------------------------------------------------------------------

    def send(self, action: Send) -> None:
        peer = self._peers.get(action.conn)
        if peer is not None:
            peer.send(action.data)

    def close(self, action: CloseConnection) -> None:
        peer = self._peers.get(action.conn)
        if peer is not None:
            peer.close(action.code, action.reason)

    def raised(self, action: Send | CloseConnection, why: str) -> None:
        """Carrying out ``action`` raised: the connection is closed, as its state is unknown."""
        peer = self._peers.get(action.conn)
        if peer is not None:
            peer.close(CloseCode.INTERNAL_ERROR, "internal error")

    def close_all(self) -> None:
        """The core failed: every connection is closed (1011)."""
        for peer in list(self._peers.values()):
            peer.close(CloseCode.INTERNAL_ERROR, "internal error")

    def stuck(self, conn: int) -> bool:
        """Whether ``conn`` is open and its send buffer past the high water."""
        peer = self._peers.get(conn)
        return peer is not None and peer.stuck
