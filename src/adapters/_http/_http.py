"""The blocking work behind ``http/request``: HTTP/1.1 with h11 over our own sockets.

Runs on threads of its own (the driver's `Shares`, a connection's share of them), so a hung
server never holds up fs calls. `fetch` yields the response head, then body pieces; the driver
turns them into the core's ``Http*`` events. TLS comes from the standard library with its
default (verifying) context. Redirects are followed unless the request says stop. Every wait is
cut into `SLICE`s, so a cancelled call (its client gone, or the server stopping) lets go of its
thread within one: the name lookup (`_lookup`), the connect, the TLS handshake, each send and
each read.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TypeVar
from urllib.parse import urljoin, urlsplit

import h11

from execproto import HttpRequest

from ._lookup import resolve, sliced

MAX_REDIRECTS = 10
REDIRECTS = (301, 302, 303, 307, 308)
# Dropped on a redirect to another origin (scheme, host or port), as the reference's HTTP
# library (reqwest) drops them: a credential meant for the origin the client named, from the
# server's environment say, must not follow that origin's redirect elsewhere.
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "cookie2", "proxy-authorization",
                                "www-authenticate"})
# Without `timeoutMs`, each step (connect, send, a read) must progress within this many seconds:
# a server that never answers cannot hold a call forever, and a long download is not cut off.
IDLE_TIMEOUT = 30.0
MAX_BODY = 64 << 20  # a response body read whole (not streamed); past it the call fails
SLICE = 0.25  # seconds a blocking wait lasts before the cancel flag is looked at again
WORKERS = 8  # threads for http calls; more calls wait their turn, fs calls never do

T = TypeVar("T")


def whole(pieces: Iterable[bytes], url: str) -> bytes:
    """A body read whole, refused past MAX_BODY."""
    body = bytearray()
    for piece in pieces:
        body += piece
        if len(body) > MAX_BODY:
            raise HttpFailure(f"response body over {MAX_BODY >> 20} MiB from ({url}): "
                              "stream it instead")
    return bytes(body)


class HttpFailure(Exception):
    """The request failed before or while the response arrived; the text goes to the client."""


class Head:
    def __init__(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.status = status
        self.headers = headers


def fetch(request: HttpRequest, cancelled: threading.Event) -> tuple[Head, Iterator[bytes]]:
    """The final response's head, and its body in pieces. Raises `HttpFailure`.

    The connection stays open until the body has been read to its end (or dropped).
    """
    deadline = None if request.timeout_ms is None else time.monotonic() + request.timeout_ms / 1000
    method, url, body = request.method, request.url, request.body
    headers = sent_headers(request)
    for _ in range(MAX_REDIRECTS + 1):
        exchange = _Exchange(url, deadline, cancelled)
        try:
            head = exchange.send(method, headers, body)
        except BaseException:
            exchange.close()
            raise
        location = dict(head.headers).get("location")
        if request.follow_redirects and head.status in REDIRECTS and location:
            exchange.close()
            url, previous = urljoin(url, location), url
            scheme = urlsplit(url).scheme.lower()
            if scheme not in ("http", "https"):  # the reference's words, and its refusal
                raise HttpFailure(f"redirect target uses unsupported URL scheme: {scheme}")
            if _origin(url) != _origin(previous):
                headers = tuple((name, value) for name, value in headers
                                if name.lower() not in CREDENTIAL_HEADERS)
            if head.status == 303 or (head.status in (301, 302) and method == "POST"):
                method, body = "GET", None  # what every browser does, and RFC 9110 allows
            continue
        return head, exchange.body()
    raise HttpFailure(f"more than {MAX_REDIRECTS} redirects")


def _origin(url: str) -> tuple[str, str, int | None]:
    """A URL's scheme, host and port (its scheme's default when it names none)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # a port out of range: no origin of any other URL's
        port = -1
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def sent_headers(request: HttpRequest) -> tuple[tuple[str, bytes], ...]:
    """The request's headers as they go out: each value with the server's variable it goes on
    with (the core checked it is set and valid), as UTF-8, without the spaces around it, which
    are not part of a value (RFC 9110, 5.5) and which h11 refuses to send."""
    values = [value for _, value in request.headers]
    for index, variable in request.env_values:
        values[index] += os.environ.get(variable, "")
    return tuple((name, value.encode("utf-8", "surrogateescape").strip(b" \t"))
                 for (name, _), value in zip(request.headers, values, strict=True))


