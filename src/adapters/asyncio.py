"""The asyncio adapter: the core driven from one event loop, over websockets or stdio.

Embed it with `serve` (``await serve("ws://127.0.0.1:0", ready=print, stop=event)``) or run it
with ``execproto serve``. Every callback runs on the loop's thread, which owns the core.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from execproto import Config

from ._driver import CoreFailed, Driver
from ._fs import Files
from .backends import Backend
from ._listen import ACCEPT_RETRY, EXHAUSTED, AcceptTrouble, Listen
from ._peer import HIGH_WATER, LOW_WATER, Gate, StdioPeer, WsPeer
from ._serve import PING_INTERVAL, make_core
from ._sockwriter import SocketWriter

READ_SIZE = 256 << 10


class _Loop:
    """`_driver.Loop` over an asyncio loop."""

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

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, address: Any, driver: Driver,
        token: str | None, ping_interval: float, gate: Gate,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._label = f"{address[0]}:{address[1]}"
        self._ping_interval = ping_interval
        self._ping: asyncio.TimerHandle | None = None
        self._closed = False
        self._hung_up = False
        self._writing = False
        self.peer = WsPeer(driver, self._write, self._hang_up, token, gate, self._label,
                           abort=self._close)
        self._writer = SocketWriter(sock, high=HIGH_WATER, low=LOW_WATER,
                                    blocked=self._blocked, drained=self._drained)
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
        elif self.peer.open and self._ping is None:
            self._ping = self._loop.call_later(self._ping_interval, self._send_ping)

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
        if self._ping is not None:
            self._ping.cancel()
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self.peer.lost()

    def _send_ping(self) -> None:
        self.peer.ping()  # which may close the connection: a client that stopped answering
        if not self._closed:
            self._ping = self._loop.call_later(self._ping_interval, self._send_ping)


def _listen(loop: asyncio.AbstractEventLoop, host: str, port: int,
            accept: Callable[[socket.socket, Any], object]) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(128)
    listener.setblocking(False)

    trouble = AcceptTrouble()

    def ready() -> None:
        while True:
            try:
                sock, address = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno not in EXHAUSTED:
                    raise
                # The pending connection keeps the listener readable: stop watching it for a
                # moment rather than spin, and take it when a descriptor is free again.
                trouble.failed(exc)
                loop.remove_reader(listener.fileno())
                loop.call_later(ACCEPT_RETRY, watch)
                return
            trouble.accepted()
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            accept(sock, address)

    def watch() -> None:
        if listener.fileno() != -1:  # not closed meanwhile by the shutdown
            loop.add_reader(listener.fileno(), ready)

    watch()
    return listener


class _StdinProtocol(asyncio.Protocol):
    def __init__(self, peer: StdioPeer, done: asyncio.Event) -> None:
        self._peer = peer
        self._done = done

    def data_received(self, data: bytes) -> None:
        self._peer.received(data)

    def eof_received(self) -> bool:
        self._peer.received(b"")
        self._done.set()
        return False


class _StdoutProtocol(asyncio.Protocol):
    peer: StdioPeer | None = None
    stdin: asyncio.ReadTransport | None = None  # not read while stdout is blocked

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
    *,
    config: Config | None = None,
    token: str | None = None,
    trace: Callable[[str], None] | None = None,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    ping_interval: float = PING_INTERVAL,
    fs_roots: Sequence[str] = (),
    backend: Backend | None = None,
    redact_trace: bool = False,
) -> None:
    """Serve until ``stop`` is set (or, for stdio, until stdin ends), then shut down cleanly.

    ``ready`` gets the bound address (``ws://IP:PORT``, or ``stdio``) once clients can connect.
    Every process the server started is terminated and finalized before this returns. If the
    core fails (a bug), ``stop`` is set, the server stops the same way with every process
    killed, and this raises `CoreFailed`.
    """
    where = Listen.parse(listen)
    loop = asyncio.get_running_loop()
    core, backend = make_core(config, trace, backend, redact_trace)
    driver = Driver(core, _Loop(loop), Files(fs_roots, config.floor if config else None), backend)
    stop = stop if stop is not None else asyncio.Event()
    driver.on_failure = stop.set
    if where.stdio:
        out_transport, out_protocol = await loop.connect_write_pipe(_StdoutProtocol, sys.stdout)
        out_transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)
        peer = StdioPeer(driver, out_transport.writelines, stop.set)
        out_protocol.peer = peer
        out_protocol.stdin, _ = await loop.connect_read_pipe(lambda: _StdinProtocol(peer, stop),
                                                             sys.stdin)
        peer.opened("stdio")
        listener = None
    else:
        gate = Gate(config)

        def accept(sock: socket.socket, address: Any) -> None:
            if not gate.admit(loop.time()):
                sock.close()  # too many connections still in their upgrade: keep the descriptor
                return
            _WsConnection(loop, sock, address, driver, token, ping_interval, gate)

        listener = _listen(loop, where.host, where.port, accept)
    if ready is not None:
        ready(where.describe(listener.getsockname() if listener else None))
    try:
        await stop.wait()
    finally:
        if listener is not None:
            loop.remove_reader(listener.fileno())
            listener.close()
        idle = asyncio.Event()
        driver.on_idle = idle.set
        driver.shutdown()
        await idle.wait()
    driver.raise_if_failed()


def run(listen: str, **options: Any) -> None:
    """Serve in a fresh event loop until SIGTERM or SIGINT (the ``execproto serve`` command)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(listen, stop=stop, **options)

    try:
        asyncio.run(main())
    except CoreFailed:
        raise SystemExit(1) from None  # logged already, with its traceback
