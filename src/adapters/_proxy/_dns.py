"""Transparent TCP's resolver: the DNS socket a process's namespace sends every question to,
answered with synthetic addresses so that a connection to one can be asked about by name.

An A question for a name gets an address from 198.18.0.0/15 (RFC 2544's benchmarking range,
never routed anywhere: no real destination is shadowed), the same one for the same name for as
long as the process runs, a new one for each new name, at most ``Limits.dns_names`` names a
process; past that a new name is REFUSED (the names it has keep their addresses). The table is
the process's alone (its namespace is too), so two processes may get the same address for
different names. AAAA and every other type get an empty NOERROR answer, so a resolver uses the
A record; a name that cannot be a host name (a byte other than a letter, digit, ``-`` or ``_``
in a label, or the root) or a class other than IN is REFUSED. Names are kept lower-cased, with
no trailing dot; the question goes back as it came (a resolver may have mixed its case on
purpose and checks it). Nothing is looked up here: the name is resolved, and the core asked,
when something connects to its address (`_transparent`).
"""

from __future__ import annotations

import ipaddress
import re
import socket

from .._loop import Loop
from ._dns_wire import CLASS_IN, MAX_QUERY, DnsError, Rcode, Type, answer, failure, parse
from ._lookups import valid_host

SYNTHETIC = ipaddress.IPv4Network("198.18.0.0/15")
_FIRST = int(SYNTHETIC.network_address) + 1  # the network's own address is never given
BATCH = 32  # questions answered per readiness, so one process cannot hold the loop
LABEL = re.compile(rb"[A-Za-z0-9_-]+")


def synthetic(ip: str) -> bool:
    """Whether ``ip`` is in the range synthetic addresses come from."""
    try:
        return ipaddress.ip_address(ip) in SYNTHETIC
    except ValueError:
        return False


class Names:
    """One process's names and the synthetic addresses they were given, both ways."""

    def __init__(self, bound: int) -> None:
        if not 0 < bound < SYNTHETIC.num_addresses - 1:
            raise ValueError(f"a bound of {bound} names does not fit {SYNTHETIC}")
        self._bound = bound
        self._index: dict[str, int] = {}
        self._names: list[str] = []

    def __len__(self) -> int:
        return len(self._names)

    def address_of(self, name: str) -> bytes | None:
        """``name``'s address (packed), given now if it has none; None when the table is full."""
        index = self._index.get(name)
        if index is None:
            if len(self._names) >= self._bound:
                return None
            index = self._index[name] = len(self._names)
            self._names.append(name)
        return (_FIRST + index).to_bytes(4, "big")

    def name_of(self, ip: str) -> str | None:
        """The name ``ip`` was given to, if it was."""
        try:
            index = int(ipaddress.IPv4Address(ip)) - _FIRST
        except ValueError:
            return None
        return self._names[index] if 0 <= index < len(self._names) else None


def host_name(labels: tuple[bytes, ...]) -> str | None:
    """The name a question asks about, lower-cased, if it can be a host's."""
    if not labels or not all(LABEL.fullmatch(label) for label in labels):
        return None
    name = b".".join(labels).decode("ascii").lower()
    return name if valid_host(name) else None


def respond(data: bytes, names: Names, ttl: int) -> bytes | None:
    """The answer to the datagram ``data``, or None for none. Raises nothing."""
    try:
        query = parse(data)
    except DnsError as exc:
        return failure(data, exc.code)
    if query is None:
        return None
    name = host_name(query.labels)
    if query.qclass != CLASS_IN or name is None:
        return answer(query, Rcode.REFUSED)
    if query.qtype != Type.A:
        return answer(query, Rcode.NOERROR)
    address = names.address_of(name)
    if address is None:
        return answer(query, Rcode.REFUSED)
    return answer(query, Rcode.NOERROR, (address,), ttl)


class DnsResponder:
    """``sock`` (bound, in the process's namespace) answered on the loop from ``names``, each
    answer sent back from it to whoever asked. An answer the socket will not take now is
    dropped, as UDP may; the resolver asks again."""

    def __init__(self, loop: Loop, sock: socket.socket, names: Names, ttl: int) -> None:
        self._loop = loop
        self._sock = sock
        self._names = names
        self._ttl = ttl
        self._closed = False
        sock.setblocking(False)
        loop.watch_read(sock.fileno(), self._readable)

    def _readable(self) -> None:
        for _ in range(BATCH):
            if self._closed:
                return
            try:
                data, source = self._sock.recvfrom(MAX_QUERY + 1)  # one more shows too long
            except OSError:  # nothing more now (or an error the next readiness tells again)
                return
            reply = respond(data, self._names, self._ttl)
            if reply is not None:
                try:
                    self._sock.sendto(reply, source)
                except OSError:
                    pass  # dropped

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.unwatch_read(self._sock.fileno())
        self._sock.close()
