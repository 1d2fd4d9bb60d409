"""Events: what happened, reported by an adapter to `ServerCore.handle`.

Every event is an instance of a subclass of `Event`; `EVENT_TYPES` lists them all, in the order
they are defined here, and is derived from the classes below, so adding an event is adding its
class. `ServerCore.handle` refuses anything else with `LocalProtocolError`.

Handles: ``conn`` is chosen by the adapter (any int unique among its open connections); ``proc``
and ``op`` are chosen by the core, in `Spawn`, `RunFs` and `RunHttp` actions, and come back here.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ._errors import RpcError
from ._netproxy import Question
from ._records import Record

__all__ = [
    "EVENT_TYPES",
    "Encoded",
    "ConnectionClosed",
    "ConnectionOpened",
    "Drain",
    "ProxyAsked",
    "Event",
    "FinalizeFailed",
    "ForwardConnected",
    "ForwardEnded",
    "ForwardFailed",
    "ForwardReceived",
    "ForwardUnrouted",
    "ForwardWritten",
    "FsCompleted",
    "HttpBodyReceived",
    "HttpFinished",
    "HttpResponded",
    "MessageReceived",
    "MissingChanged",
    "OutputReceived",
    "ProcessExited",
    "ProcessSpawned",
    "SendBlocked",
    "SendDrained",
    "Shutdown",
    "SpawnFailed",
    "SpawnFailure",
    "Stream",
    "StdinWritten",
    "StreamClosed",
    "Tick",
]

# A process's output streams: "stdout" and "stderr" for a process with pipes, "pty" alone for
# one with a terminal (which merges the two).
Stream = Literal["stdout", "stderr", "pty"]

# How a spawn failed, as the client's error data.kind: "spawnNotFound" (ENOENT),
# "spawnPermissionDenied" (EACCES) or "spawnFailed" (anything else).
SpawnFailure = Literal["spawnNotFound", "spawnPermissionDenied", "spawnFailed"]


class Event(Record):
    """The base class of every event. Never fed to the core itself: only its subclasses are."""

    __slots__ = ()


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ConnectionOpened(Event):
    """A client connected (a websocket finished its upgrade, or stdio started).

    ``conn`` must not be open already. The client's first message decides whether the
    connection starts a new session or resumes one.
    """

    conn: int
    # Minted by the adapter (the core has no randomness); used if this connection starts a new
    # session rather than resuming one.
    session_id: str
    # Who is on the other end, for messages: "websocket 127.0.0.1:50312", "stdio".
    label: str = "client"
    # The client's address (an IP, no port; empty where there is none, as on stdio): the key
    # the shares of the server-wide caps are kept by (see `_shares`).
    peer: str = ""
    # Which of the server's tokens the client presented, a second key for the shares. There is
    # one token today, so the adapters leave it empty: every client is the same identity.
    identity: str = ""


@attrs.frozen(kw_only=True, repr=False, eq=False)
class MessageReceived(Event):
    """One whole message (a websocket text or binary message, or one stdio line) arrived.

    ``data`` is passed as received; the core parses it, and answers a frame that is not JSON-RPC
    with an error rather than raising.
    """

    conn: int
    data: bytes | str


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ConnectionClosed(Event):
    """The connection is gone, whoever closed it. Its session detaches and waits to be resumed."""

    conn: int


@attrs.frozen(kw_only=True, repr=False, eq=False)
class SendBlocked(Event):
    """The connection's outgoing buffer is over the adapter's high-water mark."""

    conn: int


@attrs.frozen(kw_only=True, repr=False, eq=False)
class SendDrained(Event):
    """The connection's outgoing buffer is back under the adapter's low-water mark."""

    conn: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ProcessSpawned(Event):
    """The process of a `Spawn` is running; ``pid`` is its process id (and process group)."""

    proc: int
    pid: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class SpawnFailed(Event):
    """The process of a `Spawn` could not be started. The core still emits its `Finalize`."""

    proc: int
    # The OS error text, shown to the client, e.g. "No such file or directory (os error 2)".
    error: str
    # The client's error data.kind.
    kind: SpawnFailure = "spawnFailed"
    # The backend refused the request (it cannot enforce it): -32602, and nothing was started.
    refused: bool = False


@attrs.frozen(kw_only=True, repr=False, eq=False)
class OutputReceived(Event):
    """A chunk of a process's output, read from ``stream`` (one still open).

    Fed once per read, so this is the hot path: the core keeps it in the process's log and sends
    it on to an attached client.
    """

    proc: int
    stream: Stream  # the core refuses one that is not open
    data: bytes


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class StreamClosed(Event):
    """``stream`` reached EOF. No output may follow on it."""

    proc: int
    stream: Stream


@attrs.frozen(kw_only=True, repr=False, eq=False)
class StdinWritten(Event):
    """``size`` more bytes that `WriteStdin` asked for reached the process's stdin, or were
    dropped because the process closed it (``closed``: nothing more can reach it); in order,
    never more than was asked for."""

    proc: int
    size: int
    closed: bool = False


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ProcessExited(Event):
    """The direct child terminated (observed without reaping it)."""

    proc: int
    # As subprocess reports it: the exit status, or minus the signal number that killed it.
    returncode: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class FinalizeFailed(Event):
    """The backend's finalize hook failed for a process the core had finalized.

    Recorded as the process's ``failure`` (shown by ``process/read``) while it is still readable.
    """

    proc: int
    error: str


@attrs.frozen(repr=False, eq=False)
class Encoded(Record):
    """A result the adapter wrote as JSON text itself (ASCII, one value), answered as it is.
    For the large ones: a walk's 50,000 entries as dicts were 300,000 small objects at once,
    whose memory the allocator kept after they were freed."""

    text: str


@attrs.frozen(kw_only=True, repr=False, eq=False)
class FsCompleted(Event):
    """A `RunFs` call (or a `WatchMissing` watch's first check) is done: its ``result``, the
    method's JSON result (or an `Encoded` one), or its ``error``, answered to the client as
    it is."""

    op: int
    result: Any = None
    error: RpcError | None = None


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class MissingChanged(Event):
    """A `WatchMissing` watch saw a missing path appear (or its present path go)."""

    watch: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class HttpResponded(Event):
    """An ``http/request`` got its status and headers (and, unless streaming, its body)."""

    op: int
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""


@attrs.frozen(kw_only=True, repr=False, eq=False)
class HttpBodyReceived(Event):
    """A piece of a streamed response body, after `HttpResponded` and before `HttpFinished`."""

    op: int
    data: bytes


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class HttpFinished(Event):
    """The request is over: the streamed body ended, or the request failed (``error``)."""

    op: int
    error: str | None = None


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ProxyAsked(Event):
    """Process ``proc``'s managed network proxy was asked for a connection (``question``: what
    to, resolved already). The core answers with `AnswerProxy` for the same ``ask``, at once or
    once the client's decider has answered. ``wall`` is the wall clock (seconds since the
    epoch), for the timestamp the client is told."""

    proc: int
    ask: int
    question: Question
    wall: float


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ForwardConnected(Event):
    """The stream of an `OpenForward` is connected: its bytes may move."""

    stream: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ForwardUnrouted(Event):
    """The backend gave no socket in the session's network for an `OpenForward`: the
    session's sandboxes get no network of their own here (``network`` "none": the backend
    said so) or the backend cannot say (``network`` "unknown": it has no
    ``session_socket``). ``listening``: the TCP ports the server's own process listens on,
    which a stream on the host's loopback must never reach. Nothing is kept of the stream."""

    stream: int
    network: Literal["none", "unknown"]
    listening: tuple[int, ...] = ()


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ForwardFailed(Event):
    """The stream could not connect, or broke (``error``, the OS's words: "Connection refused
    (os error 111)"). It is closed and forgotten already."""

    stream: int
    error: str


