"""The trio adapter: the core driven from one trio run, over websockets or stdio.

Embed it with `serve` (``await serve("ws://127.0.0.1:0", ready=print, stop=event)``) or run it
with ``execproto serve --adapter trio``. trio has no reader callbacks, so each watched
descriptor is a small task blocked in ``wait_readable``; all of them run on the one thread that
owns the core.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import trio

from execproto import Config

from ._driver import CoreFailed, Driver
from ._fs import Files
from .backends import Backend
from ._listen import Listen, QuietRetries
from ._peer import HIGH_WATER, LOW_WATER, Gate, Peer, StdioPeer, WsPeer
from ._serve import PING_INTERVAL, make_core
from ._sockwriter import BATCH


class _Loop:
    """`_driver.Loop` over a trio nursery."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._token = trio.lowlevel.current_trio_token()
        self._readers: dict[int, trio.CancelScope] = {}
        self._writers: dict[int, trio.CancelScope] = {}

    def now(self) -> float:
        return trio.current_time()

    def watch_read(self, fd: int, callback: Callable[[], None]) -> None:
        self._watch(fd, callback, trio.lowlevel.wait_readable, self._readers)

    def watch_write(self, fd: int, callback: Callable[[], None]) -> None:
        self._watch(fd, callback, trio.lowlevel.wait_writable, self._writers)

    def unwatch_read(self, fd: int) -> None:
        self._unwatch(fd, self._readers)

    def unwatch_write(self, fd: int) -> None:
        self._unwatch(fd, self._writers)

    def _watch(
        self, fd: int, callback: Callable[[], None], wait: Any, scopes: dict[int, trio.CancelScope]
    ) -> None:
        if fd in scopes:
            return
        scope = scopes[fd] = trio.CancelScope()

        async def watcher() -> None:
            with scope:
                while True:
                    # Unwatched (and perhaps closed) before this task first ran, or while the
                    # callback ran: never hand trio a descriptor that may be gone.
                    if scope.cancel_called:
                        return
                    try:
                        await wait(fd)
                    except trio.ClosedResourceError:
                        return  # unwatched (see below)
                    if scope.cancel_called:
                        return  # unwatched after the fd became ready, before we ran
                    callback()

        self._nursery.start_soon(watcher)

    def _unwatch(self, fd: int, scopes: dict[int, trio.CancelScope]) -> None:
        scope = scopes.pop(fd, None)
        if scope is not None:
            scope.cancel()
            # Wake the waiter now: the caller may close the fd at once, and its number may be
            # reused before the cancelled task would otherwise run.
            trio.lowlevel.notify_closing(fd)

    def call_at(self, when: float, callback: Callable[[], None]) -> Callable[[], None]:
        scope = trio.CancelScope()

        async def timer() -> None:
            with scope:
                await trio.sleep_until(when)
                callback()

        self._nursery.start_soon(timer)
        return scope.cancel

    def post(self, call: Callable[[], None]) -> None:
        try:
            self._token.run_sync_soon(call)
        except trio.RunFinishedError:
            pass  # a late worker (an http call let go) has nobody to tell

    def run_blocking(self, work: Callable[[], Any], done: Callable[[Any], None]) -> None:
        async def task() -> None:
            try:
                result = await trio.to_thread.run_sync(work)
            except Exception as exc:
                result = exc
            done(result)

        self._nursery.start_soon(task)


class _Connection:
    """Moves one connection's bytes: a reader, a writer with a counted outbox, a pinger."""

    def __init__(self, receive: Any, send: Any, close: Any) -> None:
        self._receive = receive
        self._send = send
        self._close = close
        self._outbox: list[bytes] = []
        self._unsent = 0
        self._blocked = False
        self._closing = False
        self._wake = trio.Event()
        self._readable = trio.Event()  # unset while blocked: no requests are read
        self._readable.set()
        self._scope: trio.CancelScope | None = None
        self.peer: Peer | None = None

    def write(self, parts: Sequence[bytes]) -> None:
        self._outbox.extend(parts)
        self._unsent += sum(len(part) for part in parts)
        self._wake.set()
        if not self._blocked and self._unsent > HIGH_WATER and self.peer is not None:
            self._blocked = True
            self._readable = trio.Event()
            self.peer.blocked()

    def abort(self) -> None:
        """Close now, dropping what is queued."""
        self._outbox.clear()
        self._unsent = 0
        self._closing = True
        if self._scope is not None:
            self._scope.cancel()

    def hang_up(self) -> None:
        self._closing = True
        self._wake.set()

    async def _writer(self, done: trio.CancelScope) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                while self._outbox:
                    parts, self._outbox = self._outbox, []
                    await self._send(parts)
                    self._unsent -= sum(len(part) for part in parts)
                    if self._blocked and self._unsent < LOW_WATER and self.peer is not None:
                        self._blocked = False
                        self._readable.set()
                        self.peer.drained()
                if self._closing:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            done.cancel()

    async def run(self, received: Callable[[bytes], None], pinger: Any = None) -> None:
        assert self.peer is not None
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                nursery.start_soon(self._writer, nursery.cancel_scope)
                if pinger is not None:
                    nursery.start_soon(pinger)
                try:
                    while not self._closing:
                        await self._readable.wait()
                        data = await self._receive(1 << 16)
                        received(bytes(data))
                        if not data:
                            break
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
                if not self._closing:
                    nursery.cancel_scope.cancel()  # the peer went away: nothing left to send
        finally:
            self._outbox.clear()  # whatever was not sent goes now, not when a cycle is collected
            self._unsent = 0
            self.peer.lost()
            with trio.CancelScope(shield=True):
                await self._close()


