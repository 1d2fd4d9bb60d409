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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from execproto import Config

from ._driver import CoreFailed, Driver
from ._fs import Files
from .backends import Backend
from ._listen import ACCEPT_RETRY, EXHAUSTED, AcceptTrouble, Listen
from ._peer import HIGH_WATER, LOW_WATER, Gate, Peer, StdioPeer, WsPeer
from ._serve import PING_INTERVAL, make_core

# Reads a connection's reader thread may have handed to the owner and not yet seen handled:
# without a bound, a fast client's bytes would pile up in the owner's queue.
READS_AHEAD = 4


class _Loop:
    """`_driver.Loop` over threads. Only `post` may be called from other threads."""

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
        self._watcher = threading.Thread(target=self._watch_loop, name="execproto-watch", daemon=True)
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


class _Connection:
    """One connection's bytes: a reader thread and a writer thread around a counted outbox."""

    def __init__(self, loop: _Loop, receive: Callable[[], bytes], send: Callable[[bytes], None],
                 close: Callable[[], None]) -> None:
        self._loop = loop
        self._receive = receive
        self._send = send
        self._close = close
        self._outbox: list[bytes] = []
        self._unsent = 0  # owner's count of bytes queued and not yet written
        self._blocked = False
        self._closing = False
        self._ready = threading.Condition()
        self._may_read = threading.Event()  # cleared while blocked: no requests are read
        self._may_read.set()
        self._reads = threading.Semaphore(READS_AHEAD)
        self.peer: Peer | None = None

    def start(self, received: Callable[[bytes], None]) -> None:
        threading.Thread(target=self._reader, args=(received,), daemon=True).start()
        threading.Thread(target=self._writer, daemon=True).start()

    def write(self, parts: Sequence[bytes]) -> None:
        size = sum(len(part) for part in parts)
        with self._ready:
            self._outbox.extend(parts)
            self._ready.notify()
        self._unsent += size
        if not self._blocked and self._unsent > HIGH_WATER and self.peer is not None:
            self._blocked = True
            self._may_read.clear()
            self.peer.blocked()

    def abort(self) -> None:
        """Close now, dropping what is queued; the threads see the closed socket and end."""
        with self._ready:
            self._outbox.clear()
            self._closing = True
            self._ready.notify()
        self._unsent = 0
        self._may_read.set()
        self._close()

    def hang_up(self) -> None:
        with self._ready:
            self._closing = True
            self._ready.notify()

    def _sent(self, size: int) -> None:
        self._unsent -= size
        if self._blocked and self._unsent < LOW_WATER and self.peer is not None:
            self._blocked = False
            self._may_read.set()
            self.peer.drained()

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

    def _writer(self) -> None:
        try:
            while True:
                with self._ready:
                    while not self._outbox and not self._closing:
                        self._ready.wait()
                    data = b"".join(self._outbox)
                    self._outbox.clear()
                    closing = self._closing
                if data:
                    self._send(data)
                    self._loop.post(partial(self._sent, len(data)))
                if closing and not self._outbox:
                    return
        except OSError:
            return
        finally:
            self._close()


