"""Writing to a non-blocking socket with vectored sends and no copies.

asyncio's transports join what they are given into one buffer and slice it again after a short
write: two copies of every output frame, which is most of what a frame costs besides its base64.
Here the pieces are kept as they are (a frame header, the message) and go out with one
``sendmsg`` per wake-up; a short write leaves a memoryview of the rest. The socket's owner
watches it for writability when `pending` says so.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable, Sequence

# At most this many buffers per sendmsg (Linux takes 1024).
BATCH = 512


class SocketWriter:
    def __init__(
        self,
        sock: socket.socket,
        *,
        high: int,
        low: int,
        blocked: Callable[[], None],
        drained: Callable[[], None],
    ) -> None:
        self._sock = sock
        self._queue: deque[bytes | memoryview] = deque()
        self.queued = 0  # bytes not yet written
        self._high = high
        self._low = low
        self._blocked = False
        self._on_blocked = blocked
        self._on_drained = drained
        self.failed = False

    def discard(self) -> None:
        """Drop everything queued: the connection is closed, its buffers go at once."""
        self._queue.clear()
        self.queued = 0
        self.failed = True

    @property
    def pending(self) -> bool:
        return bool(self._queue)

    def write(self, parts: Sequence[bytes]) -> None:
        """Queue ``parts`` and send what the socket takes now."""
        if self.failed:
            return
        self._queue.extend(parts)
        self.queued += sum(len(part) for part in parts)
        self.flush()
        if not self._blocked and self.queued > self._high:
            self._blocked = True
            self._on_blocked()

    def flush(self) -> None:
        """Send until the queue is empty or the socket is full. A failed socket drops it all."""
        queue = self._queue
        while queue:
            batch = list(queue) if len(queue) <= BATCH else [queue[i] for i in range(BATCH)]
            try:
                sent = self._sock.sendmsg(batch)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.failed = True
                queue.clear()
                self.queued = 0
                return
            self.queued -= sent
            while sent:
                head = queue[0]
                if len(head) <= sent:
                    sent -= len(head)
                    queue.popleft()
                else:
                    queue[0] = memoryview(head)[sent:]
                    sent = 0
        if self._blocked and self.queued < self._low:
            self._blocked = False
            self._on_drained()
