"""SOCKS5's wire format (RFC 1928), sans-I/O: the greeting, a request, a reply, and the header
of a UDP datagram. A parser returns None while it needs more bytes, and raises `SocksError`
(with the reply code due) when the bytes are not SOCKS5."""

from __future__ import annotations

import socket
from enum import IntEnum

import attrs

from ._lookups import valid_host

VERSION = 5
NO_AUTH, NO_ACCEPTABLE = 0x00, 0xFF


class Code(IntEnum):
    SUCCEEDED = 0
    GENERAL_FAILURE = 1
    NOT_ALLOWED = 2
    NETWORK_UNREACHABLE = 3
    HOST_UNREACHABLE = 4
    CONNECTION_REFUSED = 5
    TTL_EXPIRED = 6
    COMMAND_NOT_SUPPORTED = 7
    ADDRESS_TYPE_NOT_SUPPORTED = 8


class Command(IntEnum):
    CONNECT = 1
    BIND = 2
    UDP_ASSOCIATE = 3


class SocksError(Exception):
    """The client's bytes are not SOCKS5: answer ``code`` (if a reply is due) and close."""

    def __init__(self, code: Code) -> None:
        super().__init__(code.name)
        self.code = code


@attrs.frozen
class Request:
    command: int
    host: str  # lower-cased name, or an IP address's text
    port: int


def greeting(buf: bytes) -> tuple[bytes, int] | None:
    """(the methods offered, bytes used), or None for more."""
    if len(buf) < 2:
        return None
    if buf[0] != VERSION:
        raise SocksError(Code.GENERAL_FAILURE)
    end = 2 + buf[1]
    return (bytes(buf[2:end]), end) if len(buf) >= end else None


def address(buf: bytes, at: int) -> tuple[str, int, int] | None:
    """(host, port, end) of the address whose type byte is at ``at``, or None for more."""
    if len(buf) <= at:
        return None
    kind = buf[at]
    if kind == 1:
        end = at + 1 + 4
        host = socket.inet_ntop(socket.AF_INET, bytes(buf[at + 1:end])) if len(buf) >= end else ""
    elif kind == 4:
        end = at + 1 + 16
        host = socket.inet_ntop(socket.AF_INET6, bytes(buf[at + 1:end])) if len(buf) >= end else ""
    elif kind == 3:
        if len(buf) <= at + 1:
            return None
        end = at + 2 + buf[at + 1]
        try:
            host = bytes(buf[at + 2:end]).decode("ascii").lower()
        except UnicodeDecodeError:
            raise SocksError(Code.GENERAL_FAILURE) from None
        if len(buf) >= end and not valid_host(host):
            raise SocksError(Code.GENERAL_FAILURE)
    else:
        raise SocksError(Code.ADDRESS_TYPE_NOT_SUPPORTED)
    if len(buf) < end + 2:
        return None
    return host, int.from_bytes(buf[end:end + 2], "big"), end + 2


def request(buf: bytes) -> tuple[Request, int] | None:
    """(the request, bytes used), or None for more."""
    if len(buf) < 4:
        return None
    if buf[0] != VERSION or buf[2] != 0:
        raise SocksError(Code.GENERAL_FAILURE)
    found = address(buf, 3)
    if found is None:
        return None
    host, port, end = found
    return Request(command=buf[1], host=host, port=port), end


def packed(host: str, port: int) -> bytes:
    """An IP address and port as SOCKS5 writes them (type byte first)."""
    if ":" in host:
        head = b"\x04" + socket.inet_pton(socket.AF_INET6, host.split("%", 1)[0])
    else:
        head = b"\x01" + socket.inet_pton(socket.AF_INET, host)
    return head + port.to_bytes(2, "big")


def reply(code: int, host: str = "0.0.0.0", port: int = 0) -> bytes:
    return bytes((VERSION, code, 0)) + packed(host, port)


def parse_datagram(data: bytes) -> tuple[str, int, bytes] | None:
    """(host, port, payload) of a client's UDP datagram; None for a fragment or garbage."""
    if len(data) < 4 or data[0] or data[1] or data[2]:  # reserved, then fragment 0 only
        return None
    try:
        found = address(data, 3)
    except SocksError:
        return None
    if found is None:
        return None
    host, port, end = found
    return host, port, data[end:]


def datagram(host: str, port: int, payload: bytes) -> bytes:
    return b"\0\0\0" + packed(host, port) + payload
