"""A non-blocking connect to the addresses a name resolved to, tried in order, within one
deadline; no lookup of its own (the addresses are the ones the core was asked about)."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable

from .._loop import Loop

# The dial's answer: the connected socket, or None and why not.
Connected = Callable[[socket.socket | None, str], None]


class Dial:
    def __init__(self, loop: Loop, addresses: tuple[str, ...], port: int, timeout: float,
                 then: Connected) -> None:
        self._loop = loop
        self._left = list(addresses)
        self._port = port
        self._then: Connected | None = then
        self._sock: socket.socket | None = None
        self._why = "no address"
        self._cancel_timer = loop.call_at(loop.now() + timeout, self._timed_out)
        self._next()

    def _next(self) -> None:
        while self._left and self._then is not None:
            ip = self._left.pop(0)
            family = socket.AF_INET6 if ":" in ip else socket.AF_INET
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                self._why = exc.strerror or str(exc)
                continue
            sock.setblocking(False)
            code = sock.connect_ex((ip, self._port))
            if code in (0, errno.EINPROGRESS):
                self._sock = sock
                self._loop.watch_write(sock.fileno(), self._writable)
                return
            sock.close()
            self._why = errno.errorcode.get(code, str(code))
        self._answer(None, self._why)

    def _writable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        self._loop.unwatch_write(sock.fileno())
        self._sock = None
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code == 0:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._answer(sock, "")
            return
        sock.close()
        self._why = errno.errorcode.get(code, str(code))
        self._next()

    def _timed_out(self) -> None:
        self._left.clear()
        self._drop()
        self._answer(None, "connect timed out")

    def _answer(self, sock: socket.socket | None, why: str) -> None:
        then, self._then = self._then, None
        self._cancel_timer()
        if then is None:
            if sock is not None:
                sock.close()
            return
        then(sock, why)

    def _drop(self) -> None:
        if self._sock is not None:
            self._loop.unwatch_write(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def cancel(self) -> None:
        self._then = None
        self._left.clear()
        self._cancel_timer()
        self._drop()
