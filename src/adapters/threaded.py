"""The threaded adapter: standard library only, one thread owns the core.

The thread that calls `serve` owns the core and runs every callback from one queue. Everything
else only queues: a watcher thread turns descriptor readiness into callbacks, each socket has a
reader thread (bytes in) and a writer thread (bytes out) once its websocket upgrade is done
(before that the watcher polls it, so half-open connections cost no threads), blocking fs work
runs in a pool.
Because the owner spawns every process, it must live as long as the server: `serve` blocks.
"""

from __future__ import annotations

import heapq
import itertools
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from ._serving._failure import CoreFailed
from ._serving._serve import Options, Server
from ._wire._peer import Peer
from ._wire._sockwriter import Buffer, WaterMarks, advance, batch, send_all
from ._wire._stdio import DrainingStdioPeer

# Reads a connection's reader thread may have handed to the owner and not yet seen handled:
# without a bound, a fast client's bytes would pile up in the owner's queue.
READS_AHEAD = 4


class _Loop:
    """`_loop.Loop` over threads. Only `post` may be called from other threads."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._timers: list[tuple[float, int, list[Any]]] = []
        self._order = itertools.count()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="execproto-work")
        # Descriptor watches: fd -> [read callback, write callback]. The watcher polls an fd
        # only while it is not "in flight" (handed to the owner and not yet handled), since
        # poll is level-triggered and would otherwise report the same readiness forever.
        self._lock = threading.Lock()
        self._watches: dict[int, list[Callable[[], None] | None]] = {}
        self._in_flight: set[int] = set()
        self._wake_read, self._wake_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._running = True
        self._watcher = threading.Thread(target=self._watch_loop, name="execproto-watch",
                                         daemon=True)
        self._watcher.start()

    # -- the owner ------------------------------------------------------------------------------

    def post(self, call: Callable[[], None]) -> None:
        """Queue ``call`` for the owner. Safe from any thread and from signal handlers."""
        self._calls.put(call)

    def run_until(self, done: Callable[[], bool]) -> None:
        """Run callbacks and timers on this thread until ``done()``."""
        while not done():
            timeout = None
            while self._timers and self._timers[0][2][0] is None:
                heapq.heappop(self._timers)  # cancelled
            if self._timers:
                timeout = max(0.0, self._timers[0][0] - self.now())
            try:
                call = self._calls.get(timeout=timeout)
            except queue.Empty:
                pass
            else:
                call()
            while self._timers and self._timers[0][0] <= self.now():
                _, _, box = heapq.heappop(self._timers)
                if box[0] is not None:
                    box[0]()

    def close(self) -> None:
        self._running = False
        os.write(self._wake_write, b"x")
        self._watcher.join()
        self._pool.shutdown(wait=False, cancel_futures=True)
        os.close(self._wake_read)
        os.close(self._wake_write)

    def now(self) -> float:
        return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], None]) -> Callable[[], None]:
        box: list[Any] = [callback]
        heapq.heappush(self._timers, (when, next(self._order), box))
        return lambda: box.__setitem__(0, None)

    def run_blocking(self, work: Callable[[], Any], done: Callable[[Any], None]) -> None:
        def finished(future: Any) -> None:
            result = future.exception() or future.result()
            self.post(lambda: done(result))

        self._pool.submit(work).add_done_callback(finished)

    # -- descriptors ----------------------------------------------------------------------------

    def watch_read(self, fd: int, callback: Callable[[], None]) -> None:
        self._set(fd, 0, callback)

    def watch_write(self, fd: int, callback: Callable[[], None]) -> None:
        self._set(fd, 1, callback)

    def unwatch_read(self, fd: int) -> None:
        self._set(fd, 0, None)

    def unwatch_write(self, fd: int) -> None:
        self._set(fd, 1, None)

    def _set(self, fd: int, side: int, callback: Callable[[], None] | None) -> None:
        with self._lock:
            slots = self._watches.setdefault(fd, [None, None])
            slots[side] = callback
            if slots == [None, None]:
                del self._watches[fd]
                # The fd may be closed now and its number reused: forget it was in flight, so
                # a new watch on the same number is polled at once.
                self._in_flight.discard(fd)
        os.write(self._wake_write, b"x")

    def _watch_loop(self) -> None:
        poller = select.poll()
        polled: dict[int, int] = {}
        poller.register(self._wake_read, select.POLLIN)
        while self._running:
            with self._lock:
                wanted = {
                    fd: (select.POLLIN if slots[0] else 0) | (select.POLLOUT if slots[1] else 0)
                    for fd, slots in self._watches.items()
                    if fd not in self._in_flight
                }
            for fd in list(polled):
                if wanted.get(fd) != polled[fd]:
                    poller.unregister(fd)
                    del polled[fd]
            for fd, mask in wanted.items():
                if fd not in polled:
                    poller.register(fd, mask)
                    polled[fd] = mask
            for fd, events in poller.poll():
                if fd == self._wake_read:
                    try:
                        os.read(self._wake_read, 4096)
                    except BlockingIOError:
                        pass
                    continue
                if events & select.POLLNVAL:
                    continue  # closed under us; the owner has already forgotten it
                with self._lock:
                    self._in_flight.add(fd)
                self.post(partial(self._ready, fd, events))

    def _ready(self, fd: int, events: int) -> None:
        with self._lock:
            if fd not in self._in_flight:
                return  # unwatched since: this readiness is for a descriptor that is gone
            self._in_flight.discard(fd)
            slots = list(self._watches.get(fd, [None, None]))
        problem = select.POLLHUP | select.POLLERR
        if slots[0] is not None and events & (select.POLLIN | problem):
            slots[0]()
        if slots[1] is not None and events & (select.POLLOUT | problem):
            with self._lock:
                still = self._watches.get(fd, [None, None])[1] is slots[1]
            if still:
                slots[1]()
        os.write(self._wake_write, b"x")  # re-arm


def _nothing() -> None:
    pass


class _Connection:
    """One connection's bytes: a reader thread and a writer thread around a counted outbox.

    A connection and its peer refer to each other (and the water marks to the connection): a
    cycle, which only a full garbage collection would free, and an idle server may not run one
    for a long time. So once its threads have ended, the connection lets go (`_forget`): it and
    all its peer held (the websocket's buffers, a message's fragments) are freed at once.
    """

    def __init__(self, loop: _Loop, receive: Callable[[], bytes],
                 send: Callable[[list[Buffer]], None], close: Callable[[], None]) -> None:
        """``send`` writes a batch of buffers whole, blocking (see `_sockwriter.send_all`)."""
        self._loop = loop
        self._receive = receive
        self._send = send
        self._close = close
        self._outbox: list[Buffer] = []
        self._marks = WaterMarks(self._blocked, self._drained)  # kept by the owner
        self._closing = False
        self._ready = threading.Condition()
        self._may_read = threading.Event()  # cleared while blocked: no requests are read
        self._may_read.set()
        self._reads = threading.Semaphore(READS_AHEAD)
        self._threads = 0  # of the two, those that have not yet ended (told on the owner)
        self.peer: Peer | None = None

    def start(self, received: Callable[[bytes], None]) -> None:
        self._threads = 2
        threading.Thread(target=self._reader, args=(received,), daemon=True).start()
        threading.Thread(target=self._writer, daemon=True).start()

    def write(self, parts: Sequence[bytes]) -> None:
        with self._ready:
            self._outbox.extend(parts)
            self._ready.notify()
        self._marks.changed(sum(len(part) for part in parts))

    def _blocked(self) -> None:
        assert self.peer is not None
        self._may_read.clear()
        self.peer.blocked()

    def _drained(self) -> None:
        assert self.peer is not None
        self._may_read.set()
        self.peer.drained()

    def abort(self) -> None:
        """Close now, dropping what is queued; the threads see the closed socket and end."""
        with self._ready:
            self._outbox.clear()
            self._closing = True
            self._ready.notify()
        self._marks.drop()
        self._may_read.set()
        self._close()

    def hang_up(self) -> None:
        with self._ready:
            self._closing = True
            self._ready.notify()

    def _reader(self, received: Callable[[bytes], None]) -> None:
        while True:
            self._reads.acquire()
            self._may_read.wait()
            try:
                data = self._receive()
            except OSError:
                data = b""
            self._loop.post(partial(self._handle, received, data))
            if not data:
                self._loop.post(self._lost)
                return

    def _handle(self, received: Callable[[bytes], None], data: bytes) -> None:
        try:
            received(data)
        finally:
            self._reads.release()

    def _lost(self) -> None:
        if self.peer is not None:
            self.peer.lost()
        self._may_read.set()  # the reader must not wait for a drain that will never come
        with self._ready:
            self._outbox.clear()  # what was not sent goes now, not when a cycle is collected
        self.hang_up()
        self._thread_ended()

    def _thread_ended(self) -> None:
        """On the owner, once for each thread that has ended: the reader after its `_lost`,
        the writer after its last post."""
        self._threads -= 1
        if self._threads == 0:
            self._forget()

    def _forget(self) -> None:
        """Gone, its threads too: drop the references that make a cycle of it and its peer."""
        self.peer = None
        self._marks = WaterMarks(_nothing, _nothing)

    def _writer(self) -> None:
        try:
            while True:
                with self._ready:
                    while not self._outbox and not self._closing:
                        self._ready.wait()
                    parts, self._outbox = self._outbox, []
                    closing = self._closing
                if parts:
                    # Each frame as it is, in one vectored send: no joined copy of the batch.
                    self._send(parts)
                    self._loop.post(partial(self._marks.changed, -sum(map(len, parts))))
                if closing and not self._outbox:
                    return
        except OSError:
            return
        finally:
            self._close()
            self._loop.post(self._thread_ended)


class _SocketConnection(_Connection):
    """A websocket client. Until its upgrade is done it costs no thread: the watcher polls it
    and the owner reads and writes it (without blocking: a TLS handshake is a few messages each
    way). Once upgraded it gets a reader and a writer thread like any other."""

    def __init__(self, loop: _Loop, sock: socket.socket) -> None:
        super().__init__(loop, lambda: sock.recv(1 << 16), partial(send_all, sock.sendmsg),
                         partial(_shut, sock))
        self._sock = sock
        self._fd = sock.fileno()
        self._received: Callable[[bytes], None] | None = None
        self._threaded = False
        self._ended = False

    def start(self, received: Callable[[bytes], None]) -> None:
        self._received = received
        self._sock.setblocking(False)
        self._loop.watch_read(self._fd, self._readable)

    def write(self, parts: Sequence[bytes]) -> None:
        super().write(parts)
        if not self._threaded and not self._ended:
            self._send_early()

    def _send_early(self) -> None:
        """Before the upgrade no writer thread runs: send what the socket takes now, and watch
        it for room for the rest (the writer thread takes over what is left)."""
        if self._threaded or self._ended:
            return
        queue: deque[Buffer] = deque(self._outbox)
        sent = 0
        while queue:
            try:
                taken = self._sock.sendmsg(batch(queue))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                queue.clear()  # the connection is gone: its reading sees that and ends it
                break
            advance(queue, taken)
            sent += taken
        self._outbox = list(queue)
        self._marks.changed(-sent)
        if queue:
            self._loop.watch_write(self._fd, self._send_early)
        else:
            self._loop.unwatch_write(self._fd)

    def _readable(self) -> None:
        if self._ended:
            return
        assert self._received is not None and self.peer is not None
        try:
            data = self._sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        self._received(data)
        if not data:
            self._end()
        elif self.peer.state.known and not self._closing:  # upgraded: over to its own threads
            self._loop.unwatch_read(self._fd)
            self._loop.unwatch_write(self._fd)
            self._sock.setblocking(True)
            self._threaded = True
            super().start(self._received)

    def hang_up(self) -> None:
        if self._threaded:
            super().hang_up()
        elif not self._closing:
            self._closing = True
            self._loop.post(self._end)  # not now: this may run inside `_readable`

    def _end(self) -> None:
        """Refused, timed out or gone during the upgrade: send the short answer, if any, close."""
        if self._ended:
            return
        self._ended = True
        self._loop.unwatch_read(self._fd)
        self._loop.unwatch_write(self._fd)
        answer, self._outbox = self._outbox, []
        try:
            self._sock.sendmsg(answer)  # a few hundred bytes into an empty buffer: taken whole
        except OSError:
            pass
        _shut(self._sock)
        if self.peer is not None:
            self.peer.lost()
        self._forget()  # no threads were started

    def _forget(self) -> None:
        super()._forget()
        self._received = None


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def serve(
    listen: str = "ws://127.0.0.1:0",
    options: Options | None = None,
    *,
    stop: threading.Event | None = None,
    drain: threading.Event | None = None,
    **keywords: Any,
) -> None:
    """Serve on this thread until ``stop`` is set (or, for stdio, stdin ends); then shut down.
    Setting ``drain`` first stops gracefully: see `Server.drain` and ``drain_grace``.

    ``options`` (an `Options`), or its fields as keywords, say the rest. Every process the
    server started is terminated and finalized before this returns. If the core fails (a bug),
    the server stops the same way with every process killed, and this raises `CoreFailed`.
    """
    options = Options.of(options, keywords)
    stop = stop if stop is not None else threading.Event()
    stopping = threading.Event()  # seen by the owner; set on the owner when `stop` fires
    loop = _Loop()
    server = Server(listen, options, loop, stopping.set)

    def relay_stop() -> None:  # `stop` may be set from any thread; the owner must hear it
        stop.wait()
        loop.post(stopping.set)

    threading.Thread(target=relay_stop, daemon=True).start()
    if drain is not None:
        heard = drain

        def relay_drain() -> None:
            heard.wait()
            try:
                loop.post(partial(server.drain, stopping.set))
            except Exception:  # noqa: BLE001 - the loop is gone: the server stopped anyway
                pass

        threading.Thread(target=relay_drain, daemon=True).start()
    if server.where.stdio:
        stdin, stdout = os.dup(0), os.dup(1)

        def close_stdio() -> None:
            for fd in (stdin, stdout):
                try:
                    os.close(fd)
                except OSError:
                    pass

        def receive() -> bytes:
            data = os.read(stdin, 1 << 16)
            if not data:  # the end is seen once all that was asked is answered
                ended = threading.Event()
                loop.post(partial(stdio.end, ended.set))
                ended.wait()
            return data

        def send(parts: list[Buffer]) -> None:
            try:
                send_all(partial(os.writev, stdout), parts)
            except OSError:
                loop.post(stdio.lost)  # nothing more reaches stdout: no answer is waited for
                raise
            loop.post(partial(stdio.sent, sum(map(len, parts))))

        conn = _Connection(loop, receive, send, close_stdio)
        stdio = DrainingStdioPeer(server.driver.connections, conn.write, conn.hang_up)
        conn.peer = stdio
        stdio.opened("stdio")

        def stdio_received(data: bytes) -> None:
            stdio.received(data)
            if not data:
                stopping.set()

        conn.start(stdio_received)
    else:
        server.listen(partial(_open, loop, server))
    server.announce()
    loop.run_until(stopping.is_set)
    idle = threading.Event()
    server.shut_down(idle.set)
    loop.run_until(idle.is_set)
    loop.close()
    server.finish()


def _open(loop: _Loop, server: Server, sock: socket.socket, label: str) -> None:
    conn = _SocketConnection(loop, sock)
    peer = conn.peer = server.ws_peer(label, conn.write, conn.hang_up, abort=conn.abort)
    conn.start(lambda data: peer.received(data, label))


def run(listen: str, on_hangup: Callable[[], None] = lambda: None, **options: Any) -> None:
    """Serve on the main thread until SIGTERM or SIGINT (``execproto serve --adapter threads``);
    SIGHUP calls ``on_hangup`` (on the main thread, which is the owner's)."""
    stop, drain = threading.Event(), threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # the first drains, the second stops
        signal.signal(signum, lambda *_: (stop if drain.is_set() else drain).set())
    signal.signal(signal.SIGHUP, lambda *_: on_hangup())
    try:
        serve(listen, stop=stop, drain=drain, **options)
    except CoreFailed:
        raise SystemExit(1) from None  # logged already, with its traceback
    finally:
        sys.stdout.flush()
