"""The asyncio adapter: the core driven from one event loop, over websockets or stdio.

Embed it with `serve` (``await serve(listen="ws://127.0.0.1:0", ready=print)``) or run it with
``execproto serve``. Every callback runs on the loop's thread, which owns the core.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import uuid
from collections.abc import Callable
from typing import Any

from execproto import (
    Config,
    ConnectionClosed,
    ConnectionOpened,
    MessageReceived,
    SendBlocked,
    SendDrained,
    ServerCore,
    Shutdown,
)
from execproto._trace import Recorder

from ._driver import Driver
from ._listen import Listen
from ._ws import ServerSocket

log = logging.getLogger("execproto")

PING_INTERVAL = 30.0
# Above this many unsent bytes on a connection, the session's processes stop being read.
HIGH_WATER = 4 << 20
LOW_WATER = 1 << 20


class _Loop:
    """`_driver.Loop` over an asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.peers: dict[int, _Peer] = {}

    def now(self) -> float:
        return self._loop.time()

    def watch_read(self, fd: int, callback: Callable[[], None]) -> None:
        self._loop.add_reader(fd, callback)

    def watch_write(self, fd: int, callback: Callable[[], None]) -> None:
        self._loop.add_writer(fd, callback)

    def unwatch_read(self, fd: int) -> None:
        self._loop.remove_reader(fd)

    def unwatch_write(self, fd: int) -> None:
        self._loop.remove_writer(fd)

    def call_at(self, when: float, callback: Callable[[], None]) -> Callable[[], None]:
        return self._loop.call_at(when, callback).cancel

    def run_blocking(self, work: Callable[[], Any], done: Callable[[Any], None]) -> None:
        future = self._loop.run_in_executor(None, work)
        future.add_done_callback(lambda f: done(f.exception() or f.result()))

    def send(self, conn: int, header: bytes, data: bytes) -> None:
        peer = self.peers.get(conn)
        if peer is not None:
            peer.send(header, data)

    def close_connection(self, conn: int, code: int, reason: str) -> None:
        peer = self.peers.get(conn)
        if peer is not None:
            peer.close(code, reason)


class _Peer:
    """One client connection, websocket or stdio, as the driver sees it."""

    def send(self, header: bytes, data: bytes) -> None:
        raise NotImplementedError

    def close(self, code: int, reason: str) -> None:
        raise NotImplementedError


class _WsPeer(asyncio.Protocol, _Peer):
    def __init__(self, server: _Server) -> None:
        self._server = server
        self._socket = ServerSocket(token=server.token)
        self._transport: asyncio.Transport | None = None
        self.conn = server.next_conn()
        self._open = False
        self._ping: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)

    def data_received(self, data: bytes) -> None:
        self._receive(data)

    def eof_received(self) -> bool:
        self._receive(b"")
        return False

    def _receive(self, data: bytes) -> None:
        assert self._transport is not None
        got = self._socket.receive(data)
        if got.send:
            self._transport.write(bytes(got.send))
        if got.opened:
            self._open = True
            self._server.loop.peers[self.conn] = self
            peer = self._transport.get_extra_info("peername") or ("?", 0)
            self._server.driver.feed(
                ConnectionOpened(
                    conn=self.conn,
                    session_id=str(uuid.uuid4()),
                    label=f"websocket {peer[0]}:{peer[1]}",
                )
            )
            self._schedule_ping()
        for message in got.messages:
            self._server.driver.feed(MessageReceived(conn=self.conn, data=message))
        if got.closed:
            self._transport.close()

    def _schedule_ping(self) -> None:
        interval = self._server.ping_interval
        self._ping = asyncio.get_running_loop().call_later(interval, self._send_ping)

    def _send_ping(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(self._socket.ping())
            self._schedule_ping()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ping is not None:
            self._ping.cancel()
        if self._open:
            self._open = False
            self._server.loop.peers.pop(self.conn, None)
            self._server.driver.feed(ConnectionClosed(conn=self.conn))

    def pause_writing(self) -> None:
        if self._open:
            self._server.driver.feed(SendBlocked(conn=self.conn))

    def resume_writing(self) -> None:
        if self._open:
            self._server.driver.feed(SendDrained(conn=self.conn))

    def send(self, header: bytes, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.writelines((header, data))

    def close(self, code: int, reason: str) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(self._socket.close(code, reason))
            self._transport.close()


class _StdioPeer(_Peer):
    """The one connection of ``--listen stdio``: newline-delimited JSON on stdin and stdout."""

    def __init__(self, server: _Server, writer: asyncio.StreamWriter) -> None:
        self._server = server
        self._writer = writer
        self.conn = server.next_conn()

    def send(self, header: bytes, data: bytes) -> None:
        if not self._writer.is_closing():
            self._writer.writelines((data, b"\n"))

    def close(self, code: int, reason: str) -> None:
        self._writer.close()

    async def run(self, reader: asyncio.StreamReader) -> None:
        driver = self._server.driver
        self._server.loop.peers[self.conn] = self
        driver.feed(ConnectionOpened(conn=self.conn, session_id=str(uuid.uuid4()), label="stdio"))
        try:
            while not self._writer.is_closing():
                line = await reader.readline()
                if not line:
                    break
                if line.strip():
                    driver.feed(MessageReceived(conn=self.conn, data=line))
                await self._writer.drain()
        finally:
            self._server.loop.peers.pop(self.conn, None)
            driver.feed(ConnectionClosed(conn=self.conn))


class _Server:
    def __init__(
        self, core: ServerCore | Recorder, token: str | None, ping_interval: float
    ) -> None:
        self.loop = _Loop(asyncio.get_running_loop())
        self.driver = Driver(core, self.loop)
        self.token = token
        self.ping_interval = ping_interval
        self._conns = 0

    def next_conn(self) -> int:
        self._conns += 1
        return self._conns

    async def stop(self) -> None:
        """Terminate every process through the core and wait until each is finalized."""
        idle = asyncio.Event()
        self.driver.on_idle = idle.set
        self.driver.feed(Shutdown())
        await idle.wait()


async def serve(
    listen: str = "ws://127.0.0.1:0",
    *,
    config: Config | None = None,
    token: str | None = None,
    trace: Callable[[str], None] | None = None,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    ping_interval: float = PING_INTERVAL,
) -> None:
    """Serve until ``stop`` is set (or, for stdio, until stdin ends), then shut down cleanly.

    ``ready`` gets the bound address (``ws://IP:PORT``) once the server accepts connections.
    Every process the server started is terminated and finalized before this returns.
    """
    from ._host import this_host

    where = Listen.parse(listen)
    core: ServerCore | Recorder = ServerCore(config, this_host())
    if trace is not None:
        core = Recorder(core, trace)  # type: ignore[arg-type]
    server = _Server(core, token, ping_interval)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    if where.stdio:
        reader = asyncio.StreamReader(limit=64 << 20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, sys.stdout
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        peer = _StdioPeer(server, writer)
        if ready is not None:
            ready("stdio")
        session = asyncio.ensure_future(peer.run(reader))
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait({session, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        await server.stop()
        return
    listener = await loop.create_server(lambda: _WsPeer(server), where.host, where.port)
    host, port = listener.sockets[0].getsockname()[:2]
    if ready is not None:
        ready(f"ws://{host}:{port}" if ":" not in host else f"ws://[{host}]:{port}")
    try:
        await stop.wait()
    finally:
        listener.close()
        await server.stop()


def run(listen: str, **options: Any) -> None:
    """Serve in a fresh event loop until SIGTERM or SIGINT (the ``execproto serve`` command)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(listen, stop=stop, **options)

    asyncio.run(main())
