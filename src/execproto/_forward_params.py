"""Params of the port-forwarding calls (execproto's extension), and where a stream may go.

``forward/open {port, host?, sessionId?}``, ``forward/write {streamId, dataBase64?, eof?}``,
``forward/ack {streamId, seq}``, ``forward/close {streamId}``: the errors are the reference's
deserializer words where they apply (`_fields`), and the extension's own otherwise.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import attrs

from ._b64 import decode as b64decode
from ._errors import invalid_params
from ._fields import Fields
from ._records import Record

# One write's bytes at most: a client keeps several in flight, each answered once written.
MAX_WRITE = 1 << 20
# Bytes asked of one stream and not yet written (past it a write is refused: its target is not
# reading), and of all streams together.
MAX_WRITE_BACKLOG = 4 << 20
MAX_WRITE_TOTAL = 64 << 20


@attrs.frozen(repr=False, eq=False)
class OpenParams(Record):
    host: str  # an IP address, as the adapter connects to it
    port: int
    session_id: str | None  # whose network (None: the caller's own session)


@attrs.frozen(repr=False, eq=False)
class WriteParams(Record):
    stream_id: int
    data: bytes
    eof: bool


@attrs.frozen(repr=False, eq=False)
class AckParams(Record):
    stream_id: int
    seq: int


@attrs.frozen(repr=False, eq=False)
class CloseParams(Record):
    stream_id: int


def _port(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise invalid_params("port must be an integer from 1 to 65535")
    return value


def _host(value: Any) -> str:
    """An IP address (v4 or v6, without brackets) or ``localhost``, as 127.0.0.1: names are
    not looked up, so a stream goes where the client said and nowhere a lookup could lead."""
    if value == "localhost":
        return "127.0.0.1"
    if isinstance(value, str):
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            pass
    raise invalid_params("host must be an IP address or localhost")


def forward_open(params: Any) -> OpenParams:
    fields = Fields(params, "ForwardOpenParams")
    host = fields.optional("host", _host)
    return OpenParams(host=host or "127.0.0.1", port=fields.required("port", _port),
                      session_id=fields.opt_text("sessionId"))


def forward_write(params: Any) -> WriteParams:
    fields = Fields(params, "ForwardWriteParams")
    encoded = fields.opt_text("dataBase64") or ""
    if len(encoded) > (MAX_WRITE + 2) // 3 * 4:
        raise invalid_params(f"a forward/write carries at most {MAX_WRITE} bytes")
    return WriteParams(stream_id=fields.uint("streamId"), data=b64decode(encoded),
                       eof=fields.flag("eof", default=False))


def forward_ack(params: Any) -> AckParams:
    fields = Fields(params, "ForwardAckParams")
    return AckParams(stream_id=fields.uint("streamId"), seq=fields.uint("seq"))


def forward_close(params: Any) -> CloseParams:
    return CloseParams(stream_id=Fields(params, "ForwardCloseParams").uint("streamId"))


def host_route_refusal(network: str, allowed: bool, host: str, port: int,
                       listening: tuple[int, ...]) -> str | None:
    """Why a stream whose session's network the backend did not give may not go to the
    server host's loopback instead (None: it may). Only where the backend said the session's
    sandboxes have no network of their own (``network`` "none"), only when the operator
    allowed it (``allowed``: ``--forward-loopback``), only to a loopback address, and never
    to a port the server itself listens on (``listening``)."""
    if network != "none":
        return ("forward refused: the server's backend cannot tell where the session's "
                "network is, so no stream is opened")
    if not allowed:
        return ("forward refused: sandboxes here get no network of their own, and the server "
                "was not started with --forward-loopback")
    if not ipaddress.ip_address(host).is_loopback:
        return (f"forward refused: without a network of the session's own, only the server "
                f"host's loopback is reachable, not {host}")
    if port in listening:
        return f"forward refused: port {port} is the server's own"
    return None
