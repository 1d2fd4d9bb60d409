"""The SOCKS5 listener's connections: no authentication, CONNECT, and UDP ASSOCIATE when the
process may use UDP; BIND and the rest are "command not supported". The bytes are parsed by
`_socks_wire`; a client has ``request_timeout`` from its accept to send its greeting and
request, and at most HELD bytes of them are held.

With credential masking, a CONNECT to a host where one of the process's credentials is bound
is opened, not relayed, as the reference opens it: once connected it is handed to the HTTP
proxy's code (`HttpClient.socks_tunnel`), which verifies the origin, replies, and speaks TLS
to the client with its CA's certificate for the host, putting each request's dummies back
toward their destinations.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from enum import Enum, auto
from functools import partial
from typing import Any

from execproto.netproxy import intercepts

from ._dial import Dial
from ._http_proxy import HttpClient
from ._hub import Hub, Verdict, client_label
from ._relay import Relay
from ._side import READ_SIZE, Side
from ._socks_wire import (
    NO_ACCEPTABLE,
    NO_AUTH,
    VERSION,
    Code,
    Command,
    Request,
    SocksError,
    greeting,
    reply,
    request,
)
from ._udp import UdpRelay

HELD = 512  # bytes of greeting and request held at most (each is under 263)


class Phase(Enum):
    GREETING = auto()
    REQUEST = auto()
    ASKING = auto()  # the core is asked, or the upstream dialled
    TUNNEL = auto()
    UDP = auto()  # the control connection of a UDP association
    LAST = auto()


def _nothing() -> None:
    pass


class SocksClient:
    def __init__(self, hub: Hub, proc: int, sock: socket.socket, address: Any,
                 listener: socket.socket, udp: bool) -> None:
        self.proc = proc
        self._hub = hub
        self._limits = hub.limits
        self._label = client_label(address)
        self._listener = listener
        self._udp_allowed = udp
        self._buf = bytearray()
        self._phase = Phase.GREETING
        self._closed = False
        self._cancel_check: Callable[[], None] = _nothing
        self._dial: Dial | None = None
        self._udp: UdpRelay | None = None
        self.upstream: Side | None = None
        self._asked: Request | None = None  # the CONNECT being dialled
        self.client = Side(hub.loop, sock, hub.meter)
        self.client.on_data, self.client.on_error = self._data, self.close
        self.client.budget = lambda: HELD - len(self._buf)
        self._timer = hub.loop.call_at(hub.loop.now() + self._limits.request_timeout,
                                       self.close)
        hub.opened(self)
        self.client.read(True)

    def _data(self, data: bytes) -> None:
        if not data:
            self.close()
        elif self._phase in (Phase.GREETING, Phase.REQUEST):
            self._buf += data
            try:
                self._step()
            except SocksError as exc:
                self._last(reply(exc.code) if self._phase is Phase.REQUEST else b"")
        # else: a UDP association's control connection, whose bytes mean nothing

    def _step(self) -> None:
        if self._phase is Phase.GREETING:
            got = greeting(bytes(self._buf))
            if got is None:
                return
            methods, used = got
            del self._buf[:used]
            if NO_AUTH not in methods:
                self._last(bytes((VERSION, NO_ACCEPTABLE)))
                return
            self.client.write(bytes((VERSION, NO_AUTH)))
            self._phase = Phase.REQUEST
        found = request(bytes(self._buf))
        if found is None:
            return
        asked, used = found
        del self._buf[:used]
        self._timer()
        self.client.read(False)
        self._phase = Phase.ASKING
        if asked.command == Command.CONNECT:
            self._cancel_check = self._hub.check(
                self.proc, "socks5_tcp", asked.host, asked.port, None, self._label,
                partial(self._verdict, asked))
        elif asked.command == Command.UDP_ASSOCIATE and self._udp_allowed:
            self._associate()
        else:
            self._last(reply(Code.COMMAND_NOT_SUPPORTED))

    def _verdict(self, asked: Request, verdict: Verdict) -> None:
        self._cancel_check = _nothing
        if not verdict.allow:
            self._last(reply(verdict.socks_code or Code.NOT_ALLOWED))
            return
        self._asked = asked
        self._dial = self._hub.dial(verdict.addresses, asked.port, self._connected)

    def _connected(self, sock: socket.socket | None, why: str) -> None:
        self._dial = None
        if sock is None:
            refused = why == errno.errorcode[errno.ECONNREFUSED]
            self._last(reply(Code.CONNECTION_REFUSED if refused else Code.HOST_UNREACHABLE))
            return
        self.upstream = Side(self._hub.loop, sock, self._hub.meter)
        bound = sock.getsockname()
        granted = reply(Code.SUCCEEDED, bound[0], bound[1])
        asked = self._asked
        if asked is not None and intercepts(self._hub.credentials.get(self.proc, ()),
                                            asked.host, asked.port):
            self._hand_over(asked, granted)
            return
        self.client.write(granted)
        self.upstream.write(bytes(self._buf))  # what the client sent ahead of the reply
        self._buf.clear()
        self._phase = Phase.TUNNEL
        Relay(self.client, self.upstream, self._limits.buffer, self.close)

    def _hand_over(self, asked: Request, granted: bytes) -> None:
        """A credential is bound where this CONNECT goes: the HTTP proxy's code opens it (TLS
        both ways, the origin verified), and this handler is done, its sockets the other's."""
        assert self.upstream is not None
        early = bytes(self._buf)
        self._buf.clear()
        self._closed = True
        HttpClient.socks_tunnel(self._hub, self.proc, self.client, self.upstream, self._label,
                                asked.host, asked.port, granted, early)
        self._hub.closed(self)

    def _associate(self) -> None:
        local = self.client.sock.getsockname()
        try:
            self._udp = UdpRelay(self._hub, self.proc, self._label,
                                 self.client.sock.getpeername()[0], self._listener, local[0])
        except OSError:
            self._last(reply(Code.GENERAL_FAILURE))
            return
        self._phase = Phase.UDP
        self.client.write(reply(Code.SUCCEEDED, *self._udp.address))
        self.client.budget = lambda: READ_SIZE
        self.client.read(True)  # the association lasts as long as this connection

    def _last(self, data: bytes) -> None:
        self._phase = Phase.LAST
        self._timer()
        self.client.read(False)
        self.client.write(data)
        self._timer = self._hub.loop.call_at(self._hub.loop.now() + self._limits.linger,
                                             self.close)
        self.client.end(self.close)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._timer()
        self._cancel_check()
        if self._dial is not None:
            self._dial.cancel()
        if self._udp is not None:
            self._udp.close()
        self.client.close()
        if self.upstream is not None:
            self.upstream.close()
        self._hub.closed(self)
