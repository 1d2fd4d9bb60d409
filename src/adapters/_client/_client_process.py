"""What the client hands out: a started `Process`, its `Chunk`s and `Result`, and the errors.

A `Process` is fed by the client's receive loop (the ``_on_*`` methods) and awaited by the user.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from execproto.client_events import Closed, Exited, Output, OutputLost

if TYPE_CHECKING:
    from ..client import Client


# Unread output a process may have in the client (the default of connect's ``buffer_bytes``).
# Past it, output is not acknowledged until it is read, so the server pauses the process; a
# server without acks (the reference) is read no further while no call waits for an answer.
BUFFER_BYTES = 8 << 20
# Writes to one process's stdin sent before the first of them is answered: enough to keep the
# pipe busy through a round trip, few enough that the server's stdin backlog holds them all.
WRITES_IN_FLIGHT = 8


class ExecError(Exception):
    """Base of the client's errors."""


@attrs.frozen
class RemoteError(ExecError):
    """The server answered a call with a JSON-RPC error."""

    code: int
    message: str
    data: Any = None
    # What a refused start blames, found by the client: "cwd /x" or the program. The server's
    # words are the reference's, the same for a missing cwd and a missing program.
    blamed: str = ""

    def __str__(self) -> str:
        said = f"{self.blamed}: {self.message}" if self.blamed else self.message
        return f"{said} ({self.code})"


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


class MessageTooBig(ConnectionLost):
    """The server sent a message over the client's bound (connect's ``max_message``, or too
    many frames): the client closed the connection rather than hold it, and does not resume,
    which would only fetch the message again. The message names the bound."""


class ClientBug(ExecError):
    """The client core failed on a bug of its own (not the server's doing): the client stops,
    failing every call and process, rather than go on from a state it cannot trust."""


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

    def __init__(self, client: Client, process_id: str, buffer_bytes: int = BUFFER_BYTES) -> None:
        self.process_id = process_id
        self._client = client
        self._buffer_bytes = buffer_bytes
        # Output not yet read. Its first ``_released`` chunks (``_released_bytes`` of them) have
        # been released to the server; the rest wait until there is room or they are read.
        self._chunks: deque[Chunk] = deque()
        self._backlog = 0
        self._released = 0
        self._released_bytes = 0
        self._readers = 0
        self._writes: deque[_Waiter] = deque()  # stdin writes in flight, oldest first
        self._writing = False  # a write has been accepted: the process is there to take more
        self._changed = anyio.Event()
        self.exit_code: int | None = None
        self.exited = False
        self.closed = False
        self.failure: str | None = None
        self.lost: list[OutputLost] = []  # output the server no longer had when asked for it
        self._error: BaseException | None = None

    @property
    def buffered(self) -> int:
        """Bytes of output received and not yet read."""
        return self._backlog

    async def output(self) -> AsyncIterator[Chunk]:
        """Every chunk of output, in order, until the process closes. What is read is gone:
        two readers share the chunks between them."""
        self._readers += 1
        try:
            while True:
                while self._chunks:
                    chunk = self._take()
                    await self._client._flush()  # the acks its reading made due
                    yield chunk
                if self.closed:
                    return
                if self._error is not None:
                    raise self._error
                await self._wait()
        finally:
            self._readers -= 1
            self._client._stir()

    async def communicate(self) -> tuple[bytes, bytes]:
        """Read all the output until the process closes: (stdout, stderr). A terminal's output
        (``tty=True``) is in stdout."""
        out: dict[str, list[bytes]] = {"stdout": [], "stderr": [], "pty": []}
        async for chunk in self.output():
            out[chunk.stream].append(chunk.data)
        return b"".join(out["stdout"] + out["pty"]), b"".join(out["stderr"])

    async def wait(self) -> Result:
        """Wait until the process has closed (exited, and all its output is in). It reads no
        output: past ``buffer_bytes`` of unread output the process is paused, as with a pipe,
        so wait on a process whose output may be large while reading it, or use
        `communicate`."""
        while not self.closed:
            if self._error is not None:
                raise self._error
            await self._wait()
        return Result(self.exit_code, self.failure)

    async def write(self, data: bytes) -> None:
        """Write to the process's stdin (started with ``pipe_stdin=True``, or a tty).

        Up to WRITES_IN_FLIGHT writes are sent before the oldest is answered, so this returns
        once the write is sent, not served; a write that fails raises from a later `write`,
        `drain` or `close_stdin`. The first write waits for its answer (until the server has
        spawned the process, a write is answered "starting" and sent again), and so does one
        after the exit."""
        if not self._writing or self.exited:  # the answer says what became of it
            await self.drain()
            await self._write_now(data, close=False)
            self._writing = True
            return
        while len(self._writes) >= WRITES_IN_FLIGHT:
            await self._settle_oldest()
        self._writes.append(await self._client.send_call(
            lambda core: core.write(self.process_id, data)
        ))

    async def drain(self) -> None:
        """Wait until every write sent so far is answered; raise the first that failed."""
        while self._writes:
            await self._settle_oldest()

    async def close_stdin(self) -> None:
        """Close the process's stdin, so it reads EOF, once every write before it is in."""
        await self.drain()
        await self._write_now(b"", close=True)

    async def _settle_oldest(self) -> None:
        waiter = self._writes[0]
        await waiter.done.wait()
        self._writes.popleft()
        if waiter.error is not None:
            self._writes.clear()  # the rest were sent after a failure: theirs say no more
            raise waiter.error
        _accepted(self.process_id, waiter.value["status"])

    async def _write_now(self, data: bytes, close: bool) -> None:
        while True:
            reply = await self._client.call_core(
                lambda core: core.write(self.process_id, data, close_stdin=close)
            )
            status = reply["status"]
            if status != "starting":
                _accepted(self.process_id, status)
                return
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

    def _take(self) -> Chunk:
        """The oldest unread chunk; release what now has room."""
        chunk = self._chunks.popleft()
        size = len(chunk.data)
        self._backlog -= size
        if self._released:
            self._released -= 1
            self._released_bytes -= size
        else:  # held until now: read, so the server may drop it
            self._client._release(self.process_id, chunk.seq)
        self._release_room()
        self._client._stir()
        return chunk

    def _release_room(self) -> None:
        chunks, room = self._chunks, self._buffer_bytes
        while self._released < len(chunks):
            chunk = chunks[self._released]
            if self._released_bytes + len(chunk.data) > room:
                return
            self._released += 1
            self._released_bytes += len(chunk.data)
            self._client._release(self.process_id, chunk.seq)

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
        self._release_room()
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
        """More unread output than ``buffer_bytes`` while someone reads it."""
        return self._readers > 0 and self._backlog > self._buffer_bytes


def _accepted(process_id: str, status: str) -> None:
    if status != "accepted":
        raise BrokenPipeError(f"stdin of process {process_id}: {status}")
