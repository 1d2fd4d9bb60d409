"""Sessions and connections: who owns which processes, and who is listening.

A session outlives its connection: when the connection drops the session detaches, its processes
keep running into their logs, and a new connection may resume it within the TTL. The rules of
attaching, detaching and expiring are in `_lifecycle`, and so is the state they rule (`life`).
"""

from __future__ import annotations

import enum

import attrs

from ._jsonrpc import Id
from ._lifecycle import SessionLife
from ._process import Process
from ._records import Record
from ._shares import Keys


class Handshake(enum.Enum):
    NEW = "new"  # nothing yet: only `initialize` is allowed
    INITIALIZING = "initializing"  # `initialize` answered; waiting for `initialized`
    READY = "ready"


@attrs.frozen(repr=False, eq=False, slots=False)
class Greeting(Record):
    """How a connection's ``initialize`` was last answered: the session it attached to, new or
    resumed, or why it was refused. Read by the adapter for its log line (`ServerCore.greeting`),
    so that it need not read the messages itself."""

    session_id: str | None  # None: refused
    resumed: bool = False
    refused: str | None = None


class Session:
    __slots__ = ("session_id", "life", "processes", "acks", "keys", "detached_at", "ending")

    def __init__(self, session_id: str, keys: Keys = ()) -> None:
        self.session_id = session_id
        # Whose shares it and its processes count in: its connection's, the last to attach it.
        self.keys = keys
        self.detached_at = 0.0  # when it last detached: the oldest yields first
        # Its client ended it (``session/end``): once detached it expires at once, not at its
        # TTL, as nobody will resume it.
        self.ending = False
        # Attached, detached or expired, and to which connection: written only by `life.event`.
        self.life = SessionLife(session_id)
        # The client acknowledges output: every log holds what is not yet acknowledged.
        self.acks = False
        # processId -> process. A closed process stays here (readable) until it is evicted.
        self.processes: dict[str, Process] = {}

    @property
    def conn(self) -> int | None:
        """Its connection while attached, else None."""
        return self.life.conn


class PendingRead:
    """A long-poll ``process/read`` waiting for output, exit, close or its deadline."""

    __slots__ = ("token", "conn", "id", "process", "after_seq", "max_bytes")

    def __init__(
        self, token: int, conn: int, id: Id, process: Process, after_seq: int, max_bytes: int | None
    ) -> None:
        self.token = token
        self.conn = conn
        self.id = id
        self.process = process
        self.after_seq = after_seq
        self.max_bytes = max_bytes


class Connection:
    __slots__ = (
        "conn",
        "opened",
        "new_session_id",
        "label",
        "closing",
        "handshake",
        "session",
        "blocked",
        "reads",
        "starts",
        "ops",
        "fs_handles",
        "http_streams",
        "greeting",
        "keys",
    )

    def __init__(self, conn: int, new_session_id: str, label: str, opened: float = 0.0,
                 keys: Keys = ()) -> None:
        self.conn = conn
        self.keys = keys  # its client's address (and token identity): see `_shares`
        self.opened = opened  # when the adapter reported it open
        self.new_session_id = new_session_id
        self.label = label
        # The core asked the adapter to close it (a protocol violation); ignore what follows.
        self.closing = False
        self.handshake = Handshake.NEW
        self.session: Session | None = None
        # The adapter reported its send buffer full: output of this session's processes is paused.
        self.blocked = False
        # Everything that would answer on this connection later, so closing it cancels them all.
        self.reads: dict[int, PendingRead] = {}
        self.starts: dict[int, Id] = {}  # proc -> request id of its process/start
        self.ops: set[int] = set()
        self.fs_handles: set[str] = set()
        self.http_streams: dict[str, int] = {}  # requestId -> op, while streaming
        self.greeting: Greeting | None = None  # once an `initialize` has been answered
