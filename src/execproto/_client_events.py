"""What `ClientCore.receive` and `ClientCore.connection_lost` report: plain records, no I/O."""

from __future__ import annotations

from typing import Any

import attrs

# A code for calls that failed because the connection went away before they were answered and
# could not be sent again safely (see `ClientCore`). Outside JSON-RPC's reserved range.
CONNECTION_LOST = -1


@attrs.frozen(kw_only=True)
class Ready:
    """The handshake is done; ``resumed`` when an earlier session was taken up again."""

    session_id: str
    resumed: bool
    environment_info: Any


@attrs.frozen(kw_only=True)
class HandshakeFailed:
    """``initialize`` was refused. ``retry``: the session is still attached to a connection
    the server has not yet seen drop, so the same resume may succeed a moment later."""

    code: int
    message: str
    retry: bool


@attrs.frozen(kw_only=True)
class SessionLost:
    """The session is gone (expired, or the server restarted): its processes are out of reach."""

    message: str


@attrs.frozen(kw_only=True)
class Response:
    """The result of the call ``call_id``."""

    call_id: int
    method: str
    result: Any


@attrs.frozen(kw_only=True)
class Failure:
    """The error answer to the call ``call_id`` (or `CONNECTION_LOST`)."""

    call_id: int
    method: str
    code: int
    message: str
    data: Any = None


@attrs.frozen(kw_only=True)
class Output:
    """A chunk of a process's output, delivered in seq order exactly once."""

    process_id: str
    seq: int
    stream: str
    data: bytes


@attrs.frozen(kw_only=True)
class Exited:
    """The process's direct child terminated. Output may still follow (from descendants)."""

    process_id: str
    exit_code: int | None


@attrs.frozen(kw_only=True)
class Closed:
    """Exited, and every output pipe is at EOF: the process's last event."""

    process_id: str
    exit_code: int | None
    failure: str | None


@attrs.frozen(kw_only=True)
class OutputLost:
    """The server no longer retained output of seqs between ``after_seq`` and ``before_seq``
    (both exclusive) when the client came back for it."""

    process_id: str
    after_seq: int
    before_seq: int


@attrs.frozen(kw_only=True)
class HttpBodyDelta:
    """A piece of a streamed ``http/request`` response body."""

    request_id: str
    seq: int
    data: bytes
    done: bool
    error: str | None


@attrs.frozen(kw_only=True)
class ServerMisbehaved:
    """A frame from the server that is not a message this client understands. The connection
    stays up; the frame is ignored."""

    detail: str


ClientEvent = (
    Ready
    | HandshakeFailed
    | SessionLost
    | Response
    | Failure
    | Output
    | Exited
    | Closed
    | OutputLost
    | HttpBodyDelta
    | ServerMisbehaved
)