class _SocketConnection(_Connection):
    """A websocket client. Until its upgrade is done it costs no thread: the watcher polls it
    and the owner reads it. Once upgraded it gets a reader and a writer thread like any other."""

    def __init__(self, loop: _Loop, sock: socket.socket) -> None:
        super().__init__(loop, lambda: sock.recv(1 << 16), sock.sendall, self._shut)
        self._sock = sock
        self._fd = sock.fileno()
        self._received: Callable[[bytes], None] | None = None
        self._threaded = False
        self._ended = False

    def start(self, received: Callable[[bytes], None]) -> None:
        self._received = received
        self._sock.setblocking(False)
        self._loop.watch_read(self._fd, self._readable)

    def _readable(self) -> None:
        assert self._received is not None and self.peer is not None
        if self._ended:
            return
        try:
            data = self._sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        self._received(data)
        if not data:
            self._end()
        elif self.peer.open and not self._closing:  # upgraded: over to its own threads
            self._loop.unwatch_read(self._fd)
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
        answer = b"".join(self._outbox)
        self._outbox.clear()
        try:
            self._sock.send(answer)  # a few hundred bytes into an empty buffer: taken whole
        except OSError:
            pass
        self._shut()
        if self.peer is not None:
            self.peer.lost()

    def _shut(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def serve(
    listen: str = "ws://127.0.0.1:0",
    *,
    config: Config | None = None,
    token: str | None = None,
    trace: Callable[[str], None] | None = None,
    ready: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
    ping_interval: float = PING_INTERVAL,
    fs_roots: Sequence[str] = (),
    backend: Backend | None = None,
    redact_trace: bool = False,
) -> None:
    """Serve on this thread until ``stop`` is set (or, for stdio, stdin ends); then shut down.

    ``ready`` gets the bound address (``ws://IP:PORT``, or ``stdio``) once clients can connect.
    Every process the server started is terminated and finalized before this returns. If the
    core fails (a bug), the server stops the same way with every process killed, and this
    raises `CoreFailed`.
    """
    where = Listen.parse(listen)
    loop = _Loop()
    core, backend = make_core(config, trace, backend, redact_trace)
    driver = Driver(core, loop, Files(fs_roots, config.floor if config else None), backend)
    stop = stop if stop is not None else threading.Event()
    stopping = threading.Event()  # seen by the owner; set on the owner when `stop` fires
    driver.on_failure = stopping.set
    def relay_stop() -> None:  # `stop` may be set from any thread; the owner must hear it
        stop.wait()
        loop.post(stopping.set)

    threading.Thread(target=relay_stop, daemon=True).start()
    listener: socket.socket | None = None
    if where.stdio:
        stdin, stdout = os.dup(0), os.dup(1)

        def close_stdio() -> None:
            for fd in (stdin, stdout):
                try:
                    os.close(fd)
                except OSError:
                    pass

        conn = _Connection(loop, lambda: os.read(stdin, 1 << 16), lambda d: _write_all(stdout, d),
                           close_stdio)
        stdio = StdioPeer(driver, conn.write, conn.hang_up)
        conn.peer = stdio
        stdio.opened("stdio")

        def stdio_received(data: bytes) -> None:
            stdio.received(data)
            if not data:
                stopping.set()

        conn.start(stdio_received)
        address = "stdio"
    else:
        family = socket.AF_INET6 if ":" in where.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((where.host, where.port))
        listener.listen(128)
        address = where.describe(listener.getsockname())
        gate = Gate(config)
        threading.Thread(target=_accept,
                         args=(listener, loop, driver, token, ping_interval, gate),
                         daemon=True).start()
    if ready is not None:
        ready(address)
    loop.run_until(stopping.is_set)
    if listener is not None:
        listener.close()
    idle = threading.Event()
    driver.on_idle = idle.set
    driver.shutdown()
    loop.run_until(idle.is_set)
    loop.close()
    driver.raise_if_failed()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _accept(listener: socket.socket, loop: _Loop, driver: Driver, token: str | None,
            ping_interval: float, gate: Gate) -> None:
    trouble = AcceptTrouble()
    while True:
        try:
            sock, address = listener.accept()
        except OSError as exc:
            if exc.errno not in EXHAUSTED:
                return  # the listener was closed: shutting down
            trouble.failed(exc)
            time.sleep(ACCEPT_RETRY)
            continue
        trouble.accepted()
        loop.post(partial(_open, sock, address, loop, driver, token, ping_interval, gate))


def _open(sock: socket.socket, address: Any, loop: _Loop, driver: Driver, token: str | None,
          ping_interval: float, gate: Gate) -> None:
    if not gate.admit(loop.now()):
        sock.close()  # too many connections still in their upgrade: keep the descriptor
        return
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = _SocketConnection(loop, sock)
    label = f"{address[0]}:{address[1]}"
    peer = WsPeer(driver, conn.write, conn.hang_up, token, gate, label, abort=conn.abort)
    conn.peer = peer

    def ping() -> None:
        if peer.open and not peer.closing:
            peer.ping()
            loop.call_at(loop.now() + ping_interval, ping)

    def received(data: bytes) -> None:
        was_open = peer.open
        peer.received(data, label)
        if peer.open and not was_open:
            loop.call_at(loop.now() + ping_interval, ping)

    conn.start(received)


def run(listen: str, **options: Any) -> None:
    """Serve on the main thread until SIGTERM or SIGINT (``execproto serve --adapter threads``)."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        serve(listen, stop=stop, **options)
    except CoreFailed:
        raise SystemExit(1) from None  # logged already, with its traceback
    finally:
        sys.stdout.flush()
