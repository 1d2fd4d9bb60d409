"""Client events: what `ClientCore.receive` and `ClientCore.connection_lost` report.

Every event is an instance of a subclass of `ClientEvent`; `CLIENT_EVENT_TYPES` lists them all,
in the order they are defined here. These are the client side's; the server core's are in
`execproto.events` (each an `Event`), and the two families share no class.

Calls: ``call_id`` is the id `ClientCore.request` (or ``start``, ``write``...) returned; each call
ends in exactly one `Response` or `Failure`. Processes: ``process_id`` is the id given to
`ClientCore.start`; a process's `Output`, `Exited` and `Closed` come in seq order, each once,
and `Closed` is its last.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = [
    "CLIENT_EVENT_TYPES",
    "CONNECTION_LOST",
    "ClientEvent",
    "Closed",
    "Exited",
    "Failure",
    "HandshakeFailed",
    "HttpBodyDelta",
    "Output",
    "OutputLost",
    "Ready",
    "Response",
    "ServerMisbehaved",
    "SessionLost",
]

# A `Failure.code` for calls that failed because the connection went away before they were
# answered and could not be sent again safely (see `ClientCore`). Outside JSON-RPC's reserved
# range.
CONNECTION_LOST = -1


class ClientEvent:
    """The base class of every client event. Never reported itself: only its subclasses are."""

    __slots__ = ()


@attrs.frozen(kw_only=True)
class Ready(ClientEvent):
    """The handshake is done; ``resumed`` when an earlier session was taken up again."""

    session_id: str
    resumed: bool
    environment_info: Any


@attrs.frozen(kw_only=True)
class HandshakeFailed(ClientEvent):
    """``initialize`` was refused. ``retry``: the session is still attached to a connection
    the server has not yet seen drop, so the same resume may succeed a moment later."""

    code: int
    message: str
    retry: bool


@attrs.frozen(kw_only=True)
class SessionLost(ClientEvent):
    """The session is gone (expired, or the server restarted): its processes are out of reach."""

    message: str


@attrs.frozen(kw_only=True)
class Response(ClientEvent):
    """The result of the call ``call_id``."""

    call_id: int
    method: str
    result: Any


@attrs.frozen(kw_only=True)
class Failure(ClientEvent):
    """The error answer to the call ``call_id`` (or `CONNECTION_LOST`)."""

    call_id: int
    method: str
    code: int
    message: str
    data: Any = None


@attrs.frozen(kw_only=True)
class Output(ClientEvent):
    """A chunk of a process's output, delivered in seq order exactly once."""

    process_id: str
    seq: int
    stream: str
    data: bytes


@attrs.frozen(kw_only=True)
class Exited(ClientEvent):
    """The process's direct child terminated. Output may still follow (from descendants)."""

    process_id: str
    exit_code: int | None


@attrs.frozen(kw_only=True)
class Closed(ClientEvent):
    """Exited, and every output pipe is at EOF: the process's last event."""

    process_id: str
    exit_code: int | None
    failure: str | None


@attrs.frozen(kw_only=True)
class OutputLost(ClientEvent):
    """The server no longer retained output of seqs between ``after_seq`` and ``before_seq``
    (both exclusive) when the client came back for it."""

    process_id: str
    after_seq: int
    before_seq: int


@attrs.frozen(kw_only=True)
class HttpBodyDelta(ClientEvent):
    """A piece of a streamed ``http/request`` response body."""

    request_id: str
    seq: int
    data: bytes
    done: bool
    error: str | None


@attrs.frozen(kw_only=True)
class ServerMisbehaved(ClientEvent):
    """A frame from the server that is not a message this client understands. The connection
    stays up; the frame is ignored (and the call it answers, if any, fails)."""

    detail: str


# Every client event class, from the definitions above (not ClientEvent.__subclasses__(): attrs
# replaces each class with a slotted copy, and the first one lingers there until collected).
CLIENT_EVENT_TYPES: tuple[type[ClientEvent], ...] = tuple(
    value
    for value in list(globals().values())
    if isinstance(value, type) and issubclass(value, ClientEvent) and value is not ClientEvent
)
