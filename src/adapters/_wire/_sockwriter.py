"""Vectored sends with no copies, for every adapter.

asyncio's transports join what they are given into one buffer and slice it again after a short
write: two copies of every output frame, which is most of what a frame costs besides its base64.
Joining a batch of frames before a blocking send costs the same copy. Here the pieces are kept
as they are (a frame header, the message) and go out with one ``sendmsg`` (or ``writev``) per
call; a short write leaves a memoryview of the rest (`advance`). `SocketWriter` does it on a
non-blocking socket whose owner watches it for writability when `pending` says so; `send_all`
on a blocking one.
"""

from __future__ import annotations

import itertools
import socket
from collections import deque
from collections.abc import Callable, Iterable, Sequence

# At most this many buffers per sendmsg (Linux takes 1024).
BATCH = 512

Buffer = bytes | memoryview

# Send-buffer water marks shared by the adapters: above HIGH the session's processes stop being
# read; below LOW they start again.
HIGH_WATER = 4 << 20
LOW_WATER = 1 << 20


class WaterMarks:
    """The bytes queued for one connection and not yet written, against the water marks: says
    ``blocked`` once they rise above `HIGH_WATER`, ``drained`` once they fall back below
    `LOW_WATER`. Each adapter counts with one, however it moves the bytes."""

    def __init__(self, blocked: Callable[[], None], drained: Callable[[], None]) -> None:
        self.queued = 0
        self.blocked = False
        self._on_blocked = blocked
        self._on_drained = drained

    def changed(self, size: int) -> None:
        """``size`` bytes more queued (less, when negative: written)."""
        self.queued += size
        if not self.blocked and self.queued > HIGH_WATER:
            self.blocked = True
            self._on_blocked()
        elif self.blocked and self.queued < LOW_WATER:
            self.blocked = False
            self._on_drained()

    def drop(self) -> None:
        """The queue was thrown away with its connection: nothing is owed, nothing is told.
        The callbacks go too: they are the connection's, which holds these marks, and that
        cycle would keep the closed connection until a full garbage collection."""
        self.queued = 0
        self._on_blocked = self._on_drained = _nothing


def _nothing() -> None:
    pass


def batch(queue: deque[Buffer]) -> list[Buffer]:
    """The first BATCH buffers of ``queue``, for one vectored send."""
    return list(queue) if len(queue) <= BATCH else list(itertools.islice(queue, BATCH))


def advance(queue: deque[Buffer], sent: int) -> None:
    """Drop the ``sent`` bytes at the head of ``queue``; a buffer sent in part leaves a view of
    the rest in its place."""
    while sent:
        head = queue[0]
        if len(head) <= sent:
            sent -= len(head)
            queue.popleft()
        else:
            queue[0] = memoryview(head)[sent:]
            sent = 0


def send_all(send: Callable[[list[Buffer]], int], parts: Iterable[Buffer]) -> None:
    """Send every part through ``send`` (a blocking ``sock.sendmsg``, or ``os.writev`` on a
    descriptor), as few calls as it takes."""
    queue: deque[Buffer] = deque(parts)
    while queue:
        advance(queue, send(batch(queue)))


class SocketWriter:
    def __init__(
        self, sock: socket.socket, *, blocked: Callable[[], None], drained: Callable[[], None],
    ) -> None:
        self._sock = sock
        self._queue: deque[Buffer] = deque()
        self._marks = WaterMarks(blocked, drained)
        self.failed = False

    def discard(self) -> None:
        """Drop everything queued: the connection is closed, its buffers go at once."""
        self._queue.clear()
        self._marks.drop()
        self.failed = True

    @property
    def pending(self) -> bool:
        return bool(self._queue)

    def write(self, parts: Sequence[bytes]) -> None:
        """Queue ``parts`` and send what the socket takes now."""
        if self.failed:
            return
        self._queue.extend(parts)
        size = sum(len(part) for part in parts)
        sent = self._send()
        if not self.failed:
            self._marks.changed(size - sent)

    def flush(self) -> None:
        """Send until the queue is empty or the socket is full. A failed socket drops it all."""
        sent = self._send()
        if not self.failed:
            self._marks.changed(-sent)

    def _send(self) -> int:
        """What the socket took; on a failure everything is dropped and 0 returned."""
        queue = self._queue
        total = 0
        while queue:
            try:
                sent = self._sock.sendmsg(batch(queue))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.discard()
                return 0
            total += sent
            advance(queue, sent)
        return total
