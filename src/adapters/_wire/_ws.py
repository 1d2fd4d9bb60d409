"""WebSocket server glue over wsproto, with no I/O: bytes in, messages and bytes out.

The upgrade request is screened with h11 before wsproto sees it: ``GET /readyz`` and
``GET /livez`` answer 200 (``/readyz`` 503 while the server drains, and so does an upgrade), a
browser (an ``Origin`` header) gets 403, a missing or wrong bearer token 401, ``GET /metrics``
(behind the token) the server's metrics. Only then are the
buffered bytes handed to wsproto. Outgoing text frames are built here directly: a server frame
is a two-to-ten byte header and the payload unmasked, and building it ourselves means a large
payload is never decoded to ``str`` and encoded back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import h11
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from execproto.actions import CloseCode

from ._auth import Token as Token  # what serve's token= takes, named here for the peers
from ._auth import authenticator

MAX_MESSAGE = 64 << 20  # bytes in one message, after which the connection is closed with 1009
# Frames are parsed one at a time at some 25 us each, all on the thread that serves everyone:
# a message in more fragments than this, or more pings than this between two of ours, closes
# the connection rather than hold the others up (3M one-byte fragments once took 26 s).
MAX_FRAGMENTS = 4096
MAX_PINGS = 1024
# wsproto hands a frame over in as many pieces as the socket's reads cut it into (a slow link's
# 64 MiB message: tens of thousands): the pieces are joined this often, so they neither count
# as fragments nor cost an object each.
JOIN_EVERY = 256


def text_frame_header(length: int) -> bytes:
    """The header of one unfragmented, unmasked text frame carrying ``length`` bytes."""
    if length < 126:
        return bytes((0x81, length))
    if length < 1 << 16:
        return bytes((0x81, 126)) + length.to_bytes(2, "big")
    return bytes((0x81, 127)) + length.to_bytes(8, "big")


@attrs.define
class Received:
    """What one `ServerSocket.receive` produced, to be acted on in this order."""

    send: bytearray = attrs.field(factory=bytearray)  # bytes to write to the peer
    opened: bool = False  # the upgrade was accepted: the connection is live
    messages: list[bytes | str] = attrs.field(factory=list)
    closed: bool = False  # the peer is done, or was refused: close once `send` is written
    refused: str | None = None  # why the upgrade was refused (for the log), if it was
    pongs: int = 0  # answers to our pings
    # A wrong token: the adapter sends `send` only after a pause, so guessing is slow.
    delayed: bool = False


# Probes any orchestrator may send, with no token: the process answers (/livez), it takes
# connections (/readyz).
READY = b"/readyz"
PROBES = (READY, b"/livez")
METRICS = b"/metrics"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format


def _response(status: int, reason: bytes, body: bytes, content_type: str = "text/plain"
              ) -> bytes:
    conn = h11.Connection(h11.SERVER)
    # h11 must see a request before it will write a response; give it a placeholder.
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    conn.next_event()
    head = h11.Response(
        status_code=status,
        reason=reason,
        headers=[
            ("content-type", content_type),
            ("content-length", str(len(body))),
            ("connection", "close"),
        ],
    )
    return conn.send(head) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())


def plain_http_refusal() -> bytes:
    """The answer, in clear, to a plain HTTP request on a TLS listener (a ws:// client's
    upgrade, say): it cannot be read as TLS, but its client can read why it failed."""
    return _response(400, b"Bad Request", b"this server speaks TLS: use wss:// (or https://)\n")


class ServerSocket:
    """One accepted connection, from the first byte of its HTTP request to the close."""

    def __init__(self, token: Token = None, max_message: int = MAX_MESSAGE,
                 metrics: Callable[[], bytes] | None = None,
                 draining: Callable[[], bool] = lambda: False) -> None:
        """``token``: what every upgrade (and /metrics) needs: a bearer token, a function giving
        the token of the moment (`_token.SecretFile.current`), an `_auth.Authenticator`, or
        None for nothing.
        ``metrics``: what ``GET /metrics`` answers (made at each scrape), if any.
        ``draining``: whether the server is draining, when /readyz and upgrades answer 503."""
        self._auth = authenticator(token)
        self._metrics = metrics
        self._draining = draining
        self._max_message = max_message
        self._http: h11.Connection | None = h11.Connection(h11.SERVER)
        self._buffered = bytearray()  # the request's bytes, replayed to wsproto once screened
        self._ws: WSConnection | None = None
        self._parts: list[Any] = []
        self._size = 0
        self._frame_count = 0  # of the message being received
        self._pings = 0  # pings from the peer since our last one
        self.closed = False

    def receive(self, data: bytes) -> Received:
        """Feed bytes from the peer (b"" for EOF)."""
        out = Received()
        if self.closed:
            return out
        if self._http is not None:
            self._screen(data, out)
        elif self._ws is not None:
            self._frames(data, out)
        return out

    def close(self, code: int = CloseCode.NORMAL_CLOSURE, reason: str = "") -> bytes:
        """The close frame to send when the server ends the connection."""
        if self._ws is None or self.closed:
            self.closed = True
            return b""
        self.closed = True
        try:
            return self._ws.send(CloseConnection(code=code, reason=reason))
        except Exception:  # already closing: nothing more to say
            return b""

    def ping(self) -> bytes:
        self._pings = 0
        return b"" if self._ws is None or self.closed else self._ws.send(Ping())

    # -- the upgrade ----------------------------------------------------------------------------

    def _screen(self, data: bytes, out: Received) -> None:
        assert self._http is not None
        self._buffered += data
        try:
            self._http.receive_data(data)
            event = self._http.next_event()
        except h11.RemoteProtocolError:
            return self._refuse(out, 400, b"Bad Request", b"malformed request\n", "bad request")
        if event is h11.NEED_DATA:
            if not data:
                self.closed = out.closed = True
            return None
        if not isinstance(event, h11.Request):
            return self._refuse(out, 400, b"Bad Request", b"malformed request\n", "bad request")
        headers = {name.lower(): value for name, value in event.headers}
        path = event.target.split(b"?")[0]
        if path == READY and self._draining():
            return self._refuse(out, 503, b"Service Unavailable", b"draining\n")
        if path in PROBES:
            return self._refuse(out, 200, b"OK", b"ok\n")
        if b"origin" in headers:
            return self._refuse(out, 403, b"Forbidden", b"browser origins are refused\n",
                                "a browser origin")
        if self._auth is not None:
            header = headers.get(b"authorization")
            refused = self._auth.refusal(header)
            if refused is not None:
                self._refuse(out, 401, b"Unauthorized", refused.body, refused.why)
                out.delayed = header is not None
                return None
        if path == METRICS and self._metrics is not None:
            out.send += _response(200, b"OK", self._metrics(), METRICS_TYPE)
            self.closed = out.closed = True
            return None
        if self._draining():
            return self._refuse(out, 503, b"Service Unavailable",
                                b"the server is draining before it stops\n", "draining")
        self._http = None
        self._ws = WSConnection(ConnectionType.SERVER)
        buffered, self._buffered = bytes(self._buffered), bytearray()
        self._frames(buffered, out)
        return None

    def _refuse(self, out: Received, status: int, reason: bytes, body: bytes,
                why: str | None = None) -> None:
        out.send += _response(status, reason, body)
        out.refused = why
        self.closed = out.closed = True

    # -- frames ---------------------------------------------------------------------------------

    def _frames(self, data: bytes, out: Received) -> None:
        ws = self._ws
        assert ws is not None
        try:
            ws.receive_data(data or None)
            for event in ws.events():
                if isinstance(event, Request):
                    out.send += ws.send(AcceptConnection())
                    out.opened = True
                elif isinstance(event, (TextMessage, BytesMessage)):
                    self._collect(event, out)
                elif isinstance(event, Ping):
                    self._pings += 1
                    if self._pings > MAX_PINGS:
                        out.send += self.close(CloseCode.POLICY_VIOLATION, "too many pings")
                        out.closed = True
                        return
                    out.send += ws.send(event.response())
                elif isinstance(event, Pong):
                    out.pongs += 1
                elif isinstance(event, CloseConnection):
                    # Answer a close frame; a dropped TCP connection (1006) gets no answer.
                    if ws.state is ConnectionState.REMOTE_CLOSING:
                        out.send += ws.send(event.response())
                    elif ws.state is ConnectionState.OPEN:
                        # wsproto refused a frame (invalid UTF-8 in a text frame is 1007):
                        # close with its code and reason rather than just hang up.
                        out.send += self.close(event.code, (event.reason or "")[:100])
                    self.closed = out.closed = True
                if self.closed:
                    return
        except RemoteProtocolError:
            out.send += self.close(CloseCode.PROTOCOL_ERROR, "protocol error")
            out.closed = True
        if not data:
            self.closed = out.closed = True

    def _collect(self, event: TextMessage | BytesMessage, out: Received) -> None:
        self._parts.append(event.data)
        self._size += len(event.data)
        self._frame_count += event.frame_finished
        if self._size > self._max_message or self._frame_count > MAX_FRAGMENTS:
            reason = "message too big" if self._size > self._max_message else "too many fragments"
            out.send += self.close(CloseCode.MESSAGE_TOO_BIG, reason)
            out.closed = True
            return
        empty: bytes | str = "" if isinstance(event, TextMessage) else b""
        if event.message_finished:
            parts, self._parts, self._size, self._frame_count = self._parts, [], 0, 0
            out.messages.append(parts[0] if len(parts) == 1 else empty.join(parts))
        elif len(self._parts) >= JOIN_EVERY:
            self._parts = [empty.join(self._parts)]
