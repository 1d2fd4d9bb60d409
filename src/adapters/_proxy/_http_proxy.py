"""The HTTP proxy listener's connections, parsed with h11.

An absolute-form request (``GET http://host:port/path``) is asked about, then sent to the
origin in origin form, without hop-by-hop and ``Proxy-*`` headers and with ``Connection:
close``; the response streams back, re-framed by h11, and the client's connection is kept for
its next request when both sides allow. ``CONNECT host:port`` is asked about, answered 200 and
becomes a tunnel. A refusal is written as the core gave it, then the connection closes; a bad
request gets 400 (431 for a head too large), an upstream that cannot be reached 502, a client
that does not finish its request in time 408.

Each direction holds at most ``Limits.buffer`` bytes read and not yet written (a little more
while re-framing: a chunk's header): a side is read only while the other's queue has room.

With credential masking, a CONNECT to a host where one of the process's credentials is bound
(`intercepts`) is opened instead of tunnelled: the proxy first makes its own TLS connection to
the origin, then answers 200 and speaks TLS to the child with a certificate of its CA for the
host (`_authority`), and forwards each request inside as it forwards plain ones, over that one
upstream connection, kept alive while both sides allow. An origin it cannot verify gets
nothing: each request in the tunnel is answered the reference's 502 instead. A SOCKS5
CONNECT to such a host is handed over here once connected (`socks_tunnel`) and opened the
same way, its SOCKS reply in place of the 200. Every forwarded request's headers go through
`substitute` (plain HTTP too: a credential bound to a loopback ``http://`` destination), so a
dummy becomes the real value only toward its credential's destinations.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from enum import Enum, auto
from functools import partial
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import h11

from execproto.netproxy import intercepts, substitute

from ._dial import Dial
from ._hub import Hub, Refusal, Verdict, client_label
from ._lookups import valid_host
from ._relay import Relay
from ._side import Side
from ._tls_side import TlsSide

# Hop-by-hop headers (RFC 9110 7.6.1), never forwarded; with them every ``Proxy-*`` one and
# whatever ``Connection`` names.
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
    b"upgrade",
})


# What the child reads inside an intercepted tunnel whose origin cannot serve it: the
# reference's 502 body, word for word.
UPSTREAM_ERROR = b"mitm upstream error"


class Phase(Enum):
    HEAD = auto()  # reading a request's head
    ASKING = auto()  # the core is asked, or the upstream is being dialled
    FORWARD = auto()  # one request and its response, through h11 both ways
    TUNNEL = auto()  # after CONNECT: bytes both ways
    LAST = auto()  # a last answer is being written; then the connection closes


def _nothing() -> None:
    pass


def plain(status: int, headers: list[tuple[str, str]], body: bytes) -> bytes:
    """A whole response, ending the connection: ``headers`` as given (a line with CR or LF
    dropped), with a Content-Length unless they have one."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    lines = [f"HTTP/1.1 {status} {reason}"]
    names = set()
    for name, value in headers:
        if any(c in name + value for c in "\r\n\0") or ":" in name:
            continue
        names.add(name.lower())
        lines.append(f"{name}: {value}")
    if "content-length" not in names:
        lines.append(f"Content-Length: {len(body)}")
    if "connection" not in names:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def end_to_end(headers: Any) -> list[tuple[bytes, bytes]]:
    """``headers`` (h11's, lower-cased names) without the hop-by-hop ones."""
    listed = {token.strip().lower() for name, value in headers if name == b"connection"
              for token in value.split(b",")}
    return [(name, value) for name, value in headers
            if name not in HOP_BY_HOP and name not in listed and not name.startswith(b"proxy-")]


def _keeps_alive(response: h11.Response) -> bool:
    """Whether the origin keeps its connection after this response (HTTP/1.1 without
    ``Connection: close``)."""
    if response.http_version != b"1.1":
        return False
    return not any(name == b"connection" and b"close" in value.lower()
                   for name, value in response.headers)


