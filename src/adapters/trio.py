"""The trio adapter: the core driven from one trio run, over websockets or stdio.

Embed it with `serve` (``await serve("ws://127.0.0.1:0", ready=print, stop=event)``) or run it
with ``execproto serve --adapter trio``. trio has no reader callbacks, so each watched
descriptor is a small task blocked in ``wait_readable``; all of them run on the one thread that
owns the core.
"""

from __future__ import annotations

import signal
import socket
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import trio

from ._serving._failure import CoreFailed
from ._serving._serve import Options, Server
from ._wire._peer import Peer
from ._wire._sockwriter import Buffer, WaterMarks, advance, batch
from ._wire._stdio import DrainingStdioPeer, StdioFds


class _Loop:
    """`_loop.Loop` over a trio nursery."""

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
            try:
                with scope:
                    while True:
                        # Unwatched (and perhaps closed) before this task first ran, or while
                        # the callback ran: never hand trio a descriptor that may be gone.
                        if scope.cancel_called:
                            return
                        await wait(fd)
                        if scope.cancel_called:
                            return  # unwatched after the fd became ready, before we ran
                        callback()
            except trio.ClosedResourceError:
                pass  # someone else's notify_closing: this loop never calls it (see below)
            finally:
                # Whatever ended this watch, a later one must start afresh, not be taken for
                # this one still running.
                if scopes.get(fd) is scope:
                    del scopes[fd]

        self._nursery.start_soon(watcher)

    def _unwatch(self, fd: int, scopes: dict[int, trio.CancelScope]) -> None:
        scope = scopes.pop(fd, None)
        if scope is not None:
            # A watcher blocked in wait_readable/wait_writable is aborted within this call,
            # its interest dropped from trio's poller at once, so the caller may close the fd
            # straight after. One woken but not yet run sees the cancel before it waits again.
            # Never notify_closing here: that wakes both ways of the fd, and would end the
            # other way's watcher (a write still to flush when the read ends) for good.
            scope.cancel()

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
    """Moves one connection's bytes: a reader, and a writer with a counted outbox. With the
    connection's own socket (``raw``), what is written while nothing waits in the outbox is
    sent at once, as far as the socket takes it, and only the rest goes to the writer. Waking
    its task for every frame cost a stream a quarter of the server's CPU (40 interleaved
    rounds: server CPU -27%, throughput +30% once it was gone)."""

    def __init__(self, receive: Any, send: Any, close: Any,
                 raw: socket.socket | None = None) -> None:
        self._raw = raw
        self._sending = False  # the writer has taken parts from the outbox and not sent them all
        self._receive = receive
        self._send = send
        self._close = close
        self._outbox: list[Buffer] = []
        self._marks = WaterMarks(self._blocked, self._drained)
        self._closing = False
        self._wake = trio.Event()
        self._readable = trio.Event()  # unset while blocked: no requests are read
        self._readable.set()
        self._scope: trio.CancelScope | None = None
        self.peer: Peer | None = None

    def write(self, parts: Sequence[bytes]) -> None:
        rest: Sequence[Buffer] = parts
        if self._raw is not None and not (self._outbox or self._sending or self._closing):
            rest = self._send_now(self._raw, parts)
            if not rest:
                return
        self._outbox.extend(rest)
        self._wake.set()
        self._marks.changed(sum(len(part) for part in rest))

    def _send_now(self, sock: socket.socket, parts: Sequence[bytes]) -> list[Buffer]:
        """What of ``parts`` the socket did not take now (in order, a view of a part sent in
        part). A failed socket is left to the reader, which sees it end."""
        views: deque[Buffer] = deque(parts)
        try:
            while views:
                advance(views, sock.sendmsg(batch(views)))
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            return []
        return list(views)

    def _blocked(self) -> None:
        assert self.peer is not None
        self._readable = trio.Event()
        self.peer.blocked()

    def _drained(self) -> None:
        assert self.peer is not None
        self._readable.set()
        self.peer.drained()

    def abort(self) -> None:
        """Close now, dropping what is queued."""
        self._outbox.clear()
        self._marks.drop()
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
                    self._sending = True
                    try:
                        await self._send(parts)
                    finally:
                        self._sending = False
                    self._marks.changed(-sum(len(part) for part in parts))
                if self._closing:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            done.cancel()

    async def run(self, received: Callable[[bytes], None]) -> None:
        assert self.peer is not None
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                nursery.start_soon(self._writer, nursery.cancel_scope)
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
            self._marks.drop()
            self.peer.lost()
            with trio.CancelScope(shield=True):
                await self._close()


