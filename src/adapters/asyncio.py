"""The asyncio adapter: the core driven from one event loop, over websockets or stdio.

Embed it with `serve` (``await serve("ws://127.0.0.1:0", ready=print, stop=event)``) or run it
with ``execproto serve``. Every callback runs on the loop's thread, which owns the core.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._serving._failure import CoreFailed
from ._serving._serve import Options, Server
from ._wire._sockwriter import HIGH_WATER, LOW_WATER, SocketWriter

if TYPE_CHECKING:
    from ._wire._stdio import DrainingStdioPeer, StdioFds, StdioPeer

READ_SIZE = 256 << 10


class _Loop:
    """`_loop.Loop` over an asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

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

    def post(self, call: Callable[[], None]) -> None:
        try:
            self._loop.call_soon_threadsafe(call)
        except RuntimeError:
            pass  # the loop is closed: a late worker (an http call let go) has nobody to tell

    def run_blocking(self, work: Callable[[], Any], done: Callable[[Any], None]) -> None:
        future = self._loop.run_in_executor(None, work)
        future.add_done_callback(lambda f: done(f.exception() or f.result()))


class _WsConnection:
    """One websocket client on a raw non-blocking socket: read when readable, written through a
    `SocketWriter` (vectored sends, no copies), so no asyncio transport sits in between."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, label: str,
                 server: Server) -> None:
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._label = label
        self._closed = False
        self._hung_up = False
        self._writing = False
        self.peer = server.ws_peer(label, self._write, self._hang_up, abort=self._close)
        self._writer = SocketWriter(sock, blocked=self._blocked, drained=self._drained)
        loop.add_reader(self._fd, self._readable)

    def _readable(self) -> None:
        try:
            data = self._sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        self.peer.received(data, self._label)
        if not data:
            self._close()

    def _blocked(self) -> None:
        # Backpressure: read no more requests until the client has read its answers.
        if not self._closed:
            self._loop.remove_reader(self._fd)
        self.peer.blocked()

    def _drained(self) -> None:
        if not self._closed:
            self._loop.add_reader(self._fd, self._readable)
        self.peer.drained()

    def _write(self, parts: Sequence[bytes]) -> None:
        if self._closed:
            return
        self._writer.write(parts)
        self._after_write()

    def _writable(self) -> None:
        self._writer.flush()
        self._after_write()

    def _after_write(self) -> None:
        if self._writer.failed:
            self._close()
        elif self._writer.pending != self._writing:
            self._writing = self._writer.pending
            if self._writing:
                self._loop.add_writer(self._fd, self._writable)
            else:
                self._loop.remove_writer(self._fd)
        if self._hung_up and not self._writer.pending:
            # Not now: this may run inside `peer.received`, with more of its frames to come.
            self._loop.call_soon(self._close)

    def _hang_up(self) -> None:
        """Close once everything queued is written."""
        self._hung_up = True
        self._after_write()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.discard()
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self.peer.lost()


class _StdinProtocol(asyncio.Protocol):
    def __init__(self, peer: DrainingStdioPeer, done: asyncio.Event) -> None:
        self._peer = peer
        self._done = done

    def data_received(self, data: bytes) -> None:
        self._peer.received(data)

    def eof_received(self) -> bool:
        self._peer.end(self._ended)  # the server stops once all that was asked is answered
        return False

    def _ended(self) -> None:
        self._peer.received(b"")
        self._done.set()


class _StdoutProtocol(asyncio.Protocol):
    peer: StdioPeer | None = None
    stdin: asyncio.ReadTransport | None = None  # not read while stdout is blocked

    def __init__(self) -> None:
        self.closed = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        if self.stdin is not None:
            self.stdin.pause_reading()
        if self.peer is not None:
            self.peer.blocked()

    def resume_writing(self) -> None:
        if self.stdin is not None and not self.stdin.is_closing():
            self.stdin.resume_reading()
        if self.peer is not None:
            self.peer.drained()


async def serve(
    listen: str = "ws://127.0.0.1:0",
    options: Options | None = None,
    *,
    stop: asyncio.Event | None = None,
    drain: asyncio.Event | None = None,
    **keywords: Any,
) -> None:
    """Serve until ``stop`` is set (or, for stdio, until stdin ends), then shut down cleanly.
    Setting ``drain`` first stops gracefully: see `Server.drain` and ``drain_grace``.

    ``options`` (an `Options`), or its fields as keywords, say the rest. Every process the
    server started is terminated and finalized before this returns. If the core fails (a bug),
    ``stop`` is set, the server stops the same way with every process killed, and this raises
    `CoreFailed`.
    """
    options = Options.of(options, keywords)
    loop = asyncio.get_running_loop()
    stop = stop if stop is not None else asyncio.Event()
    server = Server(listen, options, _Loop(loop), stop.set)
    stdio: tuple[StdioFds, asyncio.WriteTransport, _StdoutProtocol] | None = None
    if server.where.stdio:
        from ._wire._stdio import DrainingStdioPeer, StdioFds  # not for a websocket server

        fds = StdioFds()  # regular files and /dev/null through a pipe and a thread
        out_transport, out_protocol = await loop.connect_write_pipe(
            _StdoutProtocol, os.fdopen(fds.stdout, "wb", buffering=0))
        stdio = fds, out_transport, out_protocol
        # stdout is written through a transport, which keeps the water marks itself.
        out_transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)
        peer = DrainingStdioPeer(server.driver.connections, out_transport.writelines, stop.set,
                                 reports_sent=False)
        out_protocol.peer = peer
        out_protocol.stdin, _ = await loop.connect_read_pipe(
            lambda: _StdinProtocol(peer, stop), os.fdopen(fds.stdin, "rb", buffering=0))
        peer.opened("stdio")
    else:
        server.listen(lambda sock, label: _WsConnection(loop, sock, label, server))
    server.announce()
    try:
        await _until_stopped(server, stop, drain or asyncio.Event())
    finally:
        idle = asyncio.Event()
        server.shut_down(idle.set)
        await idle.wait()
        if stdio is not None:
            await _flush_stdout(*stdio)
    server.finish()


async def _until_stopped(server: Server, stop: asyncio.Event, drain: asyncio.Event) -> None:
    stopped = asyncio.ensure_future(stop.wait())
    drained = asyncio.ensure_future(drain.wait())
    try:
        await asyncio.wait((stopped, drained), return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set():
            server.drain(stop.set)
            await stopped
    finally:
        stopped.cancel()
        drained.cancel()


async def _flush_stdout(fds: StdioFds, transport: asyncio.WriteTransport,
                        protocol: _StdoutProtocol) -> None:
    """Write what is still queued for stdout (for a few seconds at most: a reader that stopped
    reading is not waited for), then close it."""
    from ._wire._stdio import FLUSH_TIMEOUT

    transport.close()
    try:
        await asyncio.wait_for(asyncio.shield(protocol.closed), FLUSH_TIMEOUT)
    except TimeoutError:
        transport.abort()
    fds.finish()


def run(listen: str, on_hangup: Callable[[], None] = lambda: None, **options: Any) -> None:
    """Serve in a fresh event loop until SIGTERM or SIGINT (the ``execproto serve`` command);
    SIGHUP calls ``on_hangup`` on the loop."""

    async def main() -> None:
        stop, drain = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):  # the first drains, the second stops
            loop.add_signal_handler(signum, lambda: (stop if drain.is_set() else drain).set())
        loop.add_signal_handler(signal.SIGHUP, on_hangup)
        await serve(listen, stop=stop, drain=drain, **options)

    try:
        asyncio.run(main())
    except CoreFailed:
        raise SystemExit(1) from None  # logged already, with its traceback