async def _send_parts(sock: Any, parts: list[bytes]) -> None:
    """Send ``parts`` with vectored sends: no joined copy of a connection's whole backlog."""
    views = deque(memoryview(part) for part in parts)
    while views:
        sent = await sock.sendmsg(list(itertools.islice(views, BATCH)))
        while sent:
            if len(views[0]) <= sent:
                sent -= len(views.popleft())
            else:
                views[0] = views[0][sent:]
                sent = 0


async def serve(
    listen: str = "ws://127.0.0.1:0",
    *,
    config: Config | None = None,
    token: str | None = None,
    trace: Callable[[str], None] | None = None,
    ready: Callable[[str], None] | None = None,
    stop: trio.Event | None = None,
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
    stop = stop if stop is not None else trio.Event()
    accepting = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        core, backend = make_core(config, trace, backend, redact_trace)
        driver = Driver(core, _Loop(nursery), Files(fs_roots, config.floor if config else None), backend)
        driver.on_failure = stop.set

        gate = Gate(config)

        async def websocket(stream: trio.SocketStream) -> None:
            if not gate.admit(trio.current_time()):
                await stream.aclose()  # too many connections still in their upgrade
                return
            try:
                host, port = stream.socket.getpeername()[:2]
            except OSError:  # reset before we got to it; an exception here would end serving
                await stream.aclose()
                return
            conn = _Connection(stream.receive_some, partial(_send_parts, stream.socket),
                               stream.aclose)
            peer = WsPeer(driver, conn.write, conn.hang_up, token, gate, f"{host}:{port}",
                          abort=conn.abort)
            conn.peer = peer

            async def pinger() -> None:
                while True:
                    await trio.sleep(ping_interval)
                    peer.ping()

            await conn.run(lambda data: peer.received(data, f"{host}:{port}"), pinger)

        if where.stdio:
            stdin = trio.lowlevel.FdStream(os.dup(0))
            stdout = trio.lowlevel.FdStream(os.dup(1))

            async def close_both() -> None:
                await stdin.aclose()
                await stdout.aclose()

            async def send_joined(parts: list[bytes]) -> None:
                await stdout.send_all(b"".join(parts))

            conn = _Connection(stdin.receive_some, send_joined, close_both)
            stdio = StdioPeer(driver, conn.write, conn.hang_up)
            conn.peer = stdio
            stdio.opened("stdio")

            async def stdio_session() -> None:
                await conn.run(stdio.received)
                stop.set()

            nursery.start_soon(stdio_session)
            address = "stdio"
            listeners: list[trio.SocketListener] = []
        else:
            listeners = await trio.open_tcp_listeners(where.port, host=where.host)
            # trio sleeps and retries when accept runs out of descriptors, logging a traceback
            # each time; one line now and then says as much.
            retries = logging.getLogger("trio.serve_listeners")
            if not any(isinstance(f, QuietRetries) for f in retries.filters):
                retries.addFilter(QuietRetries())
            address = where.describe(listeners[0].socket.getsockname())

            async def accept() -> None:
                # Connections run in the outer nursery, so stopping the accepting leaves them
                # up to hear the shutdown.
                with accepting:
                    await trio.serve_listeners(websocket, listeners, handler_nursery=nursery)

            nursery.start_soon(accept)
        if ready is not None:
            ready(address)
        await stop.wait()
        accepting.cancel()
        for listener in listeners:
            await listener.aclose()
        idle = trio.Event()
        driver.on_idle = idle.set
        driver.shutdown()
        await idle.wait()
        nursery.cancel_scope.cancel()
    driver.raise_if_failed()  # out of the nursery, so not wrapped in an exception group


def run(listen: str, **options: Any) -> None:
    """Serve until SIGTERM or SIGINT (``execproto serve --adapter trio``)."""

    failed = False

    async def main() -> None:
        nonlocal failed
        stop = trio.Event()

        async def on_signals() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    stop.set()
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_signals)
            try:
                await serve(listen, stop=stop, **options)
            except CoreFailed:
                failed = True  # logged already, with its traceback
            nursery.cancel_scope.cancel()

    trio.run(main)
    if failed:
        raise SystemExit(1)
