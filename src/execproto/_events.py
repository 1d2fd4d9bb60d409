"""Events: what happened, reported by an adapter to `ServerCore.handle`.

Handles: ``conn`` is chosen by the adapter (any int unique among its open connections); ``proc``
and ``op`` are chosen by the core, in `Spawn`, `RunFs` and `RunHttp` actions, and come back here.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._errors import RpcError


@attrs.frozen(kw_only=True)
class ConnectionOpened:
    conn: int
    # Minted by the adapter (the core has no randomness); used if this connection starts a new
    # session rather than resuming one.
    session_id: str
    # Who is on the other end, for messages: "websocket 127.0.0.1:50312", "stdio".
    label: str = "client"


@attrs.frozen(kw_only=True)
class MessageReceived:
    conn: int
    data: bytes | str


@attrs.frozen(kw_only=True)
class ConnectionClosed:
    conn: int


@attrs.frozen(kw_only=True)
class SendBlocked:
    """The connection's outgoing buffer is over the adapter's high-water mark."""

    conn: int


@attrs.frozen(kw_only=True)
class SendDrained:
    """The connection's outgoing buffer is back under the adapter's low-water mark."""

    conn: int


@attrs.frozen(kw_only=True)
class ProcessSpawned:
    proc: int
    pid: int


@attrs.frozen(kw_only=True)
class SpawnFailed:
    proc: int
    # The OS error text, shown to the client, e.g. "No such file or directory (os error 2)".
    error: str
    # The client's error data.kind: "spawnNotFound" (ENOENT), "spawnPermissionDenied" (EACCES)
    # or "spawnFailed" (anything else).
    kind: str = "spawnFailed"
    # The backend refused the request (it cannot enforce it): -32602, and nothing was started.
    refused: bool = False


@attrs.frozen(kw_only=True)
class OutputReceived:
    proc: int
    stream: str
    data: bytes


@attrs.frozen(kw_only=True)
class StreamClosed:
    proc: int
    stream: str


@attrs.frozen(kw_only=True)
class ProcessExited:
    """The direct child terminated (observed without reaping it)."""

    proc: int
    # As subprocess reports it: the exit status, or minus the signal number that killed it.
    returncode: int


@attrs.frozen(kw_only=True)
class FinalizeFailed:
    """The backend's finalize hook failed for a process the core had finalized.

    Recorded as the process's ``failure`` (shown by ``process/read``) while it is still readable.
    """

    proc: int
    error: str


@attrs.frozen(kw_only=True)
class FsCompleted:
    op: int
    result: Any = None
    error: RpcError | None = None


@attrs.frozen(kw_only=True)
class MissingChanged:
    """A `WatchMissing` watch saw a missing path appear (or its present path go)."""

    watch: int


@attrs.frozen(kw_only=True)
class HttpResponded:
    """An ``http/request`` got its status and headers (and, unless streaming, its body)."""

    op: int
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""


@attrs.frozen(kw_only=True)
class HttpBodyReceived:
    op: int
    data: bytes


@attrs.frozen(kw_only=True)
class HttpFinished:
    """The request is over: the streamed body ended, or the request failed (``error``)."""

    op: int
    error: str | None = None


@attrs.frozen(kw_only=True)
class Shutdown:
    """The server is stopping: close every connection and terminate every process.

    Processes go through the usual terminate (TERM, KILL after the grace, abandoned pipes after
    another), so each is still finalized exactly once; `ServerCore.idle` turns true when the
    last one is. Connections opened after this are closed at once.
    """


@attrs.frozen(kw_only=True)
class Tick:
    """A deadline from `ServerCore.next_deadline` may have passed. Harmless at any time."""


Event = (
    ConnectionOpened
    | MessageReceived
    | ConnectionClosed
    | SendBlocked
    | SendDrained
    | ProcessSpawned
    | SpawnFailed
    | OutputReceived
    | StreamClosed
    | ProcessExited
    | FinalizeFailed
    | FsCompleted
    | MissingChanged
    | HttpResponded
    | HttpBodyReceived
    | HttpFinished
    | Shutdown
    | Tick
)

EVENT_TYPES: tuple[type, ...] = (
    ConnectionOpened,
    MessageReceived,
    ConnectionClosed,
    SendBlocked,
    SendDrained,
    ProcessSpawned,
    SpawnFailed,
    OutputReceived,
    StreamClosed,
    ProcessExited,
    FinalizeFailed,
    FsCompleted,
    MissingChanged,
    HttpResponded,
    HttpBodyReceived,
    HttpFinished,
    Shutdown,
    Tick,
)
