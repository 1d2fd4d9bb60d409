"""DNS messages (RFC 1035), sans-I/O, as far as a stub resolver's question needs: the header,
one question, and an answer of A records.

`parse` takes a datagram and gives a `Query`, or None when nothing should be answered (fewer
bytes than a header, or a response rather than a query); it raises `DnsError` with the code to
answer (`failure` writes it) when the header is readable but the rest is not a query this
responder can read. It raises nothing else, whatever the bytes: a name is read label by label
within the datagram, without compression (nothing precedes the question for a pointer to point
at), at most 255 bytes of it. What follows the question (an EDNS OPT record, say) is ignored;
the answer carries none.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import attrs

HEADER = struct.Struct("!HHHHHH")  # id, flags, then the four sections' counts
ANSWER = struct.Struct("!HHIH")  # after the name: type, class, TTL, data length
MAX_QUERY = 512  # a query larger than plain UDP DNS allows is not one a stub sends
MAX_NAME = 255  # a name's wire length, its terminating zero included
MAX_LABEL = 63

QR = 0x8000  # a response
AA = 0x0400  # authoritative: the answer is ours, not a cache's
RD = 0x0100  # recursion desired (copied back)
RA = 0x0080  # recursion available
OPCODE_SHIFT, OPCODE_MASK = 11, 0xF
QUERY = 0  # the standard query opcode
NAME_POINTER = 0xC00C  # the question's name, at the offset right after the header
CLASS_IN = 1


class Rcode(IntEnum):
    NOERROR = 0
    FORMERR = 1
    SERVFAIL = 2
    NXDOMAIN = 3
    NOTIMP = 4
    REFUSED = 5


class Type(IntEnum):
    A = 1
    AAAA = 28


class DnsError(Exception):
    """The datagram has a header but no query to answer: answer ``code`` (`failure`)."""

    def __init__(self, code: Rcode) -> None:
        super().__init__(code.name)
        self.code = code


@attrs.frozen
class Query:
    id: int
    flags: int  # the query's, for the bits an answer copies
    question: bytes  # the question as sent (name, type, class): echoed, letter case included
    labels: tuple[bytes, ...]  # the name's, as sent; the root's is ()
    qtype: int
    qclass: int


def parse(data: bytes) -> Query | None:
    if len(data) < HEADER.size:
        return None
    _, flags, questions, answers, authorities, _ = HEADER.unpack_from(data)
    if flags & QR:
        return None  # a response, never answered (two responders could bounce forever)
    if (flags >> OPCODE_SHIFT) & OPCODE_MASK != QUERY:
        raise DnsError(Rcode.NOTIMP)
    if len(data) > MAX_QUERY or questions != 1 or answers or authorities:
        raise DnsError(Rcode.FORMERR)
    labels: list[bytes] = []
    at = HEADER.size
    while True:
        if at >= len(data):
            raise DnsError(Rcode.FORMERR)
        size = data[at]
        if size == 0:
            at += 1
            break
        if size > MAX_LABEL:  # a compression pointer or an extended label type
            raise DnsError(Rcode.FORMERR)
        label = data[at + 1:at + 1 + size]
        if len(label) < size:
            raise DnsError(Rcode.FORMERR)
        labels.append(label)
        at += 1 + size
        if at - HEADER.size >= MAX_NAME:
            raise DnsError(Rcode.FORMERR)
    if at + 4 > len(data):
        raise DnsError(Rcode.FORMERR)
    qtype, qclass = struct.unpack_from("!HH", data, at)
    return Query(id=HEADER.unpack_from(data)[0], flags=flags,
                 question=bytes(data[HEADER.size:at + 4]), labels=tuple(labels),
                 qtype=qtype, qclass=qclass)


def _flags(query_flags: int, code: Rcode) -> int:
    opcode = query_flags & (OPCODE_MASK << OPCODE_SHIFT)
    return QR | opcode | AA | (query_flags & RD) | RA | code


def answer(query: Query, code: Rcode, addresses: tuple[bytes, ...] = (), ttl: int = 0) -> bytes:
    """The answer to ``query``: ``code``, its question, and an A record for each of
    ``addresses`` (4 bytes each) with ``ttl`` seconds to live."""
    out = bytearray(HEADER.pack(query.id, _flags(query.flags, code), 1, len(addresses), 0, 0))
    out += query.question
    for address in addresses:
        out += struct.pack("!H", NAME_POINTER)
        out += ANSWER.pack(Type.A, CLASS_IN, ttl, len(address))
        out += address
    return bytes(out)


def failure(data: bytes, code: Rcode) -> bytes:
    """The answer ``code`` to the datagram ``data`` (at least a header), without its question."""
    ident, flags = struct.unpack_from("!HH", data)
    return HEADER.pack(ident, _flags(flags, code), 0, 0, 0, 0)
