"""A websocket client on anyio and wsproto: one connection, whole messages in and out."""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

_READ_SIZE = 1 << 18


class HandshakeRefused(ConnectionError):
    """The server answered the upgrade with an HTTP status instead of a websocket."""

    def __init__(self, status: int, body: bytes) -> None:
        text = body.decode("utf-8", "replace").strip()
        detail = f": {text}" if text else ""
        super().__init__(f"the server refused the websocket: HTTP {status}{detail}")
        self.status = status


def parse_url(url: str) -> tuple[str, int, str, bool]:
    """Host, port, request target and whether TLS is on, from a ``ws://`` or ``wss://`` URL."""
    try:
        parts = urlsplit(url)
        given = parts.port  # raises for a port that is not a number from 0 to 65535
    except ValueError as exc:
        raise ValueError(f"not a websocket URL (ws://HOST:PORT): {url!r} "
                         f"({str(exc).lower()})") from None
    if parts.scheme not in ("ws", "wss") or not parts.hostname or given == 0:
        raise ValueError(f"not a websocket URL (ws://HOST:PORT): {url!r}")
    tls = parts.scheme == "wss"
    port = given or (443 if tls else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, port, target, tls


class WebSocket:
    """Sends and receives whole messages; answers pings; `receive` returns None at the close."""

    def __init__(self, stream: anyio.abc.ByteStream, ws: WSConnection) -> None:
        self._stream = stream
        self._ws = ws
        self._send_lock = anyio.Lock()
        self._parts: list[str | bytes | bytearray] = []
        self._closed = False
        # The server's close frame, once one came: (code, reason). None: none came (a drop).
        self.closed_by_server: tuple[int | None, str] | None = None

    @classmethod
    async def connect(cls, url: str, *, token: str | None = None,
                      connect_timeout: float | None = None,
                      handshake_timeout: float | None = None) -> WebSocket:
        """Open the connection (within ``connect_timeout`` seconds, TLS included) and upgrade
        it (within ``handshake_timeout``); a timeout raises `ConnectionError` saying which."""
        host, port, target, tls = parse_url(url)
        stream: anyio.abc.ByteStream
        with anyio.move_on_after(connect_timeout) as connecting:
            if tls:
                stream = await anyio.connect_tcp(
                    host, port, ssl_context=ssl.create_default_context(),
                    tls_standard_compatible=False,
                )
            else:
                stream = await anyio.connect_tcp(host, port)
        if connecting.cancelled_caught:
            raise ConnectionError(f"no connection in {connect_timeout:g} s")
        try:
            ws = WSConnection(ConnectionType.CLIENT)
            headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
            authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            await stream.send(ws.send(Request(host=authority, target=target,
                                              extra_headers=headers)))
            self = cls(stream, ws)
            with anyio.move_on_after(handshake_timeout) as upgrading:
                await self._await_accept()
            if upgrading.cancelled_caught:
                raise ConnectionError(f"connected, but no websocket handshake in "
                                      f"{handshake_timeout:g} s (is it an exec-server?)")
        except BaseException:
            await anyio.aclose_forcefully(stream)
            raise
        return self

    async def _await_accept(self) -> None:
        status, body = 0, bytearray()
        while True:
            try:
                data = await self._stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                raise ConnectionError("closed during the websocket handshake") from exc
            self._ws.receive_data(data)
            for event in self._ws.events():
                if isinstance(event, AcceptConnection):
                    return
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        raise HandshakeRefused(status, b"")
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        raise HandshakeRefused(status, bytes(body))

    async def send(self, messages: list[bytes]) -> None:
        """Send each message as a text frame, all in one write."""
        if not messages:
            return
        async with self._send_lock:
            out = b"".join(self._ws.send(TextMessage(data=m.decode("utf-8", "surrogateescape")))
                           for m in messages)
            await self._stream.send(out)

    async def receive(self) -> str | bytes | None:
        """The next whole message; None once the connection is closed (cleanly or not)."""
        while True:
            for event in self._ws.events():
                if isinstance(event, (TextMessage, BytesMessage)):
                    self._parts.append(event.data)
                    if event.message_finished:
                        parts, self._parts = self._parts, []
                        if isinstance(parts[0], str):
                            return "".join(p for p in parts if isinstance(p, str))
                        return b"".join(p for p in parts if not isinstance(p, str))
                elif isinstance(event, Ping):
                    if not await self._reply(event.response()):
                        return None
                elif isinstance(event, CloseConnection):
                    if not self._closed:  # its own close frame, not the echo of ours
                        self.closed_by_server = (event.code, event.reason or "")
                    self._closed = True
                    if self._ws.state is ConnectionState.REMOTE_CLOSING:  # else we began it
                        await self._reply(event.response())
                    return None
            try:
                data = await self._stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                    OSError):
                return None
            self._ws.receive_data(data)

    async def _reply(self, event: Any) -> bool:
        """Send a control frame; False when the connection is already gone."""
        try:
            async with self._send_lock:
                await self._stream.send(self._ws.send(event))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return False
        return True

    async def aclose(self) -> None:
        """Close with a close frame when the connection still works; never raises."""
        try:
            if not self._closed:
                self._closed = True
                with anyio.move_on_after(1):
                    async with self._send_lock:
                        await self._stream.send(self._ws.send(CloseConnection(code=1000)))
        except Exception:
            pass  # the connection is already gone: nothing to say goodbye to
        await anyio.aclose_forcefully(self._stream)
