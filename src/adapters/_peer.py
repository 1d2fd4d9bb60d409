"""One client connection as the driver sees it, whatever moves its bytes.

An adapter creates a peer per accepted connection and calls `received` with what it read,
`lost` when the connection is gone, and `blocked` / `drained` as its send buffer crosses its
water marks. The peer answers through the two functions it was given: ``write`` (queue bytes for
the peer) and ``hang_up`` (close the connection once what was queued is written).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from execproto import ConnectionClosed, ConnectionOpened, MessageReceived, SendBlocked, SendDrained

from ._ws import ServerSocket, text_frame_header

if TYPE_CHECKING:
    from ._driver import Driver

Write = Callable[[Sequence[bytes]], None]

# Send-buffer water marks shared by the adapters: above HIGH the session's processes stop being
# read; below LOW they start again.
HIGH_WATER = 4 << 20
LOW_WATER = 1 << 20


class Peer:
    """The part every connection shares: its handle, and telling the core what happened."""

    def __init__(self, driver: Driver, write: Write, hang_up: Callable[[], None]) -> None:
        self.driver = driver
        self.conn = driver.next_conn()
        self.write = write
        self.hang_up = hang_up
        self.open = False
        self.closing = False

    def opened(self, label: str) -> None:
        self.open = True
        self.driver.peers[self.conn] = self
        self.driver.feed(ConnectionOpened(conn=self.conn, session_id=str(uuid.uuid4()), label=label))

    def lost(self) -> None:
        if self.open:
            self.open = False
            self.driver.peers.pop(self.conn, None)
            self.driver.feed(ConnectionClosed(conn=self.conn))
            self.driver.files.close_connection(self.conn)  # its fs/open handles go with it

    def blocked(self) -> None:
        if self.open:
            self.driver.feed(SendBlocked(conn=self.conn))

    def drained(self) -> None:
        if self.open:
            self.driver.feed(SendDrained(conn=self.conn))

    def message(self, data: bytes | str) -> None:
        # A frame read in the same batch as one that got the connection closed comes after the
        # close: the core has forgotten the connection, and the frame is moot.
        if self.open:
            self.driver.feed(MessageReceived(conn=self.conn, data=data))

    # -- what the driver asks of it -------------------------------------------------------------

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def close(self, code: int, reason: str) -> None:
        raise NotImplementedError


class WsPeer(Peer):
    def __init__(
        self, driver: Driver, write: Write, hang_up: Callable[[], None], token: str | None
    ) -> None:
        super().__init__(driver, write, hang_up)
        self._socket = ServerSocket(token=token)

    def received(self, data: bytes, label: str) -> None:
        """Bytes from the socket (b"" at EOF). ``label`` names the peer in messages."""
        got = self._socket.receive(data)
        if got.send:
            self.write((bytes(got.send),))
        if got.opened:
            self.opened(f"websocket {label}")
        for message in got.messages:
            self.message(message)
        if got.closed:
            self.closing = True
            self.hang_up()

    def send(self, data: bytes) -> None:
        if not self.closing:
            self.write((text_frame_header(len(data)), data))

    def close(self, code: int, reason: str) -> None:
        if not self.closing:
            self.closing = True
            self.write((self._socket.close(code, reason),))
            self.hang_up()

    def ping(self) -> None:
        if self.open and not self.closing:
            self.write((self._socket.ping(),))


class StdioPeer(Peer):
    """``--listen stdio``: one connection, newline-delimited JSON. Blank lines are ignored."""

    def __init__(self, driver: Driver, write: Write, hang_up: Callable[[], None]) -> None:
        super().__init__(driver, write, hang_up)
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
        if not self.closing:
            self.write((data, b"\n"))

    def close(self, code: int, reason: str) -> None:
        self.closing = True
        self.hang_up()

