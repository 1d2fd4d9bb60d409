"""`ServerCore`: the whole exec-server protocol as one pure state machine.

Events go in through `handle`, actions come out; `now` is an input and nothing here reads a
clock, a socket, a pipe or the environment. The same events at the same times give the same
actions, which is what lets a recorded trace be replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _jsonrpc, _params
from ._actions import Action
from ._config import Config, Host
from ._errors import SESSION_ATTACHED, LocalProtocolError, RpcError, invalid_request
from ._events import (
    ConnectionClosed,
    ConnectionOpened,
    Event,
    FsCompleted,
    HttpBodyReceived,
    HttpFinished,
    HttpResponded,
    MessageReceived,
    OutputReceived,
    ProcessExited,
    ProcessSpawned,
    SendBlocked,
    SendDrained,
    SpawnFailed,
    StreamClosed,
    Tick,
)
from ._jsonrpc import Id
from ._processes import ProcessHandlers
from ._services import ServiceHandlers
from ._session import Connection, Handshake, Session

NEED_INITIALIZE = "client must call initialize before using exec methods"
NEED_INITIALIZED = "client must send initialized before using exec methods"
ALREADY_INITIALIZED = "initialize may only be sent once per connection"

Handler = Callable[[Connection, Session, Id, Any], None]


class ServerCore(ProcessHandlers, ServiceHandlers):
    """The exec-server protocol. Drive it with `handle`; sleep until `next_deadline`."""

    def __init__(self, config: Config | None = None, host: Host | None = None) -> None:
        super().__init__(config or Config(), host or Host())
        self._event_handlers: dict[type, Callable[[Any], None]] = {
            ConnectionOpened: self._on_connection_opened,
            MessageReceived: self._on_message,
            ConnectionClosed: self._on_connection_closed,
            SendBlocked: self._on_send_blocked,
            SendDrained: self._on_send_drained,
            ProcessSpawned: self._on_spawned,
            SpawnFailed: self._on_spawn_failed,
            OutputReceived: self._on_output,
            StreamClosed: self._on_stream_closed,
            ProcessExited: self._on_exited,
            FsCompleted: self._on_fs_completed,
            HttpResponded: self._on_http_responded,
            HttpBodyReceived: self._on_http_body,
            HttpFinished: self._on_http_finished,
            Tick: self._on_tick,
        }
        fs = self._fs_call
        self._methods: dict[str, Handler] = {
            "process/start": self._process_start,
            "process/read": self._process_read,
            "process/write": self._process_write,
            "process/signal": self._process_signal,
            "process/terminate": self._process_terminate,
            "environment/info": self._environment_info,
            "fs/readFile": lambda c, s, i, p: fs(c, s, i, p, "fs/readFile"),
            "fs/writeFile": lambda c, s, i, p: fs(c, s, i, p, "fs/writeFile"),
            "fs/createDirectory": lambda c, s, i, p: fs(c, s, i, p, "fs/createDirectory"),
            "fs/getMetadata": lambda c, s, i, p: fs(c, s, i, p, "fs/getMetadata"),
            "fs/canonicalize": lambda c, s, i, p: fs(c, s, i, p, "fs/canonicalize"),
            "fs/readDirectory": lambda c, s, i, p: fs(c, s, i, p, "fs/readDirectory"),
            "fs/remove": lambda c, s, i, p: fs(c, s, i, p, "fs/remove"),
            "fs/copy": lambda c, s, i, p: fs(c, s, i, p, "fs/copy"),
            "fs/readBlock": lambda c, s, i, p: fs(c, s, i, p, "fs/readBlock"),
            "fs/open": self._fs_open,
            "fs/close": self._fs_close,
            "http/request": self._http_request,
        }
        # Deadline kind -> what to do when it passes (see `_set_timer` callers for the keys).
        self._timer_handlers: dict[str, Callable[..., None]] = {
            "read": self._on_read_due,
            "kill": self._on_kill_due,
            "abandon": self._on_abandon_due,
            "evict": self._on_evict_due,
            "expire": self._on_session_expired,
        }

    def handle(self, event: Event, now: float) -> list[Action]:
        """Apply one event at time ``now`` (seconds, monotonic); return the actions, in order.

        Raises `LocalProtocolError` if the event is impossible (an adapter bug); the core's
        state is then unspecified. A peer's mistakes never raise: they become actions.
        """
        self._now = now
        self._actions = []
        try:
            handler = self._event_handlers[type(event)]
        except KeyError:
            raise LocalProtocolError(f"not an event: {event!r}") from None
        handler(event)
        return self._actions

    def next_deadline(self) -> float | None:
        """The earliest time a `Tick` is due, or None when nothing waits on time."""
        return self._timers.next_deadline()

    # -- connections and the handshake --------------------------------------------------------

    def _on_connection_opened(self, event: ConnectionOpened) -> None:
        if event.conn in self._conns:
            raise LocalProtocolError(f"connection {event.conn} is already open")
        self._conns[event.conn] = Connection(event.conn, event.session_id)

    def _on_connection_closed(self, event: ConnectionClosed) -> None:
        c = self._connection(event.conn)
        for read in list(c.reads.values()):
            self._cancel_read(read)
        self._drop_ops(c)
        session = c.session
        if session is not None:
            self._set_paused(session, False)  # detached output goes to the bounded logs
            session.conn = None
            self._set_timer(("expire", session.session_id), self.config.session_ttl)
        del self._conns[event.conn]

    def _on_message(self, event: MessageReceived) -> None:
        c = self._connection(event.conn)
        message = _jsonrpc.parse(event.data)
        if message is None:
            return
        if isinstance(message, _jsonrpc.Malformed):
            self._fail(c.conn, message.id, message.error)
            return
        try:
            self._dispatch(c, message)
        except RpcError as error:
            self._fail(c.conn, message.id, error)

    def _dispatch(self, c: Connection, message: _jsonrpc.Incoming) -> None:
        method, msg_id = message.method, message.id
        if c.handshake is Handshake.NEW:
            if method == "initialize":
                self._initialize(c, msg_id, message.params)
            elif msg_id is not None:
                raise invalid_request(NEED_INITIALIZE)
            return
        if method == "initialize":
            raise invalid_request(ALREADY_INITIALIZED)
        if method == "initialized":
            c.handshake = Handshake.READY
            return
        if msg_id is None:
            return  # notifications other than `initialized` carry nothing the server acts on
        handler = self._methods.get(method)
        if handler is None:
            raise RpcError(-32601, f"method not found: {method}")
        if c.handshake is Handshake.INITIALIZING:
            raise invalid_request(NEED_INITIALIZED)
        assert c.session is not None
        handler(c, c.session, msg_id, message.params)

    def _initialize(self, c: Connection, msg_id: Id | None, raw: Any) -> None:
        p = _params.initialize(raw)
        if p.resume_session_id is None:
            if c.new_session_id in self._sessions:
                raise LocalProtocolError(f"session id {c.new_session_id} minted twice")
            session = Session(c.new_session_id)
            self._sessions[session.session_id] = session
        else:
            found = self._sessions.get(p.resume_session_id)
            if found is None:
                raise invalid_request(f"unknown session id {p.resume_session_id}")
            if found.conn is not None:
                raise RpcError(
                    SESSION_ATTACHED, f"session {p.resume_session_id} is already attached"
                )
            session = found
            self._timers.cancel(("expire", session.session_id))
        session.conn = c.conn
        c.session = session
        c.handshake = Handshake.INITIALIZING
        self._respond(
            c.conn,
            msg_id,
            {"sessionId": session.session_id, "environmentInfo": self.host.environment_info},
        )

    # -- flow control ---------------------------------------------------------------------------

    def _on_send_blocked(self, event: SendBlocked) -> None:
        c = self._connection(event.conn)
        c.blocked = True
        if c.session is not None:
            self._set_paused(c.session, True)

    def _on_send_drained(self, event: SendDrained) -> None:
        c = self._connection(event.conn)
        c.blocked = False
        if c.session is not None:
            self._set_paused(c.session, False)

    # -- time -----------------------------------------------------------------------------------

    def _on_tick(self, event: Tick) -> None:
        for key in self._timers.pop_due(self._now):
            assert isinstance(key, tuple)
            self._timer_handlers[key[0]](*key[1:])

    def _on_session_expired(self, session_id: str) -> None:
        session = self._sessions.pop(session_id)
        session.expired = True
        for process in list(session.processes.values()):
            if process.proc in self._procs:
                process.timed_out = True
                self._terminate(process)
            else:
                del session.processes[process.process_id]  # closed: nobody can read it now

