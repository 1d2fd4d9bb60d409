"""One SOCKS5 UDP association: datagrams relayed between the client and the destinations the
core allows.

The client-facing socket is made in the network namespace of the SOCKS listener (the
sandbox's, where the client is), found with ``SIOCGSKNS``; the sockets that reach out are the
server's own. The first datagram from the client's address fixes its port; each destination
(host, port) is asked about once (``socks5_udp``) and its verdict kept for the association
(``udp_destinations`` of them at most), with up to ``udp_waiting`` datagrams held while it is
asked. Only datagrams from an address something was sent to come back. Nothing else is
buffered: a datagram the socket will not take now is dropped, as UDP may.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import threading
from collections.abc import Callable
from functools import partial

import attrs

from ._hub import Hub, Verdict
from ._lookups import literal
from ._socks_wire import datagram, parse_datagram

SIOCGSKNS = 0x894C  # a socket's network namespace, as a descriptor (Linux 4.9)
CLONE_NEWNET = 0x40000000
BATCH = 32  # datagrams taken per readiness, so one association cannot hold the loop
DATAGRAM = 65535


def socket_beside(listener: socket.socket, family: int, kind: int) -> socket.socket:
    """A new socket in ``listener``'s network namespace."""
    ns = fcntl.ioctl(listener.fileno(), SIOCGSKNS)
    try:
        theirs, ours = os.fstat(ns), os.stat("/proc/thread-self/ns/net")
        if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
            return socket.socket(family, kind)
        made: list[socket.socket | OSError] = []

        def inside() -> None:  # a thread of its own: it never comes back out
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(ns, CLONE_NEWNET) != 0:
                code = ctypes.get_errno()
                made.append(OSError(code, os.strerror(code)))
                return
            try:
                made.append(socket.socket(family, kind))
            except OSError as exc:
                made.append(exc)

        thread = threading.Thread(target=inside, name="execproto-proxy-netns")
        thread.start()
        thread.join()
    finally:
        os.close(ns)
    if isinstance(made[0], OSError):
        raise made[0]
    return made[0]


@attrs.define(eq=False)
class Destination:
    waiting: list[bytes] = attrs.Factory(list)  # datagrams held while the core is asked
    target: tuple[str, int] | None = None  # once allowed: where its datagrams go
    decided: bool = False
    cancel: Callable[[], None] = lambda: None


class UdpRelay:
    def __init__(self, hub: Hub, proc: int, label: str, client_ip: str,
                 listener: socket.socket, local_ip: str) -> None:
        self._hub = hub
        self._proc = proc
        self._label = label
        self._client_ip = literal(client_ip) or client_ip
        self._client: tuple[str, int] | None = None
        family = socket.AF_INET6 if ":" in local_ip else socket.AF_INET
        self._inner = socket_beside(listener, family, socket.SOCK_DGRAM)
        try:
            self._inner.bind((local_ip, 0))
            self._inner.setblocking(False)
        except OSError:
            self._inner.close()
            raise
        self.address: tuple[str, int] = self._inner.getsockname()[:2]
        self._outer: dict[int, socket.socket] = {}  # by family
        self._destinations: dict[tuple[str, int], Destination] = {}
        self._sent_to: set[tuple[str, int]] = set()
        self._closed = False
        hub.loop.watch_read(self._inner.fileno(), self._from_client)

    def _from_client(self) -> None:
        for _ in range(BATCH):
            try:
                data, source = self._inner.recvfrom(DATAGRAM)
            except OSError:
                return
            source = (literal(source[0]) or source[0], source[1])
            if source[0] != self._client_ip or self._client not in (None, source):
                continue  # not the client's
            self._client = source
            parsed = parse_datagram(data)
            if parsed is None:
                continue
            host, port, payload = parsed
            destination = self._destinations.get((host, port))
            if destination is None:
                if len(self._destinations) >= self._hub.limits.udp_destinations:
                    continue
                destination = self._destinations[host, port] = Destination([payload])
                destination.cancel = self._hub.check(
                    self._proc, "socks5_udp", host, port, None, self._label,
                    partial(self._verdict, (host, port)))
            elif not destination.decided:
                if len(destination.waiting) < self._hub.limits.udp_waiting:
                    destination.waiting.append(payload)
            elif destination.target is not None:
                self._send(destination.target, payload)
            if self._closed:
                return

    def _verdict(self, key: tuple[str, int], verdict: Verdict) -> None:
        destination = self._destinations[key]
        destination.decided = True
        if verdict.allow and verdict.addresses:
            destination.target = (verdict.addresses[0], key[1])
            for payload in destination.waiting:
                self._send(destination.target, payload)
        destination.waiting.clear()

    def _send(self, target: tuple[str, int], payload: bytes) -> None:
        family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
        sock = self._outer.get(family)
        if sock is None:
            try:
                sock = socket.socket(family, socket.SOCK_DGRAM)
            except OSError:
                return
            sock.setblocking(False)
            self._outer[family] = sock
            self._hub.loop.watch_read(sock.fileno(), lambda: self._from_outside(sock))
        try:
            sock.sendto(payload, target)
        except OSError:
            return  # dropped
        self._sent_to.add(target)

    def _from_outside(self, sock: socket.socket) -> None:
        for _ in range(BATCH):
            try:
                data, source = sock.recvfrom(DATAGRAM)
            except OSError:
                return
            source = (literal(source[0]) or source[0], source[1])
            if source not in self._sent_to or self._client is None:
                continue
            try:
                self._inner.sendto(datagram(source[0], source[1], data), self._client)
            except OSError:
                pass  # dropped

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for destination in self._destinations.values():
            destination.cancel()
        for sock in (self._inner, *self._outer.values()):
            self._hub.loop.unwatch_read(sock.fileno())
            sock.close()
        self._outer.clear()
