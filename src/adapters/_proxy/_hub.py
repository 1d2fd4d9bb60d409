"""What every proxied connection shares: the limits, the questions to the core, the lookups, the
dials, the count of buffered bytes and the register of open connections by process."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Protocol

import attrs

from execproto.netproxy import Brokered

from .._loop import Loop
from . import _question
from ._dial import Connected, Dial
from ._lookups import Lookups
from ._question import Question
from ._side import Meter

Refusal = tuple[int, list[tuple[str, str]], bytes]  # status, headers, body


@attrs.frozen
class Limits:
    # Bytes read from one side of a connection and not yet written to the other, each way:
    # four reads' worth, so a fast stream keeps moving while a slow reader holds at most this.
    buffer: int = 256 << 10
    per_process: int = 64  # open client connections of one process's (tunnels included)
    per_owner: int = 128  # of one owner's processes together (a session's: see `Hub.full`)
    total: int = 512  # open client connections in the room, but for owners below their share
    header_bytes: int = 32 << 10  # an HTTP request's (or an upstream response's) head
    request_timeout: float = 10.0  # seconds from the accept (or the last answer) to a request
    connect_timeout: float = 10.0  # seconds to connect upstream, every address tried
    lookup_timeout: float = 5.0  # seconds a name lookup may take; then it has no addresses
    lookups: int = 8  # name lookups running at once, abandoned ones included
    lookups_per_process: int = 2  # of those, one process's
    linger: float = 5.0  # seconds a last answer (a refusal, an error) may take to be written
    udp_destinations: int = 64  # verdicts one UDP association remembers
    udp_waiting: int = 8  # datagrams held for one destination while its verdict is asked
    dns_names: int = 4096  # names one process's transparent resolver gives addresses to
    # Seconds a synthetic address's answer may be cached. An address never changes while its
    # process runs, so caching gains nothing an answer (local, no lookup) costs; kept short so
    # that no cache in the sandbox holds one past a change of that, and not 0, which some
    # resolvers' caches take as "do not use" and some libraries reject.
    dns_ttl: int = 1


@attrs.frozen
class Verdict:
    allow: bool
    refusal: Refusal | None
    socks_code: int
    addresses: tuple[str, ...]  # the ones the question named: the only ones to connect to


class Handler(Protocol):
    proc: int

    def close(self) -> None: ...


class Hub:
    def __init__(self, loop: Loop, ask: Callable[[int, int, Question], None],
                 limits: Limits) -> None:
        self.loop = loop
        self.limits = limits
        self.meter = Meter()
        self._ask = ask
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[tuple[str, ...], Callable[[Verdict], None]]] = {}
        self.lookups = Lookups(loop, limits.lookups, limits.lookups_per_process,
                               limits.lookup_timeout)
        self.open: dict[int, set[Handler]] = {}
        self.count = 0
        # Whose each process is (its session's; by default its own), and how many connections
        # each owner has open: the room is shared by owner, so one session's many processes
        # hold no more of it than one.
        self.owners: dict[int, Hashable] = {}
        self.by_owner: Counter[Hashable] = Counter()
        self.on_closed: Callable[[int], None] = lambda proc: None
        # Each process's brokered credentials (credential masking), by process: what its
        # connections may put back, and where.
        self.credentials: dict[int, tuple[Brokered, ...]] = {}

    # -- questions -------------------------------------------------------------------------------

    def check(self, proc: int, protocol: _question.Protocol, host: str, port: int,
              method: str | None, client: str,
              then: Callable[[Verdict], None]) -> Callable[[], None]:
        """Resolve ``host``, ask the core, and hand its verdict to ``then``. Returns a cancel."""
        asked: list[int] = []

        def resolved(addresses: tuple[str, ...]) -> None:
            question_id = next(self._ids)
            asked.append(question_id)
            self._waiting[question_id] = (addresses, then)
            self._ask(proc, question_id, Question(protocol=protocol, host=host, port=port,
                                            method=method, client=client, addresses=addresses))

        cancel_lookup = self.lookups.resolve(self.owner(proc), host, port, resolved)

        def cancel() -> None:
            cancel_lookup()
            for question_id in asked:
                self._waiting.pop(question_id, None)

        return cancel

    def answer(self, question_id: int, allow: bool, refusal: Refusal | None,
               socks_code: int) -> None:
        waiting = self._waiting.pop(question_id, None)
        if waiting is not None:  # else its connection is gone: nothing to do
            addresses, then = waiting
            then(Verdict(allow, refusal, socks_code, addresses))

    @property
    def questions(self) -> int:
        return len(self._waiting)

    def dial(self, addresses: tuple[str, ...], port: int, then: Connected) -> Dial:
        return Dial(self.loop, addresses, port, self.limits.connect_timeout, then)

    # -- connections -----------------------------------------------------------------------------

    def owner(self, proc: int) -> Hashable:
        return self.owners.get(proc, proc)

    def opened(self, handler: Handler) -> None:
        self.open.setdefault(handler.proc, set()).add(handler)
        self.by_owner[self.owner(handler.proc)] += 1
        self.count += 1

    def closed(self, handler: Handler) -> None:
        held = self.open.get(handler.proc)
        if held is None or handler not in held:
            return
        held.discard(handler)
        if not held:
            del self.open[handler.proc]
        owner = self.owner(handler.proc)
        self.by_owner[owner] -= 1
        if not self.by_owner[owner]:
            del self.by_owner[owner]
        self.count -= 1
        self.on_closed(handler.proc)

    def full(self, proc: int) -> bool:
        """Whether ``proc`` may open no more connections now: at its own cap, its owner's, or
        the room's. A full room still takes an owner below its share of it (the total over
        the owners with connections, itself counted): so the owners that filled it hold it
        only while no one else asks, and the room never holds more than twice its total
        (what the full owners hold, under it, and the others' shares, under it too)."""
        owner = self.owner(proc)
        mine = self.by_owner[owner]
        if len(self.open.get(proc, ())) >= self.limits.per_process:
            return True
        if mine >= self.limits.per_owner:
            return True
        if self.count < self.limits.total:
            return False
        owners = len(self.by_owner) + (owner not in self.by_owner)
        return mine >= self.limits.total // owners or self.count >= 2 * self.limits.total


def client_label(address: tuple[str, int] | tuple[str, int, int, int]) -> str:
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