def parse_target(method: bytes, target: bytes) -> tuple[str, int, str] | None:
    """(host, port, origin-form path) of a proxy request's target, None if it is not one."""
    try:
        text = target.decode("ascii")
        if method == b"CONNECT":
            parts = urlsplit("//" + text)
            if parts.port is None or parts.path or parts.query or parts.username:
                return None
            path = ""
        else:
            parts = urlsplit(text)
            if parts.scheme != "http" or not parts.netloc:
                return None
            rest = text.split("//", 1)[1][len(parts.netloc):]
            path = rest if rest.startswith("/") else "/" + rest
            path = path.split("#", 1)[0]
        host, port = parts.hostname or "", parts.port or 80
    except (UnicodeDecodeError, ValueError):
        return None
    if not valid_host(host) or not 0 < port < 65536:
        return None
    return host, port, path


class HttpClient:
    def __init__(self, hub: Hub, proc: int, sock: socket.socket, address: Any) -> None:
        self._begin(hub, proc, Side(hub.loop, sock, hub.meter), client_label(address))
        self._await_request()

    @classmethod
    def socks_tunnel(cls, hub: Hub, proc: int, client: Side, upstream: Side, label: str,
                     host: str, port: int, granted: bytes, early: bytes) -> HttpClient:
        """A SOCKS5 CONNECT to a host where a credential is bound, handed over once its
        upstream is connected: opened as a CONNECT here is (`_open_upstream`), with the SOCKS
        reply (``granted``) in place of the 200. ``early``: what the client sent ahead of
        the reply, its TLS's first bytes."""
        self = cls.__new__(cls)
        self._begin(hub, proc, client, label)
        self._socks = (granted, early)
        self._phase = Phase.ASKING
        client.on_data, client.on_error = lambda data: None, self.close
        self.upstream = upstream
        upstream.on_error = self.close
        self._open_upstream(host, port)
        return self

    def _begin(self, hub: Hub, proc: int, client: Side, label: str) -> None:
        self.proc = proc
        self._hub = hub
        self._limits = hub.limits
        self._label = label
        self._conn = h11.Connection(h11.SERVER,
                                    max_incomplete_event_size=hub.limits.header_bytes)
        self._up: h11.Connection | None = None
        self.client: Side | TlsSide = client
        self.upstream: Side | TlsSide | None = None
        self._phase = Phase.HEAD
        self._closed = False
        self._timer: Callable[[], None] = _nothing
        self._cancel_check: Callable[[], None] = _nothing
        self._dial: Dial | None = None
        self._responded = False  # this exchange's response has begun
        self._head_read = 0  # bytes read since the last request began
        self._last_read = 0.0  # when the client's request body last gave bytes
        self._credentials = hub.credentials.get(proc, ())
        # An intercepted tunnel's (host, port): its requests go to the upstream it opened.
        self._intercepted: tuple[str, int] | None = None
        # A tunnel a SOCKS5 CONNECT asked for: its replies (granted, refused), and what the
        # client sent ahead of them.
        self._socks: tuple[bytes, bytes] | None = None
        hub.opened(self)

    # -- a request's head ------------------------------------------------------------------------

    def _await_request(self) -> None:
        self._phase = Phase.HEAD
        client = self.client
        client.on_data, client.on_error = self._client_data, self.close
        client.on_drained = _nothing
        # A head is read up to one byte past its limit, so one that does not end by then is
        # refused (431) even when it came whole in one read.
        self._head_read = 0
        client.budget = lambda: self._limits.header_bytes + 1 - self._head_read
        self._arm(self._hub.loop.now() + self._limits.request_timeout, self._timed_out)
        client.read(True)
        self._next()  # a request already read (pipelined) goes on at once

    def _client_data(self, data: bytes) -> None:
        if self._phase is Phase.HEAD:
            self._head_read += len(data)
        else:
            self._last_read = self._hub.loop.now()
        try:
            self._conn.receive_data(data)
        except RuntimeError:
            self.close()
            return
        self._next()

    def _next(self) -> None:
        if self._phase is Phase.HEAD:
            self._next_head()
        elif self._phase is Phase.FORWARD:
            self._pump_request()

    def _next_head(self) -> None:
        try:
            event = self._conn.next_event()
        except h11.RemoteProtocolError as exc:
            status = 431 if exc.error_status_hint == 431 else 400
            self._fail(status, f"bad request: {exc}")
            return
        if event is h11.NEED_DATA:
            if self._head_read > self._limits.header_bytes:
                self._fail(431, "request head too large")
            return
        if isinstance(event, h11.Request):
            self._request(event)
        elif isinstance(event, h11.ConnectionClosed):
            self.close()
        else:
            self._fail(400, "bad request")

    def _request(self, request: h11.Request) -> None:
        self._timer()
        self.client.read(False)
        self._phase = Phase.ASKING
        if self._intercepted is not None:
            self._inner_request(request)
            return
        target = parse_target(request.method, request.target)
        if target is None:
            self._fail(400, "this is a proxy: it takes http://host/path or CONNECT host:port")
            return
        host, port, _ = target
        connect = request.method == b"CONNECT"
        self._cancel_check = self._hub.check(
            self.proc, "https_connect" if connect else "http", host, port,
            request.method.decode("ascii", "replace"), self._label,
            partial(self._verdict, request, target))

    def _verdict(self, request: h11.Request, target: tuple[str, int, str],
                 verdict: Verdict) -> None:
        self._cancel_check = _nothing
        if not verdict.allow:
            self._refuse(verdict.refusal)
            return
        self._dial = self._hub.dial(verdict.addresses, target[1],
                                    partial(self._connected, request, target))

    def _connected(self, request: h11.Request, target: tuple[str, int, str],
                   sock: socket.socket | None, why: str) -> None:
        self._dial = None
        if sock is None:
            self._fail(502, f"cannot connect to {target[0]}:{target[1]}: {why}")
            return
        self.upstream = Side(self._hub.loop, sock, self._hub.meter)
        self.upstream.on_error = self.close
        if request.method == b"CONNECT" and intercepts(self._credentials, target[0], target[1]):
            self._open_upstream(target[0], target[1])
            return
        try:
            if request.method == b"CONNECT":
                self._tunnel()
            else:
                self._forward(request, target)
        except h11.ProtocolError:
            self.close()

    # -- CONNECT ---------------------------------------------------------------------------------

    def _tunnel(self) -> None:
        assert self.upstream is not None
        for _ in range(2):  # the CONNECT's end of message, then the pause h11 makes for it
            if self._conn.next_event() is h11.PAUSED:
                break
        head = self._conn.send(h11.Response(status_code=200, headers=[],
                                            reason=b"Connection established"))
        self.client.write(head or b"")
        early, _ = self._conn.trailing_data  # what the client sent before the answer
        self.upstream.write(early)
        self._phase = Phase.TUNNEL
        assert isinstance(self.client, Side) and isinstance(self.upstream, Side)
        Relay(self.client, self.upstream, self._limits.buffer, self.close)

    # -- an intercepted tunnel ------------------------------------------------------------------

    def _open_upstream(self, host: str, port: int) -> None:
        """TLS to the origin first: a child whose origin cannot be verified gets 502, and never
        a tunnel."""
        from ._authority import authority

        raw = self.upstream
        assert isinstance(raw, Side)
        self.upstream = TlsSide(raw, authority().client_context, False, host,
                                ready=partial(self._intercept, host, port),
                                failed=partial(self._unverified, host, port))
        self.upstream.on_error = self.close

    def _unverified(self, host: str, port: int, why: str) -> None:
        """The origin could not be verified: the tunnel is opened all the same and each request
        in it answered `UPSTREAM_ERROR`, as the reference answers (its child's TLS succeeds;
        the origin never sees a byte of the request)."""
        del why
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None
        self._intercept(host, port)

    def _intercept(self, host: str, port: int) -> None:
        """Answer the CONNECT, and speak TLS to the child as ``host`` (the origin verified, or
        no upstream at all: see `_unverified`)."""
        from ._authority import authority

        try:
            if self._socks is not None:
                head, early = self._socks
            else:
                for _ in range(2):  # the CONNECT's end of message, then the pause h11 makes
                    if self._conn.next_event() is h11.PAUSED:
                        break
                head = self._conn.send(h11.Response(status_code=200, headers=[],
                                                    reason=b"Connection established")) or b""
                early = bytes(self._conn.trailing_data[0])  # the child's first TLS bytes
            context = authority().server_context(host)
        except (h11.ProtocolError, OSError, ValueError):
            self.close()
            return
        raw = self.client
        assert isinstance(raw, Side)
        raw.write(head)
        self.client = TlsSide(raw, context, True, None, ready=_nothing,
                              failed=lambda why: self.close(), early=early)
        self._intercepted = (host, port)
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self._limits.header_bytes)
        if self.upstream is not None:
            self.upstream.read(False)
        self._await_request()

    def _inner_request(self, request: h11.Request) -> None:
        """A request inside an intercepted tunnel: origin form (or the tunnel's own https URL),
        to the upstream the tunnel opened."""
        assert self._intercepted is not None
        host, port = self._intercepted
        target = request.target.decode("ascii", "replace")
        if target.startswith("https://"):
            parts = urlsplit(target)
            if (parts.hostname or "") != host or (parts.port or 443) != port:
                self._fail(400, "this tunnel goes to one origin only")
                return
            target = target.split("//", 1)[1][len(parts.netloc):] or "/"
        if not target.startswith("/") or request.method == b"CONNECT":
            self._fail(400, "inside a tunnel, a request names a path")
            return
        if self.upstream is None or self.upstream.closed:  # unverified, or gone since
            self._last(plain(502, [("Content-Type", "text/plain")], UPSTREAM_ERROR))
            return
        try:
            self._forward(request, (host, port, target.split("#", 1)[0]))
        except h11.ProtocolError:
            self.close()

    # -- a request forwarded ---------------------------------------------------------------------

    def _forward(self, request: h11.Request, target: tuple[str, int, str]) -> None:
        client, upstream = self.client, self.upstream
        assert upstream is not None
        host, port, path = target
        shown = f"[{host}]" if ":" in host else host
        intercepted = self._intercepted is not None
        default = 443 if intercepted else 80
        headers = [(name, value) for name, value in end_to_end(request.headers)
                   if name != b"host"]
        headers.insert(0, (b"host", (shown if port == default else f"{shown}:{port}").encode()))
        if any(name == b"transfer-encoding" for name, _ in request.headers):
            headers.append((b"transfer-encoding", b"chunked"))  # h11 re-frames the body
        if self._credentials:
            headers = self._substituted("https" if intercepted else "http", host, port, path,
                                        headers)
        if not intercepted:
            headers.append((b"connection", b"close"))
        if self._up is None:
            self._up = h11.Connection(h11.CLIENT,
                                      max_incomplete_event_size=self._limits.header_bytes)
        upstream.write(self._up.send(h11.Request(method=request.method, target=path.encode(),
                                                 headers=headers)) or b"")
        self._phase = Phase.FORWARD
        self._responded = False
        limit = self._limits.buffer
        client.budget = lambda: limit - upstream.queued
        upstream.budget = lambda: limit - client.queued
        upstream.on_data = self._upstream_data
        client.on_drained = self._client_drained
        upstream.on_drained = self._upstream_drained
        upstream.read(True)
        self._last_read = self._hub.loop.now()
        self._body_check()
        self._pump_request()

    def _substituted(self, scheme: str, host: str, port: int, path: str,
                     headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The headers with each bound credential's dummy put back to its real value."""
        shown = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in headers]
        swapped = substitute(self._credentials, scheme, host, port, path, shown)
        return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in swapped]

    def _body_check(self) -> None:
        """While the request's body is being sent up, the client may pause no longer than
        ``request_timeout`` between reads (a pause the room made, waiting for the upstream to
        read, does not count)."""
        if self._closed or self._phase is not Phase.FORWARD or self._up is None:
            return
        loop, timeout = self._hub.loop, self._limits.request_timeout
        waiting = self.upstream is not None and self.upstream.queued >= self._limits.buffer
        if self._up.our_state is not h11.SEND_BODY:
            return  # the request is whole
        if waiting:
            self._last_read = loop.now()
        elif loop.now() - self._last_read >= timeout:
            if self._responded:
                self.close()
            else:
                self._fail(408, "request body not received in time")
            return
        self._arm(self._last_read + timeout, self._body_check)

    def _arm(self, when: float, call: Callable[[], None]) -> None:
        """The connection's one timer, set anew."""
        self._timer()
        self._timer = self._hub.loop.call_at(when, call)

    def _pump_request(self) -> None:
        """Send on what the client's h11 holds of the request's body; read more if it needs."""
        up, upstream = self._up, self.upstream
        assert up is not None and upstream is not None
        try:
            while up.our_state is h11.SEND_BODY:
                event = self._conn.next_event()
                if event is h11.NEED_DATA:
                    if upstream.queued < self._limits.buffer:
                        self.client.read(True)
                    return
                if isinstance(event, h11.Data | h11.EndOfMessage):
                    upstream.write(up.send(event) or b"")
                else:  # the client went away mid-body
                    self.close()
                    return
        except h11.ProtocolError:
            self.close()
            return
        self.client.read(False)  # the request is sent: nothing more is read until its answer

    def _upstream_data(self, data: bytes) -> None:
        up = self._up
        if up is None:
            return
        try:
            up.receive_data(data)
            while True:
                event = up.next_event()
                if event is h11.NEED_DATA:
                    break
                if isinstance(event, h11.InformationalResponse):
                    if event.status_code != 101:
                        self._to_client(h11.InformationalResponse(
                            status_code=event.status_code, headers=end_to_end(event.headers)))
                elif isinstance(event, h11.Response):
                    self._responded = True
                    headers = self._response_headers(event.headers)
                    if self._intercepted is not None and not _keeps_alive(event):
                        headers.append((b"connection", b"close"))  # no upstream after it
                    self._to_client(h11.Response(
                        status_code=event.status_code, reason=event.reason, headers=headers))
                elif isinstance(event, h11.Data):
                    self._to_client(h11.Data(data=event.data))
                elif isinstance(event, h11.EndOfMessage):
                    self._to_client(h11.EndOfMessage())
                    self._exchanged()
                    return
                else:  # closed (or switched) before its response ended
                    self._upstream_lost()
                    return
        except h11.ProtocolError as exc:
            if isinstance(exc, h11.RemoteProtocolError):
                self._upstream_lost(f"bad response from upstream: {exc}")
            else:
                self.close()
            return
        if self.client.queued >= self._limits.buffer and self.upstream is not None:
            self.upstream.read(False)

    @staticmethod
    def _response_headers(headers: Any) -> list[tuple[bytes, bytes]]:
        kept = end_to_end(headers)
        if any(name == b"transfer-encoding" for name, _ in headers):
            kept = [(name, value) for name, value in kept if name != b"content-length"]
        return kept

    def _to_client(self, event: Any) -> None:
        self.client.write(self._conn.send(event) or b"")

    def _upstream_lost(self, why: str = "upstream closed the connection early") -> None:
        if self._responded:
            self.close()  # the response was cut: so is the client's connection
        else:
            self._fail(502, why)

    def _client_drained(self) -> None:
        if (self.upstream is not None and not self.upstream.closed
                and self.client.queued < self._limits.buffer):
            self.upstream.read(True)

    def _upstream_drained(self) -> None:
        if self._phase is Phase.FORWARD and self._up is not None:
            self._pump_request()

    def _exchanged(self) -> None:
        """The response is whole: drop the upstream (an intercepted tunnel's is kept while it
        allows), keep the client if both sides allow."""
        self._timer()
        up = self._up
        if (self._intercepted is not None and up is not None and self.upstream is not None
                and up.our_state is h11.DONE and up.their_state is h11.DONE):
            up.start_next_cycle()
            self.upstream.read(False)
        else:
            if self.upstream is not None:
                self.upstream.close()
            self.upstream, self._up = None, None
        if self._conn.our_state is h11.DONE and self._conn.their_state is h11.DONE:
            self._conn.start_next_cycle()
            self._phase = Phase.LAST  # nothing is read until the answer is written
            self.client.read(False)
            self.client.finish(self._await_request)
        else:
            self._end()

    # -- last answers ----------------------------------------------------------------------------

    def _refuse(self, refusal: Refusal | None) -> None:
        status, headers, body = refusal if refusal is not None else (403, [], b"")
        self._last(plain(status, headers, body))

    def _fail(self, status: int, message: str) -> None:
        self._last(plain(status, [("Content-Type", "text/plain; charset=utf-8")],
                         message.encode() + b"\n"))

    def _timed_out(self) -> None:
        self._fail(408, "request not received in time")

    def _last(self, data: bytes) -> None:
        self._phase = Phase.LAST
        self._timer()
        self._cancel_check()
        if self._dial is not None:
            self._dial.cancel()
        if self.upstream is not None:
            self.upstream.close()
        self.client.read(False)
        self.client.write(data)
        self._end()

    def _end(self) -> None:
        """Close once what is queued for the client is written, within ``linger``."""
        self._phase = Phase.LAST
        self._arm(self._hub.loop.now() + self._limits.linger, self.close)
        self.client.end(self.close)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._timer()
        self._cancel_check()
        if self._dial is not None:
            self._dial.cancel()
        self.client.close()
        if self.upstream is not None:
            self.upstream.close()
        self._hub.closed(self)
