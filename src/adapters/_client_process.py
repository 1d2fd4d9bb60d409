"""What the client hands out: a started `Process`, its `Chunk`s and `Result`, and the errors.

A `Process` is fed by the client's receive loop (the ``_on_*`` methods) and awaited by the user.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from execproto import Closed, Exited, Output, OutputLost

if TYPE_CHECKING:
    from .client import Client


# While someone iterates a process's output, a backlog this large stops the connection from
# being read, so the server pauses the process instead of the client buffering without end.
BACKLOG_BYTES = 8 << 20


class ExecError(Exception):
    """Base of the client's errors."""


@attrs.frozen
class RemoteError(ExecError):
    """The server answered a call with a JSON-RPC error."""

    code: int
    message: str
    data: Any = None

    def __str__(self) -> str:
        return f"{self.message} ({self.code})"


class ConnectionLost(ExecError):
    """The connection dropped and could not be resumed, or a call that cannot be repeated
    safely was in flight when it dropped."""


class ServerClosed(ConnectionLost):
    """The server closed the connection with a close frame (going away, 1001, or refusing the
    client): a decision, not a drop, so it is not resumed."""

    def __init__(self, code: int | None, reason: str) -> None:
        said = f" {reason}" if reason else ""
        super().__init__(f"the server closed the connection: {code}{said}")
        self.code = code
        self.reason = reason


class SessionGone(ExecError):
    """The server no longer has this client's session (it expired, or the server restarted)."""


@attrs.frozen
class Chunk:
    stream: str  # "stdout", "stderr" or "pty"
    data: bytes
    seq: int


@attrs.frozen
class Result:
    exit_code: int | None  # 128 + N when killed by signal N
    failure: str | None  # why the process closed abnormally (e.g. pipes abandoned), if it did


class _Waiter:
    __slots__ = ("done", "value", "error")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def settle(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error
        self.done.set()


class Process:
    """A process started on the server. Its events are kept from the start, in order."""

    def __init__(self, client: Client, process_id: str) -> None:
        self.process_id = process_id
        self._client = client
        self._chunks: deque[Chunk] = deque()
        self._backlog = 0
        self._readers = 0
        self._changed = anyio.Event()
        self.exit_code: int | None = None
        self.exited = False
        self.closed = False
        self.failure: str | None = None
        self.lost: list[OutputLost] = []  # output the server no longer had when asked for it
        self._error: BaseException | None = None

    async def output(self) -> AsyncIterator[Chunk]:
        """Every chunk of output, in order, until the process closes."""
        self._readers += 1
        try:
            while True:
                while self._chunks:
                    chunk = self._chunks.popleft()
                    self._backlog -= len(chunk.data)
                    self._notify()
                    yield chunk
                if self.closed:
                    return
                if self._error is not None:
                    raise self._error
                await self._wait()
        finally:
            self._readers -= 1
            self._notify()

    async def wait(self) -> Result:
        """Wait until the process has closed (exited, and all its output is in)."""
        while not self.closed:
            if self._error is not None:
                raise self._error
            await self._wait()
        return Result(self.exit_code, self.failure)

    async def write(self, data: bytes) -> None:
        """Write to the process's stdin (started with ``pipe_stdin=True``, or a tty)."""
        await self._write(data, close=False)

    async def close_stdin(self) -> None:
        """Close the process's stdin, so it reads EOF."""
        await self._write(b"", close=True)

    async def _write(self, data: bytes, close: bool) -> None:
        while True:
            reply = await self._client.call_core(
                lambda core: core.write(self.process_id, data, close_stdin=close)
            )
            status = reply["status"]
            if status == "accepted":
                return
            if status != "starting":
                raise BrokenPipeError(f"stdin of process {self.process_id}: {status}")
            await anyio.sleep(0.01)  # the server has not seen the spawn yet

    async def resize(self, rows: int, cols: int) -> None:
        """Set the size of the process's terminal (started with ``tty=True``). execproto's
        extension: check ``client.supports("process/resize")``; the reference answers -32601."""
        await self._client.call_core(lambda core: core.resize(self.process_id, rows, cols))

    async def interrupt(self) -> None:
        """SIGINT to the process group, if it is still running."""
        await self._client.call_core(lambda core: core.interrupt(self.process_id))

    async def terminate(self) -> bool:
        """Stop the process group (TERM, then KILL after the server's grace). Returns whether it
        was running."""
        reply = await self._client.call_core(lambda core: core.terminate(self.process_id))
        return bool(reply["running"])

    # -- fed by the client's receive loop ---------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()

    async def _wait(self) -> None:
        changed = self._changed
        await changed.wait()
        if self._changed is changed:
            self._changed = anyio.Event()

    def _on_output(self, event: Output) -> None:
        self._chunks.append(Chunk(event.stream, event.data, event.seq))
        self._backlog += len(event.data)
        self._notify()

    def _on_exited(self, event: Exited) -> None:
        self.exited, self.exit_code = True, event.exit_code
        self._notify()

    def _on_closed(self, event: Closed) -> None:
        self.exited = self.closed = True
        self.exit_code, self.failure = event.exit_code, event.failure
        self._notify()

    def _fail(self, error: BaseException) -> None:
        if not self.closed:
            self._error = error
            self._notify()

    @property
    def _backed_up(self) -> bool:
        return self._readers > 0 and self._backlog > BACKLOG_BYTES
