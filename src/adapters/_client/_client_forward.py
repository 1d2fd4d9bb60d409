"""Forwarded streams on the client side: ``forward/open`` as an anyio byte stream.

The server's ``forward/data``, ``forward/eof`` and ``forward/closed`` notifications are the
extension's own and never reach the client core: the client hands each frame that starts as
one to `Forwards.receive` (a prefix compared, so other frames pay nothing). A stream
acknowledges the target's bytes as its reader takes them, every quarter window, so unread
bytes are bounded by the server's window and a reader that stops pauses only its target.
Writes go out as ``forward/write`` calls of at most WRITE_PIECE bytes, at most
WRITES_IN_FLIGHT bytes unanswered: a target that does not read holds its writer back.
"""

from __future__ import annotations

import base64
import json
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import anyio.abc

WRITE_PIECE = 256 << 10
WRITES_IN_FLIGHT = 1 << 20
_PREFIX = '{"jsonrpc":"2.0","method":"forward/'
_PREFIX_BYTES = _PREFIX.encode()


class _Caller(Protocol):
    async def send_call(self, make: Any) -> Any: ...  # a waiter: ``done``, ``value``, ``error``


def is_forward(message: str | bytes) -> bool:
    """Whether a server's frame is one of the forward notifications."""
    if isinstance(message, str):
        return message.startswith(_PREFIX)
    return message.startswith(_PREFIX_BYTES)


