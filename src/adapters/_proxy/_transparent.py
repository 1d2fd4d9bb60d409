"""Transparent TCP's connections: those the process's namespace redirected to the transparent
listener, from programs that ignore the proxy's variables.

Where a connection was going is read from the socket (``SO_ORIGINAL_DST``: the destination
before netfilter's redirect). A synthetic address (`_dns`) stands for the name the process's
resolver gave it to, so the core is asked about the name, as for a SOCKS5 CONNECT by name; an
address the process was never given (or any in that range, without a resolver) is refused, as
is a connection with no original destination or made to the listener itself (not redirected:
loopback is not). Any other address is asked about as it is. The core is asked with protocol
``socks5_tcp``, as the reference reports these connections; it may allow, and the room connects
to the addresses it asked about and moves bytes both ways, bounded as a tunnel's; or refuse, and
the connection is reset, with not a byte written (a refused ``connect()`` is what such a
program would have met). The client's first bytes wait in the kernel while the core is asked.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Callable
from enum import Enum, auto
from typing import Any

from ._dial import Dial
from ._dns import Names, synthetic
from ._hub import Hub, Verdict, client_label
from ._relay import Relay
from ._side import Side

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
SOCKADDR_IN = 16  # bytes of a struct sockaddr_in

# Where an accepted connection was going, before its redirect: (IP, port). Raises OSError when
# it cannot say (a connection not redirected, say).
OriginalDestination = Callable[[socket.socket], tuple[str, int]]


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """netfilter's record of ``sock``'s destination before a redirect (IPv4)."""
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, SOCKADDR_IN)
    if len(raw) < 8 or struct.unpack_from("=H", raw)[0] != socket.AF_INET:
        raise OSError(errno.EAFNOSUPPORT, "not an IPv4 destination")
    return socket.inet_ntop(socket.AF_INET, raw[4:8]), int.from_bytes(raw[2:4], "big")


class Phase(Enum):
    ASKING = auto()  # the name is resolved and the core asked
    DIALING = auto()
    RELAY = auto()


def _nothing() -> None:
    pass


class TransparentClient:
    def __init__(self, hub: Hub, proc: int, sock: socket.socket, address: Any,
                 listener: tuple[str, int], names: Names | None,
                 destination: OriginalDestination) -> None:
        self.proc = proc
        self._hub = hub
        self._phase = Phase.ASKING
        self._closed = False
        self._cancel_check: Callable[[], None] = _nothing
        self._dial: Dial | None = None
        self.upstream: Side | None = None
        self.client = Side(hub.loop, sock, hub.meter)
        self.client.on_error = self.close
        hub.opened(self)
        target = _target(sock, listener, names, destination)
        if target is None:
            self._refuse()
            return
        host, self._port = target
        cancel = hub.check(proc, "socks5_tcp", host, self._port, None, client_label(address),
                           self._verdict)
        if self._phase is Phase.ASKING and not self._closed:
            self._cancel_check = cancel

    def _verdict(self, verdict: Verdict) -> None:
        self._cancel_check = _nothing
        if not verdict.allow:
            self._refuse()
            return
        self._phase = Phase.DIALING
        self._dial = self._hub.dial(verdict.addresses, self._port, self._connected)

    def _connected(self, sock: socket.socket | None, why: str) -> None:
        self._dial = None
        if sock is None:
            self._refuse()
            return
        self._phase = Phase.RELAY
        self.upstream = Side(self._hub.loop, sock, self._hub.meter)
        Relay(self.client, self.upstream, self._hub.limits.buffer, self.close)

    def _refuse(self) -> None:
        """Reset the client's connection: nothing was written to it, and nothing will be."""
        try:
            self.client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                        struct.pack("ii", 1, 0))
        except OSError:
            pass  # closed all the same
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._cancel_check()
        if self._dial is not None:
            self._dial.cancel()
        self.client.close()
        if self.upstream is not None:
            self.upstream.close()
        self._hub.closed(self)


def _target(sock: socket.socket, listener: tuple[str, int], names: Names | None,
            destination: OriginalDestination) -> tuple[str, int] | None:
    """The host (a name, or an IP address's text) and port to ask about, if any."""
    try:
        ip, port = destination(sock)
    except OSError:
        return None
    if (ip, port) == listener:
        return None  # reached directly, not redirected
    if synthetic(ip):
        name = names.name_of(ip) if names is not None else None
        return None if name is None else (name, port)
    return ip, port
