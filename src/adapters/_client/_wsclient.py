"""A websocket client on anyio and wsproto: one connection, whole messages in and out.

A message is counted as its pieces arrive, so one over ``max_message`` bytes (or in more than
MAX_FRAGMENTS frames) closes the connection with 1009 before it is held: a hostile server
cannot grow the client. The upgrade's answer is bounded already: h11 refuses a head over
16 KiB, and of a refusal's body only `_BODY_READ` bytes are read.
"""

from __future__ import annotations

import os
import ssl
from http import HTTPStatus
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
from wsproto.utilities import RemoteProtocolError

from execproto.actions import CloseCode

_READ_SIZE = 1 << 18
# The bound of one message's bytes. The server's (`_wire._ws.MAX_MESSAGE`, 64 MiB; this room
# may not import it) is on what it reads; what it sends goes further: an fs/readFile answer
# carries up to 64 MiB (`_files._fs.MAX_READ_FILE`) in base64, some 85.4 MiB.
MAX_MESSAGE = 96 << 20
# And of its frames, the server's: a message of endless empty frames never grows in bytes.
MAX_FRAGMENTS = 4096
# Pieces of a message kept apart before they are joined into one: a server that trickles a
# message a few bytes at a time would otherwise cost an object (some 50 bytes) per piece.
_LOOSE_PIECES = 256
# Of a refusal's body, only this much is read, and only a short plain-text first line is shown:
# a wrong port may land on a web server whose answer is a whole page.
_BODY_READ = 4096
_BODY_SHOWN = 200
# What OpenSSL says when the peer answers the TLS hello with plain bytes.
_NOT_TLS = {"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE"}


class HandshakeRefused(ConnectionError):
    """The server answered the upgrade with an HTTP status instead of a websocket."""

    def __init__(self, status: int, body: bytes = b"", content_type: str = "text/plain") -> None:
        super().__init__(_refusal(status, body, content_type))
        self.status = status


class NotWebSocket(ConnectionError):
    """The peer answered the upgrade with something that is not HTTP at all."""


class TLSFailed(ConnectionError):
    """The TLS handshake of a ``wss://`` URL failed."""


def _refusal(status: int, body: bytes, content_type: str) -> str:
    """One line: the status and its phrase, and the body when it is a short line of text (the
    exec-server's own refusals are: "missing or wrong bearer token")."""
    try:
        said = f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        said = f"HTTP {status}"
    lines = body.decode("utf-8", "replace").strip().splitlines()
    if content_type.startswith("text/plain") and len(lines) == 1 and len(lines[0]) <= _BODY_SHOWN:
        said += f": {lines[0]}"
    if status < 300:  # it served the request as a web page: a web server, not a websocket
        return f"not a websocket server: it answered {said} (a web server on that port?)"
    return f"the server refused the websocket: {said}"


def _tls_failure(exc: ssl.SSLError) -> TLSFailed:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TLSFailed(f"TLS: the server's certificate was refused: {exc.verify_message}")
    why = (exc.reason or str(exc)).replace("_", " ").lower()
    hint = " (is it a plain ws:// server?)" if exc.reason in _NOT_TLS else ""
    return TLSFailed(f"TLS handshake failed: {why}{hint}")



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


def _join(parts: list[str | bytes | bytearray]) -> str | bytes:
    """The pieces of one message, all text or all bytes, as one."""
    if isinstance(parts[0], str):
        return "".join(p for p in parts if isinstance(p, str))
    return b"".join(p for p in parts if not isinstance(p, str))


