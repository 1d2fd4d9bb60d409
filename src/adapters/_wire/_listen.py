"""The ``--listen`` address (``ws://IP:PORT`` or ``wss://IP:PORT``, numeric IP only, or
``stdio``) and the listener."""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs

if TYPE_CHECKING:
    from .._loop import Loop


class ListenError(ValueError):
    pass


ACCEPT_RETRY = 0.1  # seconds between tries while accept() fails (out of descriptors, say)

log = logging.getLogger("execproto")


class AcceptTrouble:
    """Says once that connections cannot be accepted, and once that they can again, rather than
    a line per retry."""

    def __init__(self) -> None:
        self.failing = False

    def failed(self, exc: OSError) -> None:
        if not self.failing:
            self.failing = True
            log.warning("cannot accept connections: %s; retrying every %s s", exc, ACCEPT_RETRY)

    def accepted(self) -> None:
        if self.failing:
            self.failing = False
            log.warning("accepting connections again")


class Acceptor:
    """A listening socket watched on the driver's `Loop`, the same on every adapter: each time
    it is readable every pending connection is accepted and handed to ``accept`` (non-blocking,
    with TCP_NODELAY), on the loop's owner.

    When accept() fails (out of descriptors or memory) the pending connection keeps the
    listener readable: rather than spin, it stops watching for ACCEPT_RETRY and tries again,
    saying so once. The listener only goes with `close`.
    """

    def __init__(self, loop: Loop, host: str, port: int,
                 accept: Callable[[socket.socket, Any], None]) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self._sock.listen(128)
            self._sock.setblocking(False)
        except OSError:
            self._sock.close()
            raise
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._loop = loop
        self._accept = accept
        self._trouble = AcceptTrouble()
        self._watch()

    def _ready(self) -> None:
        while True:
            try:
                sock, address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue  # reset while in the queue: take the next
            except OSError as exc:
                self._trouble.failed(exc)
                self._loop.unwatch_read(self._sock.fileno())
                self._loop.call_at(self._loop.now() + ACCEPT_RETRY, self._watch)
                return
            self._trouble.accepted()
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._accept(sock, address)

    def _watch(self) -> None:
        if self._sock.fileno() != -1:  # not closed meanwhile by the shutdown
            self._loop.watch_read(self._sock.fileno(), self._ready)

    def close(self) -> None:
        if self._sock.fileno() != -1:
            self._loop.unwatch_read(self._sock.fileno())
            self._sock.close()


@attrs.frozen(eq=False)  # never compared (see `_auth.Refusal`)
class Listen:
    stdio: bool
    host: str = ""
    port: int = 0
    tls: bool = False  # wss://: every connection is TLS (the certificate is the caller's)

    @property
    def loopback(self) -> bool:
        return self.stdio or ipaddress.ip_address(self.host).is_loopback

    def describe(self, bound: tuple[str, int] | None) -> str:
        """The address to announce: ``stdio``, or ``ws://IP:PORT`` (``wss://``) as actually
        bound."""
        if self.stdio or bound is None:
            return "stdio"
        host, port = bound[0], bound[1]
        scheme = "wss" if self.tls else "ws"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    @classmethod
    def parse(cls, text: str) -> Listen:
        if text in ("stdio", "stdio://"):
            return cls(stdio=True)
        parts = urlsplit(text)
        if parts.scheme not in ("ws", "wss") or parts.path not in ("", "/") or parts.query:
            raise ListenError(f"--listen must be ws://IP:PORT or stdio, or wss://IP:PORT for "
                              f"TLS, got {text!r}")
        try:
            host = parts.hostname or ""
            ipaddress.ip_address(host)
        except ValueError:
            raise ListenError(
                f"--listen needs a numeric IP address, not a hostname: {text!r} "
                "(use ws://127.0.0.1:PORT for loopback)"
            ) from None
        try:
            port = parts.port
        except ValueError:
            raise ListenError(f"--listen has an invalid port: {text!r}") from None
        if port is None:
            raise ListenError(f"--listen needs a port: {text!r} (0 picks a free one)")
        return cls(stdio=False, host=host, port=port, tls=parts.scheme == "wss")
