"""``execproto exec``'s side of the local terminal: the remote output written to the local
stdout and stderr by a thread of its own (`Writer`), keystrokes on their way (`Backlog`) and
ssh's escapes in them (`Keys`), and the raw terminal of ``--tty`` (`raw_terminal`)."""

from __future__ import annotations

import os
import queue
import select
import termios
import threading
import tty as ttymod
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import anyio

TILDE, DOT, CR, LF = ord("~"), ord("."), ord("\r"), ord("\n")


class Stderr:
    """How exec's own lines end: on a raw terminal (--tty) a bare LF moves down without going
    back to the left edge, so each line would start where the last ended."""

    raw = False


class LocalOutputFailed(Exception):
    """Writing the remote output to the local stdout or stderr failed: a local problem."""

    def __init__(self, fd: int, error: OSError) -> None:
        super().__init__(fd, error)
        self.name = "stdout" if fd == 1 else "stderr"
        self.error = error


class Writer:
    """Writes to the local stdout and stderr from a thread of its own, one chunk at a time.

    The event loop waits for each write on a pipe the thread signals through, so it goes on
    serving the connection (pings, acks) while a write blocks; not taking the next chunk
    meanwhile is the backpressure. A daemon thread: a write still blocked when exec ends (a
    signal, --timeout) does not keep the process alive.
    """

    def __init__(self) -> None:
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        self._jobs: queue.SimpleQueue[tuple[int, bytes] | None] = queue.SimpleQueue()
        self._sent = 0
        self._done = 0  # written by the thread only
        self._failed: LocalOutputFailed | None = None
        threading.Thread(target=self._serve, name="execproto exec output", daemon=True).start()

    async def write(self, fd: int, data: bytes) -> None:
        self._sent += 1
        self._jobs.put((fd, data))
        while self._done < self._sent:
            await anyio.wait_readable(self._wake_read)
            with suppress(BlockingIOError):
                os.read(self._wake_read, 512)
        if self._failed is not None:
            raise self._failed

    def close(self) -> None:
        """Let the thread end once it is done with what it has (it closes the pipe)."""
        self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fd, data = job
            try:
                write_all(fd, data)
            except OSError as error:
                self._failed = self._failed or LocalOutputFailed(fd, error)
            self._done += 1
            os.write(self._wake_write, b"w")
        os.close(self._wake_read)
        os.close(self._wake_write)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:  # a non-blocking stdout we inherited: wait for room
            select.select([], [fd], [])


class Backlog:
    """Bytes on their way from a reader to a writer, at most ``limit`` of them waiting (past
    it the reader waits too)."""

    def __init__(self, limit: int) -> None:
        self._data = bytearray()
        self._limit = limit
        self._closed = False
        self._changed = anyio.Event()

    async def put(self, data: bytes) -> None:
        while len(self._data) >= self._limit:
            await self._wait()
        self._data += data
        self._notify()

    def close(self) -> None:
        self._closed = True
        self._notify()

    async def take(self) -> bytes:
        """Everything waiting, once there is something; b"" once closed and empty."""
        while not self._data and not self._closed:
            await self._wait()
        data = bytes(self._data)
        self._data.clear()
        self._notify()
        return data

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _wait(self) -> None:
        await self._changed.wait()


class Keys:
    """ssh's escapes in keystrokes typed on a raw terminal: after Enter (or as the first
    input), ``~.`` disconnects and ``~~`` sends one ``~``; a ``~`` before anything else is
    sent with it, and a ``~`` anywhere else is a ``~``."""

    def __init__(self) -> None:
        self.line_start = True
        self.tilde = False  # a ~ at the start of a line, held back until the next key

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """What to send of ``data``, and whether ``~.`` was typed (what follows it is not)."""
        if not self.tilde and TILDE not in data:  # the common case, a key at a time or a paste
            self.line_start = data[-1] in (CR, LF)
            return data, False
        out = bytearray()
        for key in data:
            if self.tilde:
                self.tilde = False
                if key == DOT:
                    return bytes(out), True
                if key != TILDE:
                    out.append(TILDE)
            elif self.line_start and key == TILDE:
                self.tilde = True
                continue
            out.append(key)
            self.line_start = key in (CR, LF)
        return bytes(out), False


@contextmanager
def raw_terminal(raw: bool) -> Iterator[None]:
    if not raw:
        yield
        return
    saved = termios.tcgetattr(0)
    ttymod.setraw(0, termios.TCSADRAIN)  # not TCSAFLUSH: keys typed while connecting stay
    Stderr.raw = True
    try:
        yield
    finally:
        Stderr.raw = False
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
