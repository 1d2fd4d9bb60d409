"""Events: what happened, reported by an adapter to `ServerCore.handle`.

Every event is an instance of a subclass of `Event`; `EVENT_TYPES` lists them all, in the order
they are defined here (then those of the families made at their first use: the file calls',
`_fs_events`, forwarding's, `_forward_events`, and http's), and is derived from the classes, so
adding an event is adding its class.
`ServerCore.handle` refuses anything else with `LocalProtocolError`.

Handles: ``conn`` is chosen by the adapter (any int unique among its open connections); ``proc``
and ``op`` are chosen by the core, in `Spawn`, `RunFs` and `RunHttp` actions, and come back here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import attrs

from ._records import Record, later_names

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

if TYPE_CHECKING:
    # Only a field's type: the proxy's policy is loaded at the first start that launches one.
    from ._netproxy import Question

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


# The events of the families few clients use (forwarding, execproto's extension, http/request
# and the file calls) are made at their first use, not at every start: each is found in its
# module when it is first asked for here.
_LATER = {
    **dict.fromkeys(("FsCompleted", "MissingChanged"), "_fs_events"),
    **dict.fromkeys(("ForwardConnected", "ForwardEnded", "ForwardFailed", "ForwardReceived",
                     "ForwardUnrouted", "ForwardWritten"), "_forward_events"),
    **dict.fromkeys(("HttpBodyReceived", "HttpFinished", "HttpResponded"), "_http_events"),
}

if TYPE_CHECKING:
    from ._forward_events import ForwardConnected as ForwardConnected
    from ._forward_events import ForwardEnded as ForwardEnded
    from ._forward_events import ForwardFailed as ForwardFailed
    from ._forward_events import ForwardReceived as ForwardReceived
    from ._forward_events import ForwardUnrouted as ForwardUnrouted
    from ._forward_events import ForwardWritten as ForwardWritten
    from ._fs_events import FsCompleted as FsCompleted
    from ._fs_events import MissingChanged as MissingChanged
    from ._http_events import HttpBodyReceived as HttpBodyReceived
    from ._http_events import HttpFinished as HttpFinished
    from ._http_events import HttpResponded as HttpResponded

    # Every event class: those defined above, then those made later.
    EVENT_TYPES: tuple[type[Event], ...]


__getattr__ = later_names(globals(), _LATER, Event, "EVENT_TYPES")