class _Exchange:
    """One request and its response on one connection."""

    def __init__(self, url: str, deadline: float | None, cancelled: threading.Event) -> None:
        parts = urlsplit(url)
        self._parts = parts
        self._deadline = deadline
        self._cancelled = cancelled
        self._conn = h11.Connection(h11.CLIENT)
        secure = parts.scheme.lower() == "https"
        host = parts.hostname or ""
        self._url = url
        try:
            sock = self._connect(host, parts.port or (443 if secure else 80))
        except OSError as exc:
            raise HttpFailure(f"error sending request for url ({url}): {exc}") from None
        try:
            if secure:
                sock = self._handshake(sock, host)
        except BaseException as exc:
            sock.close()
            if isinstance(exc, OSError):  # ssl.SSLError included
                raise HttpFailure(f"error sending request for url ({url}): {exc}") from None
            raise
        self._sock = sock

    def close(self) -> None:
        self._sock.close()

    def _remaining(self) -> float:
        """Seconds the next step may take: to the call's deadline, or IDLE_TIMEOUT."""
        if self._cancelled.is_set():
            raise HttpFailure("request cancelled")
        if self._deadline is None:
            return IDLE_TIMEOUT
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise HttpFailure(f"operation timed out for url ({self._url})")
        return left

    def _connect(self, host: str, port: int) -> socket.socket:
        """Connect in slices, to notice a cancel; the first address that answers wins."""
        failure: OSError = OSError(f"no address for {host}")
        wait = sliced(SLICE, time.monotonic() + self._remaining(), self._check)
        for family, kind, proto, _, address in resolve(host, port, wait):
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            code = sock.connect_ex(address)
            if code == errno.EINPROGRESS:
                code = self._await_connect(sock)
            if code == 0:
                return sock
            sock.close()
            failure = OSError(code, os.strerror(code))
        raise failure

    def _await_connect(self, sock: socket.socket) -> int:
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        limit = time.monotonic() + self._remaining()
        while not poller.poll(min(SLICE, max(0.0, limit - time.monotonic())) * 1000):
            if time.monotonic() >= limit or self._cancelled.is_set():
                sock.close()
                self._remaining()  # says which: cancelled, or past the deadline
                raise HttpFailure(f"operation timed out for url ({self._url})")
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)

    def _check(self) -> None:
        self._remaining()  # raises when cancelled or past the deadline

    def _handshake(self, sock: socket.socket, host: str) -> ssl.SSLSocket:
        tls = ssl.create_default_context().wrap_socket(sock, server_hostname=host,
                                                       do_handshake_on_connect=False)
        self._in_slices(tls, tls.do_handshake)
        return tls

    def _write(self, data: bytes | None) -> None:
        """Send it all; without a deadline each piece sent restarts the idle time."""
        view = memoryview(data or b"")
        while view:
            view = view[self._in_slices(self._sock, partial(self._sock.send, view)):]

    def _in_slices(self, sock: socket.socket, step: Callable[[], T]) -> T:
        """``step()``, one blocking call on ``sock``, waited for a `SLICE` at a time until it
        completes, the call is cancelled, or its time (to the deadline, or IDLE_TIMEOUT) is up."""
        limit = time.monotonic() + self._remaining()
        while True:
            left = limit - time.monotonic()
            if left <= 0:
                raise HttpFailure(f"operation timed out for url ({self._url})")
            sock.settimeout(min(SLICE, left))
            try:
                return step()
            except TimeoutError:
                self._check()

    def _next(self) -> object:
        while True:
            if self._cancelled.is_set():
                raise HttpFailure("request cancelled")
            event = self._conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = self._recv()
            except OSError as exc:
                raise HttpFailure(f"error reading response for url ({self._url}): {exc}") from None
            self._conn.receive_data(data)

    def _recv(self) -> bytes:
        return self._in_slices(self._sock, partial(self._sock.recv, 1 << 16))

    def send(self, method: str, headers: tuple[tuple[str, bytes], ...],
             body: bytes | None) -> Head:
        parts = self._parts
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        names = {name.lower() for name, _ in headers}
        host = parts.netloc.rsplit("@", 1)[-1].encode("ascii")
        head = [] if "host" in names else [(b"Host", host)]
        head += [(name.encode("ascii"), value) for name, value in headers]
        if body is not None and "content-length" not in names and "transfer-encoding" not in names:
            head.append((b"Content-Length", b"%d" % len(body)))
        if "connection" not in names:
            head.append((b"Connection", b"close"))
        try:
            self._write(self._conn.send(h11.Request(method=method, target=target, headers=head)))
            if body:
                self._write(self._conn.send(h11.Data(data=body)))
            self._write(self._conn.send(h11.EndOfMessage()))
            while True:
                event = self._next()
                if isinstance(event, h11.Response):
                    headers_out = [(n.decode("latin-1"), v.decode("latin-1"))
                                   for n, v in event.headers]
                    return Head(event.status_code, headers_out)
                if isinstance(event, h11.ConnectionClosed):
                    raise HttpFailure(f"connection closed before a response from ({self._url})")
        except h11.ProtocolError as exc:
            raise HttpFailure(f"invalid HTTP response from ({self._url}): {exc}") from None
        except OSError as exc:
            raise HttpFailure(f"error sending request for url ({self._url}): {exc}") from None

    def body(self) -> Iterator[bytes]:
        try:
            while True:
                event = self._next()
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                    return
        except h11.ProtocolError as exc:
            raise HttpFailure(f"invalid HTTP response from ({self._url}): {exc}") from None
        finally:
            self.close()
