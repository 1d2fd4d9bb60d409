"""The blocking work behind ``http/request``: HTTP/1.1 with h11 over our own sockets.

Runs on a worker thread. `fetch` yields the response head, then body pieces; the driver turns
them into the core's ``Http*`` events. TLS comes from the standard library with its default
(verifying) context. Redirects are followed unless the request says stop.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from urllib.parse import urljoin, urlsplit

import h11

from execproto import HttpRequest

MAX_REDIRECTS = 10
REDIRECTS = (301, 302, 303, 307, 308)


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
    for _ in range(MAX_REDIRECTS + 1):
        exchange = _Exchange(url, deadline, cancelled)
        try:
            head = exchange.send(method, request.headers, body)
        except BaseException:
            exchange.close()
            raise
        location = dict(head.headers).get("location")
        if request.follow_redirects and head.status in REDIRECTS and location:
            exchange.close()
            url = urljoin(url, location)
            if head.status == 303 or (head.status in (301, 302) and method == "POST"):
                method, body = "GET", None  # what every browser does, and RFC 9110 allows
            continue
        return head, exchange.body()
    raise HttpFailure(f"more than {MAX_REDIRECTS} redirects")


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
        try:
            sock = socket.create_connection((host, parts.port or (443 if secure else 80)),
                                            timeout=self._remaining())
            if secure:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        except (OSError, ssl.SSLError) as exc:
            raise HttpFailure(f"error sending request for url ({url}): {exc}") from None
        self._sock = sock
        self._url = url

    def close(self) -> None:
        self._sock.close()

    def _remaining(self) -> float | None:
        if self._deadline is None:
            return None
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise HttpFailure(f"operation timed out for url ({self._url})")
        return left

    def _write(self, data: bytes | None) -> None:
        if data:
            self._sock.settimeout(self._remaining())
            self._sock.sendall(data)

    def _next(self) -> object:
        while True:
            if self._cancelled.is_set():
                raise HttpFailure("request cancelled")
            event = self._conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                self._sock.settimeout(self._remaining())
                data = self._sock.recv(1 << 16)
            except TimeoutError:
                raise HttpFailure(f"operation timed out for url ({self._url})") from None
            except OSError as exc:
                raise HttpFailure(f"error reading response for url ({self._url}): {exc}") from None
            self._conn.receive_data(data)

    def send(self, method: str, headers: tuple[tuple[str, str], ...], body: bytes | None) -> Head:
        parts = self._parts
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        names = {name.lower() for name, _ in headers}
        head = [] if "host" in names else [("Host", parts.netloc.rsplit("@", 1)[-1])]
        head += list(headers)
        if body is not None and "content-length" not in names and "transfer-encoding" not in names:
            head.append(("Content-Length", str(len(body))))
        if "connection" not in names:
            head.append(("Connection", "close"))
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