@attrs.frozen(kw_only=True, repr=False, eq=False)
class ForwardReceived(Event):
    """Bytes the stream's target sent."""

    stream: int
    data: bytes


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class ForwardEnded(Event):
    """The stream's target sent EOF: no `ForwardReceived` follows."""

    stream: int


@attrs.frozen(kw_only=True, repr=False, eq=False)
class ForwardWritten(Event):
    """``size`` more bytes of the `WriteForward` actions reached the target's socket, in
    order, never more than was asked."""

    stream: int
    size: int


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Drain(Event):
    """The server is going to stop (an orchestrator's SIGTERM): it starts no new process and
    takes no new connection, and goes on serving those it has, so running processes can finish
    and their output be read. `Shutdown` ends it, once `ServerCore.idle` or when the adapter's
    grace runs out."""


@attrs.frozen(kw_only=True, repr=False, eq=False, slots=False)
class Shutdown(Event):
    """The server is stopping: close every connection and terminate every process.

    Processes go through the usual terminate (TERM, KILL after the grace, abandoned pipes after
    another), so each is still finalized exactly once; `ServerCore.idle` turns true when the
    last one is. Connections opened after this are closed at once.
    """


@attrs.frozen(kw_only=True, repr=False, eq=False)
class Tick(Event):
    """A deadline from `ServerCore.next_deadline` may have passed. Harmless at any time."""


# Every event class, from the definitions above (not Event.__subclasses__(): attrs replaces
# each class with a slotted copy, and the first one lingers there until collected).
EVENT_TYPES: tuple[type[Event], ...] = tuple(
    value
    for value in list(globals().values())
    if isinstance(value, type) and issubclass(value, Event) and value is not Event
)
