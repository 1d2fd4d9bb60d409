"""The proxy room: each process's listeners, and every connection accepted on them.

A listener is watched on the `Loop` while its process may open another connection: at
``Limits.per_process`` of its own open, ``Limits.per_owner`` of its session's, or the room's
``Limits.total`` with its session holding its share of the room (`Hub.full`), it is left
unwatched (the kernel's backlog holds who knocks) until one of them closes. So a process that
floods its proxy waits behind its own connections, and a session behind its own, never
another's. `close` ends a
process's listeners and connections; nothing it held stays open or watched.

With transparent TCP a process has two more sockets of its namespace: a listener its every
other TCP connection is redirected to (accepted as the others are, under the same caps:
`_transparent`), and a DNS socket its every question goes to (`_dns`), whose names the
listener's connections are asked about by.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Hashable
from enum import Enum, auto

import attrs

from execproto.netproxy import Brokered

from .._loop import Loop
from ._dns import DnsResponder, Names
from ._http_proxy import HttpClient
from ._hub import Hub, Limits, Refusal
from ._question import Question
from ._socks import SocksClient
from ._transparent import OriginalDestination, TransparentClient, original_destination

ACCEPTS = 16  # connections taken per readiness of one listener, so others get their turn
ACCEPT_RETRY = 0.1  # seconds between tries while accept() fails (out of descriptors, say)
DEFAULT_LIMITS = Limits()


class Kind(Enum):
    HTTP = auto()
    SOCKS = auto()
    TRANSPARENT = auto()


@attrs.define(eq=False)
class Listener:
    proc: int
    sock: socket.socket
    kind: Kind
    udp: bool
    watched: bool = False
    closed: bool = False


class ProxyRoom:
    """``ask(proc, question_id, question)``: what the core is asked, for ``proc``'s connection;
    its verdict comes back through `answer` with the same ``question_id``.
    ``original_destination``: where a transparent connection was going; netfilter's record of
    it unless a test has another way."""

    def __init__(self, loop: Loop, ask: Callable[[int, int, Question], None],
                 limits: Limits = DEFAULT_LIMITS,
                 original_destination: OriginalDestination = original_destination) -> None:
        self._loop = loop
        self._hub = Hub(loop, ask, limits)
        self._hub.on_closed = self._room_made
        self._original_destination = original_destination
        self._listeners: dict[int, list[Listener]] = {}  # by process
        self._names: dict[int, Names] = {}  # by process, with transparent TCP
        self._resolvers: dict[int, DnsResponder] = {}  # by process

    def listen(self, proc: int, http: socket.socket, socks: socket.socket | None,
               udp: bool, transparent: socket.socket | None = None,
               dns: socket.socket | None = None, owner: Hashable = None,
               credentials: tuple[Brokered, ...] = ()) -> None:
        """Serve ``proc``'s sockets (already bound, the TCP ones listening); the room owns them
        from now on. ``transparent`` and ``dns`` are transparent TCP's, made in the process's
        namespace: the listener its other connections are redirected to and the UDP socket its
        DNS questions are. ``credentials``: what credential masking brokers for ``proc`` (its
        connections put the real values back toward their destinations)."""
        if credentials:
            self._hub.credentials[proc] = credentials
        if owner is not None:
            self._hub.owners[proc] = owner
        held = self._listeners.setdefault(proc, [])
        if transparent is not None or dns is not None:
            names = self._names.setdefault(proc, Names(self._hub.limits.dns_names))
            if dns is not None:
                replaced = self._resolvers.pop(proc, None)
                if replaced is not None:
                    replaced.close()
                self._resolvers[proc] = DnsResponder(self._loop, dns, names,
                                                     self._hub.limits.dns_ttl)
        for sock, kind in ((http, Kind.HTTP), (socks, Kind.SOCKS),
                           (transparent, Kind.TRANSPARENT)):
            if sock is not None:
                sock.setblocking(False)
                listener = Listener(proc, sock, kind, udp)
                held.append(listener)
                self._watch(listener)

    def answer(self, question_id: int, allow: bool,
               refusal: Refusal | None, socks_code: int) -> None:
        """The core's verdict for a question ``ask`` was given; one no longer waited for (its
        connection closed meanwhile) is ignored."""
        self._hub.answer(question_id, allow, refusal, socks_code)

    def close(self, proc: int) -> None:
        """``proc`` ended: its listeners, its resolver (and the names it gave) and every
        connection it has are closed."""
        resolver = self._resolvers.pop(proc, None)
        if resolver is not None:
            resolver.close()
        self._names.pop(proc, None)
        for listener in self._listeners.pop(proc, []):
            listener.closed = True
            self._unwatch(listener)
            listener.sock.close()
        for handler in list(self._hub.open.get(proc, ())):
            handler.close()
        self._hub.owners.pop(proc, None)
        self._hub.credentials.pop(proc, None)

    def close_all(self) -> None:
        for proc in {*self._listeners, *self._resolvers, *self._hub.open}:
            self.close(proc)

    # -- what a test or a gauge reads ------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes read from one side of a connection and not yet written to the other, now."""
        return self._hub.meter.buffered

    @property
    def peak_buffered(self) -> int:
        """The most one direction of one connection has held."""
        return self._hub.meter.peak

    def names(self, proc: int) -> int:
        """Names ``proc``'s transparent resolver has given addresses to."""
        names = self._names.get(proc)
        return 0 if names is None else len(names)

    def connections(self, proc: int | None = None) -> int:
        return self._hub.count if proc is None else len(self._hub.open.get(proc, ()))

    @property
    def questions(self) -> int:
        """Questions asked and not yet answered (or given up)."""
        return self._hub.questions

    # -- accepting -------------------------------------------------------------------------------

    def _watch(self, listener: Listener) -> None:
        if not listener.closed and not listener.watched and not self._hub.full(listener.proc):
            listener.watched = True
            self._loop.watch_read(listener.sock.fileno(), lambda: self._ready(listener))

    def _unwatch(self, listener: Listener) -> None:
        if listener.watched:
            listener.watched = False
            self._loop.unwatch_read(listener.sock.fileno())

    def _ready(self, listener: Listener) -> None:
        for _ in range(ACCEPTS):
            if listener.closed:
                return
            if self._hub.full(listener.proc):
                self._unwatch(listener)  # watched again when one of its connections closes
                return
            try:
                sock, address = listener.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError:
                self._unwatch(listener)
                self._loop.call_at(self._loop.now() + ACCEPT_RETRY,
                                   lambda: self._watch(listener))
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if listener.kind is Kind.SOCKS:
                SocksClient(self._hub, listener.proc, sock, address, listener.sock, listener.udp)
            elif listener.kind is Kind.TRANSPARENT:
                TransparentClient(self._hub, listener.proc, sock, address,
                                  listener.sock.getsockname(), self._names.get(listener.proc),
                                  self._original_destination)
            else:
                HttpClient(self._hub, listener.proc, sock, address)

    def _room_made(self, proc: int) -> None:
        """A connection of ``proc``'s closed: its owner's listeners may accept again, and,
        while the room is full or was, every process's (each share changed)."""
        owner = self._hub.owner(proc)
        everyone = self._hub.count < 2 * self._hub.limits.total and (
            self._hub.count >= self._hub.limits.total - 1)
        for held_proc, held in self._listeners.items():
            if everyone or self._hub.owner(held_proc) == owner:
                for listener in held:
                    self._watch(listener)
