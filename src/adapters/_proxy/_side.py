"""One non-blocking socket of a proxied connection, on the `Loop`.

A side reads only while its owner lets it (`read`), and never more than ``budget()`` bytes at
a time, so whoever forwards what it reads can bound what is buffered. It writes through a
queue: what the socket takes now goes at once, the rest waits for writability, and `queued`
says how much waits. Every callback runs on the loop's owner.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable

from .._loop import Loop

READ_SIZE = 64 << 10  # the most one recv takes


def _nothing() -> None:
    pass


class Meter:
    """Bytes read from one side and not yet written to the other, over the whole room: now, and
    the most one side ever held queued."""

    def __init__(self) -> None:
        self.buffered = 0
        self.peak = 0


class Side:
    def __init__(self, loop: Loop, sock: socket.socket, meter: Meter) -> None:
        self.loop = loop
        self.sock = sock
        self.fd = sock.fileno()
        self._meter = meter
        self._queue: deque[bytes | memoryview] = deque()
        self.queued = 0
        self.closed = False
        self._reading = False
        self._writing = False
        self._finish: Callable[[], None] | None = None
        # Set by the owner: what was read (b"" at the end), room made in the queue, a failure.
        self.on_data: Callable[[bytes], None] = lambda data: None
        self.on_drained: Callable[[], None] = _nothing
        self.on_error: Callable[[], None] = _nothing
        self.budget: Callable[[], int] = lambda: READ_SIZE

    def read(self, on: bool) -> None:
        if self.closed or on == self._reading:
            return
        self._reading = on
        if on:
            self.loop.watch_read(self.fd, self._readable)
        else:
            self.loop.unwatch_read(self.fd)

    def _readable(self) -> None:
        if self.closed:
            return
        size = min(READ_SIZE, self.budget())
        if size <= 0:
            self.read(False)  # the other side's queue is full: its drain reads again
            return
        try:
            data = self.sock.recv(size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.on_error()
            return
        if not data:
            self.read(False)
        self.on_data(data)

    def write(self, data: bytes) -> None:
        if self.closed or not data:
            return
        self._queue.append(data)
        self._change(len(data))
        self._flush()

    def _flush(self) -> None:
        sent_any = False
        queue = self._queue
        while queue:
            head = queue[0]
            try:
                sent = self.sock.send(head)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.on_error()
                return
            sent_any = True
            self._change(-sent)
            if sent == len(head):
                queue.popleft()
            else:
                queue[0] = memoryview(head)[sent:]
        if self.closed:
            return
        if queue and not self._writing:
            self._writing = True
            self.loop.watch_write(self.fd, self._flush)
        elif not queue and self._writing:
            self._writing = False
            self.loop.unwatch_write(self.fd)
        if not queue and self._finish is not None:
            finish, self._finish = self._finish, None
            finish()
        elif sent_any:
            self.on_drained()

    def _change(self, size: int) -> None:
        self.queued += size
        self._meter.buffered += size
        if self.queued > self._meter.peak:
            self._meter.peak = self.queued

    def finish(self, then: Callable[[], None]) -> None:
        """Call ``then`` once everything queued is written (at once if nothing is)."""
        if self.closed:
            return
        if not self._queue:
            then()
        else:
            self._finish = then

    def end(self, done: Callable[[], None]) -> None:
        """Write what is queued, say so (``SHUT_WR``), then read and drop until the peer closes
        too, and call ``done``: closing with unread bytes would reset the connection, which can
        destroy a last answer before the peer reads it. The caller bounds how long it takes."""

        def written() -> None:
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                done()
                return
            self.budget = lambda: READ_SIZE
            self.on_data = lambda data: None if data else done()
            self.on_error = done
            self.read(True)

        self.on_error = done
        self.finish(written)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._reading:
            self.loop.unwatch_read(self.fd)
        if self._writing:
            self.loop.unwatch_write(self.fd)
        self._reading = self._writing = False
        self._change(-self.queued)
        self._queue.clear()
        self._finish = None
        self.on_data = lambda data: None
        self.on_drained = self.on_error = _nothing
        self.budget = lambda: 0
        self.sock.close()