async def _send_parts(sock: Any, parts: list[Buffer]) -> None:
    """Send ``parts`` with vectored sends: no joined copy of a connection's whole backlog."""
    views: deque[Buffer] = deque(parts)
    while views:
        advance(views, await sock.sendmsg(batch(views)))


async def serve(
    listen: str = "ws://127.0.0.1:0",
    options: Options | None = None,
    *,
    stop: trio.Event | None = None,
    drain: trio.Event | None = None,
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
    stop = stop if stop is not None else trio.Event()
    async with trio.open_nursery() as nursery:
        server = Server(listen, options, _Loop(nursery), stop.set)

        def websocket(sock: socket.socket, label: str) -> None:
            # The peer is made here, not in the task: it counts against the gate at once, so
            # the next connection accepted in the same wakeup sees it.
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
            conn = _Connection(stream.receive_some, partial(_send_parts, stream.socket),
                               stream.aclose, raw=sock)
            peer = conn.peer = server.ws_peer(label, conn.write, conn.hang_up, abort=conn.abort)
            nursery.start_soon(conn.run, lambda data: peer.received(data, label))

        if server.where.stdio:
            fds = StdioFds()  # regular files and /dev/null through a pipe and a thread
            stdin = trio.lowlevel.FdStream(fds.stdin)
            stdout = trio.lowlevel.FdStream(fds.stdout)

            async def close_both() -> None:
                await stdin.aclose()
                await stdout.aclose()

            async def send_joined(parts: list[Buffer]) -> None:
                data = b"".join(parts)
                await stdout.send_all(data)
                stdio.sent(len(data))

            async def receive(size: int) -> bytes:
                data = await stdin.receive_some(size)
                if not data:  # the end is seen once all that was asked is answered
                    ended = trio.Event()
                    stdio.end(ended.set)
                    await ended.wait()
                return bytes(data)

            conn = _Connection(receive, send_joined, close_both)
            stdio = DrainingStdioPeer(server.driver.connections, conn.write, conn.hang_up)
            conn.peer = stdio
            stdio.opened("stdio")

            async def stdio_session() -> None:
                await conn.run(stdio.received)
                stop.set()

            nursery.start_soon(stdio_session)
        else:
            # Connections run in this nursery, so they outlive the listener to hear the stop.
            server.listen(websocket)
        server.announce()
        if drain is not None:
            heard = drain

            async def on_drain() -> None:
                await heard.wait()
                server.drain(stop.set)

            nursery.start_soon(on_drain)
        await stop.wait()
        idle = trio.Event()
        server.shut_down(idle.set)
        await idle.wait()
        nursery.cancel_scope.cancel()
    if server.where.stdio:
        fds.finish()  # stdout was closed with its connection: the copy to a file ends
    server.finish()  # out of the nursery, so not wrapped in an exception group


def run(listen: str, on_hangup: Callable[[], None] = lambda: None, **options: Any) -> None:
    """Serve until SIGTERM or SIGINT (``execproto serve --adapter trio``); SIGHUP calls
    ``on_hangup``."""

    failed = False

    async def main() -> None:
        nonlocal failed
        stop, drain = trio.Event(), trio.Event()

        async def on_signals(task_status: trio.TaskStatus[None]) -> None:
            # The first drains, the second stops. Started before serving, so no signal that
            # comes once the address is announced meets the default action (SIGHUP's kills).
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT,
                                           signal.SIGHUP) as signals:
                task_status.started()
                async for signum in signals:
                    if signum == signal.SIGHUP:
                        on_hangup()
                        continue
                    if drain.is_set():
                        stop.set()
                        return
                    drain.set()

        async with trio.open_nursery() as nursery:
            await nursery.start(on_signals)
            try:
                await serve(listen, stop=stop, drain=drain, **options)
            except CoreFailed:
                failed = True  # logged already, with its traceback
            nursery.cancel_scope.cancel()

    trio.run(main)
    if failed:
        raise SystemExit(1)