class ForwardStream(anyio.abc.ByteStream):
    """A TCP stream the server made in a session's network (`Client.forward`)."""

    def __init__(self, client: _Caller, stream_id: int, window: dict[str, int],
                 forget: Callable[[int], None], closed: type[Exception]) -> None:
        self.stream_id = stream_id
        self._closed_error = closed
        self._client = client
        self._forget = forget
        self._chunks: deque[tuple[int, bytes]] = deque()  # (seq, bytes) not yet taken
        self._arrived = anyio.Event()
        self._eof = False  # the target sent EOF
        self._failure: BaseException | None = None  # closed: why
        self._closed = False  # by us
        self._eof_sent = False
        self._ack_every = (max(1, window.get("bytes", 1) // 4),
                           max(1, window.get("chunks", 1) // 4))
        self._taken_seq = 0
        self._taken = (0, 0)  # bytes and chunks taken since the last ack
        self._writes: deque[tuple[Any, int]] = deque()  # unanswered, with their sizes
        self._in_flight = 0

    # -- from the server ------------------------------------------------------------------------

    def _on_data(self, seq: int, data: bytes) -> None:
        self._chunks.append((seq, data))
        self._arrived.set()

    def _on_eof(self) -> None:
        self._eof = True
        self._arrived.set()

    def _on_closed(self, error: BaseException | None) -> None:
        if error is not None and self._failure is None:
            self._failure = error
        self._eof = True
        self._arrived.set()
        for waiter, _ in self._writes:
            if not waiter.done.is_set():
                waiter.settle(error=error or self._closed_error("the stream is closed"))

    # -- anyio's ByteStream ---------------------------------------------------------------------

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._chunks:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._eof:
                if self._failure is not None:
                    raise anyio.BrokenResourceError(str(self._failure)) from self._failure
                raise anyio.EndOfStream
            self._arrived = anyio.Event()
            await self._arrived.wait()
        seq, data = self._chunks[0]
        if len(data) > max_bytes:
            self._chunks[0] = (seq, data[max_bytes:])
            return data[:max_bytes]
        self._chunks.popleft()
        await self._took(seq, len(data))
        return data

    async def _took(self, seq: int, size: int) -> None:
        self._taken_seq = seq
        taken = (self._taken[0] + size, self._taken[1] + 1)
        if taken[0] < self._ack_every[0] and taken[1] < self._ack_every[1]:
            self._taken = taken
            return
        self._taken = (0, 0)
        if self._failure is None and not self._closed:
            await self._call("forward/ack", {"streamId": self.stream_id, "seq": seq})

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        for offset in range(0, len(view), WRITE_PIECE):
            piece = bytes(view[offset:offset + WRITE_PIECE])
            await self._write({"streamId": self.stream_id,
                               "dataBase64": base64.b64encode(piece).decode()}, len(piece))

    async def send_eof(self) -> None:
        if not self._eof_sent:
            self._eof_sent = True
            await self._write({"streamId": self.stream_id, "eof": True}, 0)
            await self.drain()

    async def _write(self, params: dict[str, Any], size: int) -> None:
        self._check_open()
        while self._in_flight + size > WRITES_IN_FLIGHT and self._writes:
            await self._settle_oldest()
        waiter = await self._call("forward/write", params)
        self._writes.append((waiter, size))
        self._in_flight += size

    async def drain(self) -> None:
        """Wait for every write to be answered (written to the target)."""
        while self._writes:
            await self._settle_oldest()

    async def _settle_oldest(self) -> None:
        waiter, size = self._writes[0]
        await waiter.done.wait()
        self._writes.popleft()
        self._in_flight -= size
        if waiter.error is not None:
            raise anyio.BrokenResourceError(str(waiter.error)) from waiter.error

    def _check_open(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._failure is not None:
            raise anyio.BrokenResourceError(str(self._failure)) from self._failure

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        return await self._client.send_call(lambda core: core.request(method, params))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._forget(self.stream_id)
        self._arrived.set()
        if self._failure is None and not (self._eof and self._eof_sent and not self._writes):
            try:
                await self._call("forward/close", {"streamId": self.stream_id})
            except Exception:  # noqa: BLE001 - the connection is gone: so is the stream
                pass

    @property
    def failure(self) -> BaseException | None:
        """Why the server closed the stream, if it failed."""
        return self._failure


class Forwards:
    """A client's open streams, by streamId, and the notifications that concern them."""

    def __init__(self, closed: type[Exception]) -> None:
        """``closed``: the error a stream the server closed fails with (given the message)."""
        self._closed = closed
        self._streams: dict[int, ForwardStream] = {}
        # Notifications of streams whose open is answered but not yet taken up: the answer
        # and the stream's first bytes can come in one read, before the opener runs again.
        self._opening = 0
        self._early: dict[int, list[tuple[str, dict[str, Any]]]] = {}

    async def open(self, client: _Caller, port: int, host: str | None,
                   session_id: str | None) -> ForwardStream:
        params: dict[str, Any] = {"port": port}
        if host is not None:
            params["host"] = host
        if session_id is not None:
            params["sessionId"] = session_id
        self._opening += 1
        try:
            waiter = await client.send_call(lambda core: core.request("forward/open", params))
            await waiter.done.wait()
        finally:
            self._opening -= 1
        early = self._early.pop(waiter.value["streamId"], []) if waiter.error is None else []
        if not self._opening:
            self._early.clear()
        if waiter.error is not None:
            raise waiter.error
        result = waiter.value
        stream = ForwardStream(client, result["streamId"], result.get("window") or {},
                               self._forget, self._closed)
        self._streams[stream.stream_id] = stream
        for method, params in early:
            self._apply(stream, method, params)
        return stream

    def _forget(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)

    def receive(self, message: str | bytes) -> None:
        """A forward notification: given to its stream (one already closed here is dropped)."""
        try:
            frame = json.loads(message)
            method, params = frame["method"], frame["params"]
            stream = self._streams.get(params["streamId"])
            if stream is None:
                if self._opening:
                    self._early.setdefault(params["streamId"], []).append((method, params))
                return
            self._apply(stream, method, params)
        except (ValueError, KeyError, TypeError):
            return  # not a frame of ours after all: nothing to do with it

    def _apply(self, stream: ForwardStream, method: str, params: dict[str, Any]) -> None:
        try:
            if method == "forward/data":
                stream._on_data(params["seq"], base64.b64decode(params["dataBase64"]))
            elif method == "forward/eof":
                stream._on_eof()
            elif method == "forward/closed":
                error = params.get("error")
                self._streams.pop(stream.stream_id, None)
                stream._on_closed(None if error is None else self._closed(error))
        except (ValueError, KeyError, TypeError):
            return  # not a frame of ours after all: nothing to do with it

    def lost(self, error: BaseException) -> None:
        """The connection dropped (or the client broke): every stream is gone with it."""
        streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream._on_closed(error)

