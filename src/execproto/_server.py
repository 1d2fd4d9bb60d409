"""`ServerCore`: the whole exec-server protocol as one pure state machine.

Events go in through `handle`, actions come out; `now` is an input and nothing here reads a
clock, a socket, a pipe or the environment. The same events at the same times give the same
actions, which is what lets a recorded trace be replayed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs

from . import _descriptors, _host_params, _jsonrpc, _params, _shares
from ._config import Config, Host, announced_environment, inherited_environment
from ._errors import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    LocalProtocolError,
    RpcError,
    invalid_request,
)
from ._jsonrpc import Id
from ._lifecycle import Do, SessionInput, Timer, may_hold
from ._processes import ProcessHandlers
from ._proxying import ProxyHandlers
from ._records import Record
from ._services import ServiceHandlers
from ._session import Connection, Greeting, Handshake, Session
from ._stats import Stats
from .actions import Action, CloseCode, CloseConnection, EndSession
from .events import (
    ConnectionClosed,
    ConnectionOpened,
    Drain,
    Event,
    FinalizeFailed,
    MessageReceived,
    OutputReceived,
    ProcessExited,
    ProcessSpawned,
    ProxyAsked,
    SendBlocked,
    SendDrained,
    Shutdown,
    SpawnFailed,
    StdinWritten,
    StreamClosed,
    Tick,
)

if TYPE_CHECKING:
    from ._forwards import Forwarding
    from ._fs_service import FsService
    from ._http_service import HttpService

Handler = Callable[[Connection, Session, Id, Any], None]


@attrs.frozen(repr=False, eq=False, slots=False)
class Method(Record):
    """How one request method is served: params are parsed before the handshake is checked
    (so a malformed call gets its params error in any state), then ``run`` does the work.
    What else is known of it (the category its handshake errors name, whether it is an
    extension) is its entry in the registry, `_methods.METHODS`."""

    parse: Callable[[Any], Any]
    run: Handler


def _category(method: str) -> str:
    """The words a handshake error uses for ``method``'s kind: "exec", "filesystem", ... (the
    registry is loaded at the first such error: no start pays for it)."""
    from ._methods import METHODS

    return METHODS[method].category


@functools.cache
def _extensions() -> tuple[str, ...]:
    """The methods execproto serves beyond the reference's, from the registry (loaded at the
    first initialize)."""
    from ._methods import EXTENSION, METHODS

    return tuple(name for name, info in METHODS.items() if info.origin == EXTENSION)


# Events applied before the deadlines that passed (see `_handle`).
_BEFORE_DEADLINES = frozenset({ProcessExited})

# Bytes a message may have before the connection's initialize: its own is a few hundred.
MAX_BEFORE_INITIALIZE = 64 << 10

FORWARD_METHODS = ("forward/open", "forward/write", "forward/ack", "forward/close")
# The file calls: the fs methods, and the reads about the executor's own setup.
FS_METHODS = (
    "fs/readFile",
    "fs/writeFile",
    "fs/createDirectory",
    "fs/getMetadata",
    "fs/canonicalize",
    "fs/readDirectory",
    "fs/walk",
    "fs/remove",
    "fs/copy",
    "fs/open",
    "fs/readBlock",
    "fs/writeBlock",
    "fs/close",
    "fs/watchMissing",
    "environmentConfig/read",
    "capabilities/discoverV2",
    "capabilityRoots/discoverV1",
)
# The families few clients use: the file calls, forwarding and http/request. Each is made at
# its first call, or at its first event (a replayed trace's), when its handlers
# (`_fs_service`, `_forwards`, `_http_service`) and the classes of its events and actions are
# loaded: by family, its methods and the module of its events.
LATER: dict[str, tuple[tuple[str, ...], str]] = {
    "fs": (FS_METHODS, "._fs_events"),
    "forwards": (FORWARD_METHODS, "._forward_events"),
    "http": (("http/request",), "._http_events"),
}
_FAMILY_OF_METHOD = {method: family for family, (methods, _) in LATER.items()
                     for method in methods}
_FAMILY_OF_EVENTS = {__package__ + events: family for family, (_, events) in LATER.items()}


# Seconds a connection keeps its place however many come after it: an honest client sends
# initialize one round trip after its upgrade; a client's that never does are the first to go.
MAKE_ROOM_AFTER = 0.25


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class ServerCore(ProcessHandlers, ServiceHandlers, ProxyHandlers):
    """The exec-server protocol. Drive it with `handle`; sleep until `next_deadline`."""

    def __init__(self, config: Config | None = None, host: Host | None = None) -> None:
        config = config or Config()
        host = host or Host()
        # What initialize and environment/info announce, and what env policies inherit: the
        # host's, with the operator's PATH directories.
        host = attrs.evolve(host, environment_info=announced_environment(config, host),
                            env=inherited_environment(config, host))
        super().__init__(config, host)
        self._shutting_down = False
        self._error: BaseException | None = None
        # The `LATER` families, made at their first need (`_later`).
        self._fs: FsService | None = None
        self._forwarding: Forwarding | None = None
        self._http: HttpService | None = None
        # The reference checks of the events of a family made later (forwarding's).
        self._later_references: dict[type, Callable[[Any], None]] = {}
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
            StdinWritten: self._on_stdin_written,
            ProcessExited: self._on_exited,
            FinalizeFailed: self._on_finalize_failed,
            Shutdown: self._on_shutdown,
            Drain: self._on_drain,
            ProxyAsked: self._on_proxy_asked,
            Tick: self._on_tick,
        }
        self._methods: dict[str, Method] = {
            "process/start": Method(_params.start, self._process_start),
            "process/read": Method(_params.read, self._process_read),
            "process/write": Method(_params.write, self._process_write),
            "process/signal": Method(_params.signal, self._process_signal),
            "process/terminate": Method(_params.terminate, self._process_terminate),
            "process/ack": Method(_params.ack, self._process_ack),
            "process/resize": Method(_params.resize, self._process_resize),
            "environment/info": Method(_host_params.unit, self._environment_info),
            "environment/status": Method(_host_params.unit, self._environment_status),
            "session/end": Method(_host_params.unit, self._session_end),
        }
        # Counted by method (these, the `LATER` families', initialize, or "other"): `_stats`.
        self.stats = Stats(frozenset(self._methods) | {*_FAMILY_OF_METHOD, "initialize"})
        # What to do when a deadline passes, called with the subject of its key.
        self._timer_handlers: dict[Timer, Callable[..., None]] = {
            Timer.READ: self._on_read_due,
            Timer.KILL: self._on_kill_due,
            Timer.ABANDON: self._on_abandon_due,
            Timer.EVICT: self._on_evict_due,
            Timer.EXPIRE: self._on_session_expired,
            Timer.GREET: self._on_greet_due,
            Timer.DECIDE: self._on_decide_due,
        }

    def handle(self, event: Event, now: float) -> list[Action]:
        """Apply one event at time ``now`` (seconds, monotonic); return the actions, in order.

        Raises `LocalProtocolError` if the event is impossible (an adapter bug). An event naming
        a connection or process it cannot name, or a stream that is not open, is refused before
        anything is applied. Any exception that escapes (that error, or a bug of the core's own,
        which propagates unchanged) stops the core, as h11's ERROR state does: `error` holds it,
        `next_deadline` is None and every later call raises `LocalProtocolError` naming it,
        since a call cut short may have applied part of its work and lost the actions it made.
        A peer's mistakes never raise: they become actions.
        """
        if self._error is not None:
            raise LocalProtocolError(
                f"the core stopped after an earlier error: {_describe(self._error)}"
            ) from self._error
        try:
            return self._handle(event, now)
        except BaseException as exc:
            self._error = exc
            raise

    def _handle(self, event: Event, now: float) -> list[Action]:
        handler = self._event_handlers.get(type(event))
        if handler is None:
            handler = self._later_handler(event)
        self._check_references(event)
        self._now = now
        self._actions = []
        # Deadlines that passed come first: a message that arrives after a session's TTL must
        # find the session expired even if the adapter has not ticked yet. But an exit is a
        # fact of before now: a deadline's Signal (a kill grace's, an expired session's) must
        # not go to the process whose exit this very call reports (`Signal`).
        if type(event) in _BEFORE_DEADLINES:
            handler(event)
            self._run_due_timers()
        else:
            self._run_due_timers()
            handler(event)
        return self._actions

    def _check_references(self, event: Event) -> None:
        """Refuse, before the deadlines run, an event the deadlines cannot make possible: they
        never open a connection, issue a handle or reopen a stream, so the event would raise
        after them all the same, with their actions lost. One table lookup: output is the hot
        path."""
        check = _REFERENCES.get(type(event))
        if check is not None:
            check(self, event)
        elif (later := self._later_references.get(type(event))) is not None:
            later(event)

    def _later_handler(self, event: Event) -> Callable[[Any], None]:
        """The handler of an event of a `LATER` family's, which is made for it if it was not
        yet (an event for a call the core never made is refused all the same, by its check);
        anything else is no event."""
        family = _FAMILY_OF_EVENTS.get(type(event).__module__)
        if family is not None:
            self._later(family)
            handler = self._event_handlers.get(type(event))
            if handler is not None:
                return handler
        raise LocalProtocolError(f"not an event: {type(event).__name__}")

    def _later(self, family: str) -> None:
        """Make the `LATER` family ``family`` if it was not yet: its module, events and actions
        are loaded now, and its methods and event handlers join the core's."""
        if family == "fs" and self._fs is None:
            from ._fs_service import FsService

            fs = self._fs = FsService(self)
            self._event_handlers.update(fs.event_handlers())
            self._methods.update({name: Method(parse, run)
                                  for name, (parse, run) in fs.methods().items()})
        elif family == "forwards" and self._forwarding is None:
            from ._forwards import Forwarding

            forwarding = self._forwarding = Forwarding(self)
            handlers = forwarding.event_handlers()
            self._event_handlers.update(handlers)
            self._later_references.update(dict.fromkeys(handlers, forwarding.issued_stream))
            self._methods.update({name: Method(parse, run)
                                  for name, (parse, run) in forwarding.methods().items()})
        elif family == "http" and self._http is None:
            from ._http_service import HttpService, parse_http

            http = self._http = HttpService(self)
            self._event_handlers.update(http.event_handlers())
            self._methods["http/request"] = Method(parse_http, http.run)

    def _not_yet_open(self, event: ConnectionOpened) -> None:
        if event.conn in self._conns:
            raise LocalProtocolError(f"connection {event.conn} is already open")

    def _open_connection(self, event: Any) -> None:
        self._connection(event.conn)

    def _issued_process(self, event: Any) -> None:
        self._live_process(event.proc)

    def _open_stream(self, event: OutputReceived | StreamClosed) -> None:
        process = self._live_process(event.proc)
        if process is not None and event.stream not in process.life.open_streams:
            raise LocalProtocolError(f"process {event.proc}: {event.stream!r} is not open")

    def next_deadline(self) -> float | None:
        """The earliest time a `Tick` is due, or None when nothing waits on time (or the core
        has stopped: see `error`)."""
        if self._error is not None:
            return None
        return self._timers.next_deadline()

    @property
    def error(self) -> BaseException | None:
        """The exception that stopped the core, or None while it runs (see `handle`)."""
        return self._error

    def gauges(self) -> dict[str, float]:
        """What the server holds now, for an operator's metrics (with `stats`, the counts).
        Each collection is copied in one step, so another thread may call this between
        events (the GIL makes each copy whole)."""
        sessions = list(self._sessions.values())
        attached = len([s for s in sessions if s.conn is not None])
        handles = sum(len(c.fs_handles) for c in list(self._conns.values()))
        return {
            "connections": len(self._conns),
            "processes": len(self._procs),
            "sessions_attached": attached,
            "sessions_detached": len(sessions) - attached,
            "held_bytes": self._held_bytes,
            "stdin_backlog_bytes": self._stdin_total,
            "descriptors_in_use": _descriptors.PER_PROCESS * len(self._procs) + handles,
            "descriptor_budget": self._descriptor_budget or 0,
        }

    @property
    def idle(self) -> bool:
        """No process is spawned or starting that has not been finalized."""
        return not self._procs

    def greeting(self, conn: int) -> Greeting | None:
        """How connection ``conn``'s ``initialize`` was last answered (None: not yet, or no
        such connection): for the adapter's log line, as h11 exposes `their_http_version`."""
        c = self._conns.get(conn)
        return c.greeting if c is not None else None

    # -- connections and the handshake --------------------------------------------------------

    def _on_connection_opened(self, event: ConnectionOpened) -> None:
        if event.conn in self._conns:
            raise LocalProtocolError(f"connection {event.conn} is already open")
        c = Connection(event.conn, event.session_id, event.label, self._now,
                       _shares.keys_of(event.peer, event.identity))
        self._conns[event.conn] = c
        self.stats.connection_opened(c.conn)
        if self._shutting_down:
            self._close_connection(c, "server shutting down", CloseCode.GOING_AWAY)
        elif self._draining:
            self._close_connection(c, "server draining: it takes no new connections",
                                   CloseCode.GOING_AWAY)
        elif not self._room_for(c):
            reason = f"too many connections: at most {self.config.max_connections}"
            self._close_connection(c, reason, CloseCode.TRY_AGAIN_LATER)
        else:
            # A connection that never initializes would hold its place among max_connections
            # for as long as its client liked: it gets the handshake's time, then is closed.
            self._set_timer((Timer.GREET, c.conn), self.config.handshake_timeout)

    def _room_for(self, newcomer: Connection) -> bool:
        """Whether ``newcomer`` fits under ``max_connections``. When full, the oldest connection
        that has not sent ``initialize`` in `MAKE_ROOM_AFTER` seconds makes room (1013): so
        connections that never initialize cannot lock out a client that would. Else the oldest
        initialized one of the address holding the most, if that is more than half and not the
        newcomer's own address (1013): so one client's connections cannot lock out another's."""
        staying = [c for c in self._conns.values() if not c.closing]
        if len(staying) <= self.config.max_connections:
            return True
        for c in staying:  # oldest first
            if self._now - c.opened < MAKE_ROOM_AFTER:
                break  # and every later one is younger
            if c.handshake is Handshake.NEW and c is not newcomer:
                self._close_connection(
                    c, f"too many connections: at most {self.config.max_connections}, and "
                    "this one sent no initialize", CloseCode.TRY_AGAIN_LATER)
                return True
        initialized = [c for c in staying if c.handshake is not Handshake.NEW]
        held = _shares.count(c.keys for c in staying)
        candidates = dict.fromkeys(key for c in initialized for key in c.keys)
        key = _shares.yielding(held, newcomer.keys, candidates,
                               _shares.soft_share(self.config.max_connections))
        if key is None:
            return False
        oldest = next(c for c in initialized if key in c.keys)
        self._close_connection(
            oldest, f"too many connections from {_shares.describe(key)}: this one makes room "
            "for another client", CloseCode.TRY_AGAIN_LATER)
        return True

    def _on_drain(self, event: Drain) -> None:
        self._draining = True

    @property
    def draining(self) -> bool:
        """Whether a `Drain` (or `Shutdown`) came: no new processes or connections."""
        return self._draining or self._shutting_down

    def _on_shutdown(self, event: Shutdown) -> None:
        self._shutting_down = True
        if self._forwarding is not None:
            self._forwarding.stopped()
        for c in list(self._conns.values()):
            if not c.closing:
                self._close_connection(c, "server shutting down", CloseCode.GOING_AWAY)
        for process in list(self._procs.values()):
            self._terminate(process)

    def _on_connection_closed(self, event: ConnectionClosed) -> None:
        c = self._connection(event.conn)
        self._timers.cancel((Timer.GREET, c.conn))
        for read in list(c.reads.values()):
            self._cancel_read(read)
        self._drop_ops(c)
        if self._fs is not None:
            self._fs.closed(c)
        if self._forwarding is not None:
            self._forwarding.closed(c.conn)
        session = c.session
        if session is not None:
            session.detached_at = self._now
            self._carry_out_session(session, session.life.event(SessionInput.DETACHED))
        # Its questions are denied once its session is detached: no decision is then sent to
        # the connection that is gone.
        self._asks_closed(c.conn)
        del self._conns[event.conn]
        self.stats.connection_closed(event.conn)
        if session is not None:
            self._bound_detached()

    def _bound_detached(self) -> None:
        """Past ``max_detached_sessions``, the oldest detached session of the key holding the
        most expires now (its processes terminated, as at its TTL): so one client's sessions
        cannot make the sessions of others expire early, nor fill the memory."""
        detached = [s for s in self._sessions.values() if s.conn is None]
        if len(detached) <= self.config.max_detached_sessions:
            return
        held = _shares.count(s.keys for s in detached)
        key = max(held, key=held.__getitem__)  # the first of the most: the same at a replay
        oldest = min((s for s in detached if key in s.keys), key=lambda s: s.detached_at)
        self._timers.cancel((Timer.EXPIRE, oldest.session_id))
        self._on_session_expired(oldest.session_id)

    def _on_message(self, event: MessageReceived) -> None:
        c = self._connection(event.conn)
        if c.closing:
            return  # the adapter is closing it; whatever was still in flight is moot
        if c.handshake is Handshake.NEW and len(event.data) > MAX_BEFORE_INITIALIZE:
            # Nothing large is parsed or decoded for a client that has not said who it is:
            # four 45 MiB writes before initialize stalled every other client for seconds.
            self._close_connection(
                c, f"a message of {len(event.data)} bytes before initialize (at most "
                f"{MAX_BEFORE_INITIALIZE})", CloseCode.MESSAGE_TOO_BIG)
            return
        message = _jsonrpc.parse(event.data)
        if isinstance(message, _jsonrpc.Malformed):
            error = invalid_request(
                f"failed to parse JSON-RPC message from exec-server {c.label}: {message.detail}"
            )
            self._fail(c.conn, _jsonrpc.UNKNOWN_ID, error)
        elif isinstance(message, _jsonrpc.ClientResponse):
            if not self._on_client_response(c, message):
                self._close_connection(c, f"unexpected client response: {message.id!r}")
        elif message.id is None:
            self._on_notification(c, message.method)
        else:
            self.stats.request(c.conn, message.id, message.method, self._now)
            try:
                self._on_request(c, message.id, message.method, message.params)
            except RpcError as error:
                self._fail(c.conn, message.id, error)
            except MemoryError:  # this request's own need (a huge write's decoding, say)
                self._fail(c.conn, message.id,
                           RpcError(INTERNAL_ERROR, "out of memory handling the request"))

    def _on_notification(self, c: Connection, method: str) -> None:
        # The reference drops a connection that sends any notification but `initialized`, or
        # `initialized` too early; a client doing either is confused about the protocol.
        if method != "initialized":
            self._close_connection(c, f"unexpected notification: {method}")
        elif c.handshake is Handshake.NEW:
            self._close_connection(c, "received `initialized` notification before `initialize`")
        else:
            c.handshake = Handshake.READY

    def _on_request(self, c: Connection, msg_id: Id, method_name: str, raw: Any) -> None:
        if method_name == "initialize":
            if c.handshake is not Handshake.NEW:
                raise invalid_request("initialize may only be sent once per connection")
            try:
                self._initialize(c, msg_id, _params.initialize(raw))
            except RpcError as refused:
                c.greeting = Greeting(session_id=None, refused=refused.message)
                raise
            return
        method = self._methods.get(method_name)
        if method is None and method_name in _FAMILY_OF_METHOD:
            self._later(_FAMILY_OF_METHOD[method_name])
            method = self._methods.get(method_name)
        if method is None:
            raise RpcError(
                METHOD_NOT_FOUND, f"exec-server stub does not implement `{method_name}` yet"
            )
        params = method.parse(raw)
        if c.handshake is Handshake.NEW:
            raise invalid_request(
                f"client must call initialize before using {_category(method_name)} methods"
            )
        if c.handshake is Handshake.INITIALIZING:
            raise invalid_request(
                f"client must send initialized before using {_category(method_name)} methods"
            )
        assert c.session is not None
        method.run(c, c.session, msg_id, params)

    def _session_end(self, c: Connection, session: Session, msg_id: Id, _: None) -> None:
        """execproto's ``session/end``: the client is done. Answered, then its connection is
        closed (1000) and the session expires at once, its processes stopped as at its TTL,
        rather than waiting, detached, for a resume that will not come (and counting against
        the detached sessions others' need room among)."""
        session.ending = True
        self._respond(c.conn, msg_id, {})
        self._close_connection(c, "session ended", CloseCode.NORMAL_CLOSURE)

    def _close_connection(self, c: Connection, reason: str,
                          code: CloseCode = CloseCode.PROTOCOL_ERROR) -> None:
        c.closing = True
        self.stats.server_closed(code.name.lower())
        self._emit(CloseConnection(conn=c.conn, code=code, reason=reason))

    def _initialize(self, c: Connection, msg_id: Id, p: _params.InitializeParams) -> None:
        if p.resume_session_id is None:
            if c.new_session_id in self._sessions:
                raise LocalProtocolError(f"session id {c.new_session_id} minted twice")
            session = Session(c.new_session_id, c.keys)
            self._sessions[session.session_id] = session
            attach = SessionInput.CREATED
        else:
            found = self._sessions.get(p.resume_session_id)
            if found is None:
                raise invalid_request(f"unknown session id {p.resume_session_id}")
            session = found
            attach = SessionInput.RESUMED
        # Refused (-32010) while another connection holds it: `_lifecycle.SESSION_REFUSED`.
        todo = session.life.event(attach, c.conn)
        session.keys = c.keys  # a client that moved holds it from where it is now
        c.session = session
        c.handshake = Handshake.INITIALIZING
        self._timers.cancel((Timer.GREET, c.conn))
        session.acks = p.output_acks
        self._carry_out_session(session, todo)
        c.greeting = Greeting(session.session_id, resumed=attach is SessionInput.RESUMED)
        result: dict[str, Any] = {
            "sessionId": session.session_id,
            "environmentInfo": self.host.environment_info,
            # The methods beyond the reference's, named under "execproto" (a field the Codex
            # client ignores), so that a client can tell before it calls one (the reference
            # answers each with -32601).
            "execproto": {"methods": list(_extensions())},
        }
        if p.output_acks:
            # How much unacknowledged output a process may have before it is paused.
            window = {"bytes": self.config.retention_bytes, "chunks": self.config.retention_chunks}
            result["outputAcks"] = window
        self._respond(c.conn, msg_id, result)

    # -- flow control ---------------------------------------------------------------------------

    def _on_send_blocked(self, event: SendBlocked) -> None:
        c = self._connection(event.conn)
        c.blocked = True
        if c.session is not None:
            self._sync_session(c.session)
        if self._forwarding is not None:
            self._forwarding.blocked(c.conn)

    def _on_send_drained(self, event: SendDrained) -> None:
        c = self._connection(event.conn)
        c.blocked = False
        if c.session is not None:
            self._sync_session(c.session)
        if self._forwarding is not None:
            self._forwarding.blocked(c.conn)

    # -- time -----------------------------------------------------------------------------------

    def _on_tick(self, event: Tick) -> None:
        """Nothing to do: `handle` has already run every deadline up to now."""

    def _run_due_timers(self) -> None:
        while (key := self._timers.pop_due(self._now)) is not None:
            assert isinstance(key, tuple)
            self._timer_handlers[key[0]](*key[1:])

    def _on_greet_due(self, conn: int) -> None:
        c = self._conns[conn]  # a closed connection's deadline is cancelled with it
        if c.handshake is Handshake.NEW and not c.closing:
            self._close_connection(c, f"no initialize within {self.config.handshake_timeout:g} s",
                                   CloseCode.POLICY_VIOLATION)

    def _on_session_expired(self, session_id: str) -> None:
        session = self._sessions.pop(session_id)
        self._carry_out_session(session, session.life.event(SessionInput.EXPIRED))
        if self._forwarding is not None:
            self._forwarding.ended(session_id)
        self._emit(EndSession(session_id=session_id, ended=session.ending))

    # -- session follow-ups ---------------------------------------------------------------------

    def _carry_out_session(self, session: Session, todo: Iterable[Do]) -> None:
        """Perform a session transition's follow-ups, in the lifecycle's order."""
        for do in todo:
            if do is Do.HOLD_LIVE or do is Do.HOLD_LIVE_IF_ACKS:
                if do is Do.HOLD_LIVE or session.acks:
                    self._hold_live(session)
            elif do is Do.SYNC_PAUSED:
                # A resuming connection may have filled up on early error answers already.
                self._sync_session(session)
            elif do is Do.RECOUNT_HELD:
                self._sync_held()
            elif do is Do.SET_EXPIRE:
                ttl = 0.0 if session.ending else self.config.session_ttl
                self._set_timer((Timer.EXPIRE, session.session_id), ttl)
            elif do is Do.CANCEL_EXPIRE:
                self._timers.cancel((Timer.EXPIRE, session.session_id))
            elif do is Do.STOP_ALL:
                self._stop_all(session)
            else:  # pragma: no cover - SESSION_EVENTS names only the follow-ups above
                raise AssertionError(f"not a session follow-up: {do}")

    def _hold_live(self, session: Session) -> None:
        # Held output waits for the client's return (or its acks): nothing is dropped.
        for process in session.processes.values():
            if may_hold(process, process.proc in self._procs):
                process.hold()

    def _stop_all(self, session: Session) -> None:
        for process in list(session.processes.values()):
            if process.proc in self._procs:
                process.timed_out = True
                self._terminate(process)
            else:
                del session.processes[process.process_id]  # closed: nobody can read it now


# What each event names that must exist before anything runs (see `_check_references`).
_REFERENCES: dict[type, Callable[[ServerCore, Any], None]] = {
    ConnectionOpened: ServerCore._not_yet_open,
    MessageReceived: ServerCore._open_connection,
    ConnectionClosed: ServerCore._open_connection,
    SendBlocked: ServerCore._open_connection,
    SendDrained: ServerCore._open_connection,
    ProcessSpawned: ServerCore._issued_process,
    SpawnFailed: ServerCore._issued_process,
    ProcessExited: ServerCore._issued_process,
    FinalizeFailed: ServerCore._issued_process,
    OutputReceived: ServerCore._open_stream,
    StreamClosed: ServerCore._open_stream,
    StdinWritten: ServerCore._issued_process,
}