def _amount(size: int) -> str:
    """A byte count as people say it: 64 MiB, 100 KiB, 1000 bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} bytes"


def _not_http(first: bytes) -> NotWebSocket | None:
    """A peer whose first bytes are not an HTTP answer (an SSH server's banner, say)."""
    if not first or first.startswith(b"HTTP/"[:len(first)]):
        return None
    line = first.split(b"\n", 1)[0].strip()[:60].decode("utf-8", "replace")
    return NotWebSocket(f"not a websocket server: it said {line!r}, not HTTP")


class WebSocket:
    """Sends and receives whole messages; answers pings; `receive` returns None at the close."""

    def __init__(self, stream: anyio.abc.ByteStream, ws: WSConnection,
                 max_message: int = MAX_MESSAGE) -> None:
        self._stream = stream
        self._ws = ws
        self._send_lock = anyio.Lock()
        self._max_message = max_message
        # The message coming in: its pieces (the first `_joined` of them joins of others), its
        # bytes as they were on the wire and its frames, so far.
        self._parts: list[str | bytes | bytearray] = []
        self._joined = 0
        self._size = 0
        self._frames = 0
        self._closed = False
        # The server's close frame, once one came: (code, reason). None: none came (a drop).
        self.closed_by_server: tuple[int | None, str] | None = None
        # Why we closed the connection on a message of the server's (over a bound), if we did.
        self.too_big: str | None = None

    @classmethod
    async def connect(cls, url: str, *, token: str | None = None,
                      connect_timeout: float | None = None,
                      handshake_timeout: float | None = None,
                      ca_file: str | os.PathLike[str] | None = None,
                      max_message: int = MAX_MESSAGE) -> WebSocket:
        """Open the connection (within ``connect_timeout`` seconds, TLS included) and upgrade
        it (within ``handshake_timeout``); a timeout raises `ConnectionError` saying which.
        A message over ``max_message`` bytes closes the connection (see `too_big`).

        A ``wss://`` server's certificate is verified against the default trust store
        (``SSL_CERT_FILE`` names another), or against the certificates in ``ca_file`` alone."""
        host, port, target, tls = parse_url(url)
        stream: anyio.abc.ByteStream
        with anyio.move_on_after(connect_timeout) as connecting:
            if tls:
                try:
                    stream = await anyio.connect_tcp(
                        host, port, ssl_context=ssl.create_default_context(cafile=ca_file),
                        tls_standard_compatible=False,
                    )
                except ssl.SSLError as exc:  # its errno is OpenSSL's, not the system's
                    raise _tls_failure(exc) from None
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
            self = cls(stream, ws, max_message)
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
        refused: tuple[int, str] | None = None  # (status, content type) of a refusal
        body, first = bytearray(), b""
        while True:
            try:
                data = await self._stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                if refused is not None:  # a body that ends with the connection
                    raise HandshakeRefused(refused[0], bytes(body), refused[1]) from None
                raise ConnectionError("closed during the websocket handshake") from exc
            first = first or data
            not_http = _not_http(first)
            if not_http is not None:
                raise not_http
            try:
                self._ws.receive_data(data)
                for event in self._ws.events():  # not all at once: frames may follow the accept
                    if isinstance(event, AcceptConnection):
                        return
                    if isinstance(event, RejectConnection):
                        kind = dict(event.headers).get(b"content-type", b"").decode("latin-1")
                        refused = (event.status_code, kind.lower())
                        if not event.has_body:
                            raise HandshakeRefused(refused[0], b"", refused[1])
                    elif isinstance(event, RejectData) and refused is not None:
                        body += event.data
                        if event.body_finished or len(body) >= _BODY_READ:
                            raise HandshakeRefused(refused[0], bytes(body), refused[1])
            except RemoteProtocolError:
                raise NotWebSocket("not a websocket server: its answer is not valid HTTP") from None

    async def send(self, messages: list[bytes]) -> None:
        """Send each message as a text frame, all in one write."""
        if not messages:
            return
        async with self._send_lock:
            out = b"".join(self._ws.send(TextMessage(data=m.decode("utf-8", "surrogateescape")))
                           for m in messages)
            await self._stream.send(out)

    async def receive(self) -> str | bytes | None:
        """The next whole message; None once the connection is closed (cleanly or not, or by us
        on a message over a bound: then `too_big` says why)."""
        while True:
            for event in self._ws.events():
                if isinstance(event, (TextMessage, BytesMessage)):
                    message = self._collect(event)
                    if self.too_big is not None:
                        await self._refuse_message()
                        return None
                    if message is not None:
                        return message
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

    def _collect(self, event: TextMessage | BytesMessage) -> str | bytes | None:
        """Add a piece of a message; the message once it is whole. Over a bound, `too_big` is
        set and the pieces dropped."""
        data = event.data
        # Bytes as on the wire, where text is UTF-8 (`isascii` is free: only other text is
        # encoded to be counted).
        if isinstance(data, str) and not data.isascii():
            self._size += len(data.encode())
        else:
            self._size += len(data)
        self._frames += event.frame_finished
        if self._size > self._max_message:
            self.too_big = (f"the server sent a message over {_amount(self._max_message)}, the "
                            "client's bound (max_message); the connection is closed (1009)")
        elif self._frames > MAX_FRAGMENTS:
            self.too_big = (f"the server sent a message in more than {MAX_FRAGMENTS} frames, the "
                            "client's bound; the connection is closed (1009)")
        if self.too_big is not None:
            self._parts, self._joined = [], 0
            return None
        parts = self._parts
        parts.append(data)
        if len(parts) - self._joined > _LOOSE_PIECES:
            parts[self._joined:] = [_join(parts[self._joined:])]
            self._joined += 1
        if not event.message_finished:
            return None
        message = _join(parts)
        self._parts, self._joined, self._size, self._frames = [], 0, 0, 0
        return message

    async def _refuse_message(self) -> None:
        """Close with 1009 on a message over a bound, and read nothing more of the server."""
        if self._ws.state is ConnectionState.OPEN:
            with anyio.move_on_after(1):  # a server that reads nothing does not hold us up
                await self._reply(CloseConnection(code=CloseCode.MESSAGE_TOO_BIG,
                                                  reason="message too big"))
        self._closed = True

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
                        bye = CloseConnection(code=CloseCode.NORMAL_CLOSURE)
                        await self._stream.send(self._ws.send(bye))
        except Exception:
            pass  # the connection is already gone: nothing to say goodbye to
        await anyio.aclose_forcefully(self._stream)
