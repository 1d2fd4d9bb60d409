"""Fuzz targets for the sans-IO core (`ServerCore.handle`).

Two targets, each a hypothesis test that pytest collects and that atheris can drive (see `main`):

- `test_client_messages`: whatever a client sends (arbitrary bytes, arbitrary text, JSON-RPC
  shapes with every method and wrongly typed, huge, deeply nested, badly encoded params), on a
  connection before, during and after the handshake. Every event the *adapter* feeds here is
  legal, so nothing at all may escape ``handle()``, not even `LocalProtocolError`.
- `test_event_sequences`: arbitrary adapter events, possible and impossible (output for a handle
  never issued, output after EOF, a second exit, a close of an unknown connection, ...), among
  clients' calls of every method of the registry (`execproto._methods`) and what those calls
  make possible (fs completions, watch firings, http answers and bodies, forward connects,
  data, EOFs and writes, stdin written), and the managed network proxy's: processes started
  with one (``networkProxy``), its questions (`ProxyAsked`, about hosts its policy allows,
  refuses and misses, and for processes without one or gone), the client's answers to its
  decider's ``network/policyRequest``. ``handle()`` returns actions or raises
  `LocalProtocolError`; after that error the core refuses every further call
  (`ServerCore.error`), so the example stops there. Otherwise the adapter then does its part
  (`settle`) and every call on an open connection must have been answered; then every client
  goes and every process ends (`wind_down`), and once time has run out the core must hold
  nothing (`leftovers`).

Both check every action they get: a `Send` is UTF-8 JSON-RPC 2.0 (a response has an id and
exactly one of result/error) addressed to an open connection; `Finalize` comes once per `Spawn`;
`Signal` and `ResizeTerminal` never target a process whose exit was reported (nor one not yet
spawned), and `ResizeTerminal` only a process with a terminal. The sequences check more: a call
is answered at most once; an op, watch or forward stream is never issued twice; forward actions
only for a live stream, pauses and resumes alternating; `CancelHttp` only for a running call;
`Unwatch` and `EndSession` once; `WriteStdin` only to a running process; each `ProxyAsked`
gets one `AnswerProxy` (by the end: a decider's silence times out), letting through only for a
process spawned with a proxy and not finalized, a SOCKS5 refusal a code and an HTTP one a
response; the server's one request, ``network/policyRequest``, is about the question just asked,
and each ``network/policyDecision`` about the one just answered. Both go to the process's own
session's client only: the connection that session is attached to now (which a resume moves),
never another client's, nor one that has closed, nor any while the session is detached (a
decision not either to a connection whose sending is blocked, a request not to one the core is
closing); and a session is attached to one connection at most.

Each example builds a fresh core (cheap next to generating the example), so examples are
independent and a failure replays from hypothesis' printed example alone.

Environment:
- ``EXECPROTO_FUZZ_EXAMPLES``: examples per target (default 1000, a few seconds, for ``make
  test``; ``make fuzz-long`` sets a million); the event sequences run two thirds of it (`SHARE`).
- ``EXECPROTO_FUZZ_BATCH`` (10000): examples per hypothesis run. A bigger budget is split into
  batches, each a fresh engine with its own seed, because one engine remembers every example it
  tried (about 12 KB each: a million would not fit in memory).
- ``EXECPROTO_FUZZ_WORKERS`` (all CPUs): processes running the batches.
- ``EXECPROTO_FUZZ_SEED``: rerun one failed batch (the failure report prints the command).

Under atheris (not a dependency): ``python fuzz/fuzz_core.py [libFuzzer flags]``. The first input
byte picks the target; the rest feeds hypothesis' ``fuzz_one_input``.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import random
import sys
import traceback
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import execproto
from execproto import (
    Action,
    AnswerProxy,
    CancelHttp,
    CloseConnection,
    Config,
    ConnectionClosed,
    ConnectionOpened,
    Encoded,
    EndSession,
    Event,
    Finalize,
    FinalizeFailed,
    FsCompleted,
    Host,
    HttpBodyReceived,
    HttpFinished,
    HttpResponded,
    LocalProtocolError,
    MessageReceived,
    MissingChanged,
    OutputReceived,
    ProcessExited,
    ProcessSpawned,
    ProxyAsked,
    ResizeTerminal,
    RpcError,
    RunFs,
    RunHttp,
    Send,
    SendBlocked,
    SendDrained,
    ServerCore,
    Signal,
    Spawn,
    SpawnFailed,
    StdinWritten,
    StreamClosed,
    Tick,
    Unwatch,
    WatchMissing,
    WriteStdin,
)
from execproto._methods import METHODS
from execproto._netproxy import normalize_host
from execproto.actions import CloseForward, OpenForward, PauseForward, ResumeForward, WriteForward
from execproto.events import (
    ForwardConnected,
    ForwardEnded,
    ForwardFailed,
    ForwardReceived,
    ForwardUnrouted,
    ForwardWritten,
)
from execproto.netproxy import Question

# Examples per target.
EXAMPLES = int(os.environ.get("EXECPROTO_FUZZ_EXAMPLES", "1000"))
# Examples per hypothesis run, and processes running them (see `fuzz`).
BATCH = int(os.environ.get("EXECPROTO_FUZZ_BATCH", "10000"))
WORKERS = int(os.environ.get("EXECPROTO_FUZZ_WORKERS", "0")) or os.cpu_count() or 1
# Rerun one failed batch: its seed, as the failure report gives it (with EXECPROTO_FUZZ_EXAMPLES).
SEED = os.environ.get("EXECPROTO_FUZZ_SEED")

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    database=None,
    deadline=None,
    # Generated inputs are large and slow-ish by design, and most client messages are invalid.
    suppress_health_check=list(HealthCheck),
    # No Phase.explain: it reruns a failure many times and adds nothing to a minimal repro.
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    print_blob=True,
)

# Every action type the core declares (derived from `Action`), so a new one needs no edit here.
ACTION_TYPES = execproto.actions.ACTION_TYPES

# Not empty, so env policies that inherit actually run their glob matching.
HOST = Host(
    environment_info={"shell": {"name": "sh", "path": "/bin/sh"}, "cwd": "/tmp"},
    env={"PATH": "/usr/bin", "HOME": "/root", "API_KEY": "k", "LANG": "C.UTF-8", "ÄÖ": "ß"},
)
CONFIG = Config(retention_bytes=64, retention_chunks=4, write_id_memory=4, max_fs_handles=2)


FORWARD_EVENTS = (ForwardConnected, ForwardEnded, ForwardFailed, ForwardReceived, ForwardUnrouted,
                  ForwardWritten)
FORWARD_ACTIONS = (OpenForward, WriteForward, PauseForward, ResumeForward, CloseForward)
# The phases of the calls of the other families, as the adapter saw them last.
ISSUED, RESPONDED = "issued", "responded"  # an http call (done ones are forgotten)
CONNECTING, OPEN, ENDED = "connecting", "open", "ended"  # a forward stream (ENDED: the target's
# EOF came; closed ones are forgotten)

# The requests the server sends a client of its own (the managed proxy's decider).
SERVER_REQUESTS = ("network/policyRequest",)
SOCKS = ("socks5_tcp", "socks5_udp")

# The sequences' calls: (method, "sent" | "result" | "error") -> how many, summed over the
# examples run in this process: to see how a run covers the methods (not a test: hypothesis draws
# unevenly, and one method may come a few times only; `test_methods` checks they are all drawn).
SEQUENCE_ANSWERS: Counter[tuple[str, str]] = Counter()


# -- checking what comes out ------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise AssertionError(f"non-JSON constant {name} in a sent message")


def check_send(data: bytes) -> dict[str, Any]:
    """``data`` is one UTF-8 JSON-RPC 2.0 message (strict: no NaN/Infinity); return it."""
    assert isinstance(data, bytes), f"Send.data is {type(data).__name__}, not bytes"
    text = data.decode("utf-8")  # strict: a surrogate in the output is a failure
    message = json.loads(text, parse_constant=_no_constant)
    assert isinstance(message, dict), message
    assert message.get("jsonrpc") == "2.0", message
    if "method" in message:
        assert isinstance(message["method"], str), message
        assert "id" not in message or message["method"] in SERVER_REQUESTS, (
            f"the server sent a request: {message}")
    else:
        assert "id" in message, f"a response without an id: {message}"
        msg_id = message["id"]
        assert isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool), message
        assert ("result" in message) != ("error" in message), message
        if "error" in message:
            error = message["error"]
            assert isinstance(error, dict), message
            assert isinstance(error.get("code"), int) and not isinstance(error["code"], bool)
            assert isinstance(error.get("message"), str), message
    return message


class World:
    """A fresh core plus what the adapter knows, checking each call's actions."""

    __slots__ = (
        "core",
        "now",
        "conns",
        "ever_conns",
        "spawned",
        "procs",
        "tty",
        "ops",
        "reported",
        "exited",
        "finalized",
        "minted",
        "fs_ops",
        "http_ops",
        "streaming",
        "forwards",
        "ever_streams",
        "backlog",
        "paused",
        "watches",
        "live_watches",
        "ended",
        "calls",
        "call_conn",
        "dropped",
        "asked",
        "answered",
        "closing",
        "eofs",
        "stdin",
        "proxied",
        "asks",
        "proxy_asks",
        "policy_requests",
        "event",
        "sessions",
        "conn_session",
        "session_conn",
        "proc_session",
        "process_ids",
        "blocked",
        "decided",
    )

    def __init__(self, config: Config = CONFIG) -> None:
        self.core = ServerCore(config, HOST)
        self.now = 0.0
        self.conns: set[int] = set()  # open connections
        self.ever_conns: set[int] = set()
        self.spawned: set[int] = set()  # procs the core asked to spawn
        self.procs: list[int] = []  # the same, in order
        self.tty: dict[int, bool] = {}
        self.ops: list[int] = []  # ops of RunFs and RunHttp, in order
        self.reported: set[int] = set()  # procs whose spawn was reported done
        self.exited: set[int] = set()  # procs whose exit was reported
        self.finalized: set[int] = set()
        self.minted = 0
        # The calls of the other families, each in the phase the adapter last saw it in.
        self.fs_ops: dict[int, str] = {}  # RunFs and WatchMissing ops not yet completed
        self.http_ops: dict[int, str] = {}  # RunHttp ops not done: "issued" or "responded"
        self.streaming: set[int] = set()  # http ops whose response is streamed
        self.forwards: dict[int, str] = {}  # OpenForward streams: FORWARD_PHASES
        self.ever_streams: set[int] = set()
        self.backlog: dict[int, int] = {}  # stream -> bytes asked written, not yet reported
        self.paused: set[int] = set()  # streams the adapter stopped reading
        self.watches: list[int] = []  # WatchMissing watches, in order
        self.live_watches: set[int] = set()  # neither fired nor unwatched
        self.ended: set[str] = set()  # sessions an EndSession was for
        # Requests the sequences sent (`request_frame`): (conn, id) -> method; and answered.
        self.calls = 0
        self.call_conn: dict[str, int] = {}  # each call's connection, by id
        self.dropped: set[str] = set()  # calls whose connection closed before their answer
        self.asked: dict[tuple[int, Any], str] = {}
        self.answered: set[tuple[int, Any]] = set()
        self.closing: set[int] = set()  # open connections the core asked the adapter to close
        self.eofs: set[tuple[int, str]] = set()  # (proc, stream) reported closed
        self.stdin: dict[int, int] = {}  # proc -> stdin bytes asked written, not yet reported
        # The managed network proxy: procs whose Spawn carried one; its questions (`ProxyAsked`,
        # by ask) not yet answered; the decider's questions to a client, (conn, id) -> ask.
        self.proxied: set[int] = set()
        self.asks = 0
        self.proxy_asks: dict[int, ProxyAsked] = {}
        self.policy_requests: dict[tuple[int, int], int] = {}
        # Whose client a question goes to: the sessions greeted (by `initialize`'s answer, in
        # order), each connection's, the connection each is attached to now (none: detached);
        # each proc's session and processId (its `Spawn`); the connections whose sending is
        # blocked. ``event``: the one being fed; ``decided``: the question whose AnswerProxy
        # came last in the actions being checked (its decisions follow it).
        self.event: Event | None = None
        self.sessions: list[str] = []
        self.conn_session: dict[int, str] = {}
        self.session_conn: dict[str, int] = {}
        self.proc_session: dict[int, str] = {}
        self.process_ids: dict[int, str] = {}
        self.blocked: set[int] = set()
        self.decided: ProxyAsked | None = None

    def mint(self) -> str:
        self.minted += 1
        return f"session-{self.minted}"

    def feed(self, event: Event) -> list[Action]:
        """One ``handle()`` call; any exception propagates to the caller."""
        actions = self.core.handle(event, self.now)
        self.event = event
        # The event was accepted: update the adapter's view before judging the actions.
        if isinstance(event, ConnectionOpened):
            self.conns.add(event.conn)
            self.ever_conns.add(event.conn)
        elif isinstance(event, ConnectionClosed):
            self.conns.discard(event.conn)
            self.closing.discard(event.conn)
            # Its calls go unanswered, even on a connection opened again with its number.
            for key in [key for key in self.asked if key[0] == event.conn]:
                del self.asked[key]
                self.dropped.add(key[1])
            for key in [key for key in self.policy_requests if key[0] == event.conn]:
                del self.policy_requests[key]
            # Its session is detached (a number opened again is another client's).
            session = self.conn_session.pop(event.conn, None)
            if session is not None and self.session_conn.get(session) == event.conn:
                del self.session_conn[session]
            self.blocked.discard(event.conn)
        elif isinstance(event, SendBlocked):
            self.blocked.add(event.conn)
        elif isinstance(event, SendDrained):
            self.blocked.discard(event.conn)
        elif isinstance(event, ProxyAsked):
            assert event.ask not in self.proxy_asks, f"ask reused: {event!r}"
            self.proxy_asks[event.ask] = event
        elif isinstance(event, ProcessSpawned):
            self.reported.add(event.proc)
        elif isinstance(event, ProcessExited):
            self.exited.add(event.proc)
            self.stdin.pop(event.proc, None)  # what was queued no longer counts
        elif isinstance(event, StdinWritten):
            queued = self.stdin.pop(event.proc, 0) - event.size
            if queued and not event.closed:
                self.stdin[event.proc] = queued
        elif isinstance(event, StreamClosed):
            self.eofs.add((event.proc, event.stream))
        else:
            self.saw_family_event(event)
        self.check(actions)
        return actions

    def saw_family_event(self, event: Event) -> None:
        """An fs, http, watch or forward event was accepted: the phase it moves its call to.
        (One for a call already over was ignored by the core, and changes nothing here.)"""
        if isinstance(event, FsCompleted):
            self.fs_ops.pop(event.op, None)
        elif isinstance(event, HttpResponded) and event.op in self.http_ops:
            if event.op in self.streaming:
                self.http_ops[event.op] = RESPONDED
            else:
                del self.http_ops[event.op]
        elif isinstance(event, HttpFinished):
            self.http_ops.pop(event.op, None)
        elif isinstance(event, MissingChanged):
            self.live_watches.discard(event.watch)
        elif isinstance(event, FORWARD_EVENTS) and event.stream in self.forwards:
            if isinstance(event, ForwardConnected):
                self.forwards[event.stream] = OPEN
            elif isinstance(event, (ForwardFailed, ForwardUnrouted)):
                # Closed by the adapter itself (unrouted: unless an OpenForward with route
                # "host" comes back for it).
                self.forget_stream(event.stream)
            elif isinstance(event, ForwardEnded):
                self.forwards[event.stream] = ENDED
            elif isinstance(event, ForwardWritten):
                self.backlog[event.stream] -= event.size

    def forget_stream(self, stream: int) -> None:
        del self.forwards[stream]
        self.backlog.pop(stream, None)
        self.paused.discard(stream)

    def request_frame(self, conn: int, frame: Any) -> bytes | str:
        """The frame of a step: a sequence's call (method, params) is sent with an id no other
        frame has, remembered to check its answer; anything else is sent as it is."""
        if not isinstance(frame, tuple):
            return frame
        method, params = frame
        SEQUENCE_ANSWERS[method, "sent"] += 1
        if method == "initialized":  # the one notification
            return encode({"jsonrpc": "2.0", "method": method, "params": params})
        self.calls += 1
        msg_id = f"call-{self.calls}"
        self.asked[conn, msg_id] = method
        self.call_conn[msg_id] = conn
        return request(msg_id, method, params)

    def http_in(self, phase: str) -> list[int]:
        return [op for op, seen in self.http_ops.items() if seen == phase]

    def tick_due(self) -> None:
        """Tick while a deadline is due, as an adapter's loop does (bounded: timers set during a
        Tick at a huge ``now`` may round to ``now`` itself and be due again)."""
        for _ in range(10):
            due = self.core.next_deadline()
            if due is None or due > self.now:
                return
            self.feed(Tick())

    def run_out_timers(self, bound: int = 20) -> None:
        """Let time pass until nothing waits on it (or ``bound`` deadlines)."""
        for _ in range(bound):
            due = self.core.next_deadline()
            if due is None:
                return
            self.now = max(self.now, due)
            self.feed(Tick())

    def check(self, actions: list[Action]) -> None:
        assert isinstance(actions, list), actions
        self.decided = None
        for action in actions:
            assert isinstance(action, ACTION_TYPES), f"not an action: {action!r}"
            if isinstance(action, Send):
                assert action.conn in self.conns, f"Send to closed connection: {action!r}"
                self.check_answer(action.conn, check_send(action.data))
            elif isinstance(action, AnswerProxy):
                self.check_proxy_answer(action)
            elif isinstance(action, CloseConnection):
                assert action.conn in self.conns, f"closing a closed connection: {action!r}"
                self.closing.add(action.conn)
            elif isinstance(action, Spawn):
                assert action.proc not in self.spawned, f"handle reused: {action!r}"
                self.spawned.add(action.proc)
                self.procs.append(action.proc)
                self.tty[action.proc] = action.spec.tty
                if action.spec.proxy is not None:
                    self.proxied.add(action.proc)
                self.spawned_in(action)
            elif isinstance(action, (RunFs, RunHttp, WatchMissing)):
                assert action.op not in self.ops, f"op reused: {action!r}"
                self.ops.append(action.op)
                if isinstance(action, RunHttp):
                    assert action.conn in self.conns, f"a call for a closed connection: {action!r}"
                    self.http_ops[action.op] = ISSUED
                    if action.request.stream_response:
                        self.streaming.add(action.op)
                else:
                    self.fs_ops[action.op] = type(action).__name__
                if isinstance(action, RunFs):
                    assert action.conn in self.conns, f"a call for a closed connection: {action!r}"
                if isinstance(action, WatchMissing):
                    assert action.watch not in self.watches, f"watch reused: {action!r}"
                    self.watches.append(action.watch)
                    self.live_watches.add(action.watch)
            elif isinstance(action, Unwatch):
                assert action.watch in self.live_watches, f"unwatched twice: {action!r}"
                self.live_watches.discard(action.watch)
            elif isinstance(action, EndSession):
                assert action.session_id not in self.ended, f"ended twice: {action!r}"
                self.ended.add(action.session_id)
            elif isinstance(action, (CancelHttp, *FORWARD_ACTIONS)):
                self.check_family_action(action)
            elif isinstance(action, WriteStdin):
                assert action.proc in self.reported and action.proc not in self.exited, action
                self.stdin[action.proc] = self.stdin.get(action.proc, 0) + len(action.data)
            elif isinstance(action, Finalize):
                assert action.proc in self.spawned, f"Finalize without Spawn: {action!r}"
                assert action.proc not in self.finalized, f"Finalize twice: {action!r}"
                self.finalized.add(action.proc)
            elif isinstance(action, (Signal, ResizeTerminal)):
                proc, kind = action.proc, type(action).__name__
                assert proc in self.reported, f"{kind} before the spawn was reported: {action!r}"
                assert proc not in self.exited, f"{kind} after the exit: {action!r}"
                assert proc not in self.finalized, f"{kind} after Finalize: {action!r}"
                if isinstance(action, ResizeTerminal):
                    assert self.tty[proc], f"a terminal resized without one: {action!r}"
                    assert 1 <= action.rows <= 65535 and 1 <= action.cols <= 65535, action

    def spawned_in(self, action: Spawn) -> None:
        """A process starts in the session of the client that asked (a `process/start`)."""
        self.proc_session[action.proc] = action.spec.session_id
        self.process_ids[action.proc] = action.spec.process_id
        event = self.event
        if isinstance(event, MessageReceived) and event.conn in self.conn_session:
            assert action.spec.session_id == self.conn_session[event.conn], (
                f"started in session {action.spec.session_id}, asked on connection {event.conn} "
                f"of {self.conn_session[event.conn]}: {action!r}")

    def check_answer(self, conn: int, message: dict[str, Any]) -> None:
        """A response to a request the sequence sent comes once, on the request's connection.
        A request of the server's (the decider asked) is about the question just asked, and a
        decision about the one just answered, each on its process's session's connection."""
        if "method" in message:
            if "id" in message:
                ask = self.check_policy_request(conn, message)
                assert (conn, message["id"]) not in self.policy_requests, message
                self.policy_requests[conn, message["id"]] = ask
            elif message["method"] == "network/policyDecision":
                self.check_policy_decision(conn, message)
            return
        result = message.get("result")
        if isinstance(result, dict) and "sessionId" in result and "environmentInfo" in result:
            self.greeted(conn, result["sessionId"])
        msg_id = message.get("id")
        key = (conn, msg_id)
        if key not in self.asked:
            assert msg_id not in self.dropped, f"answered after its connection closed: {message!r}"
            assert msg_id not in self.call_conn, (
                f"answered on connection {conn}, asked on {self.call_conn[msg_id]}: {message!r}")
            return
        assert key not in self.answered, f"answered twice: {message!r}"
        self.answered.add(key)
        SEQUENCE_ANSWERS[self.asked[key], "result" if "result" in message else "error"] += 1

    def greeted(self, conn: int, session: str) -> None:
        """``initialize`` answered: ``conn`` holds ``session`` (new or resumed) now."""
        holder = self.session_conn.get(session)
        assert holder is None or holder == conn, (
            f"session {session} attached to connection {conn}, still on {holder}")
        assert conn not in self.conn_session, f"connection {conn} greeted twice"
        if session not in self.sessions:
            self.sessions.append(session)
        self.session_conn[session] = conn
        self.conn_session[conn] = session

    def check_policy_request(self, conn: int, message: dict[str, Any]) -> int:
        """A ``network/policyRequest`` is the decider asked about the `ProxyAsked` being fed,
        of a proxied process (the process and what it asks named right), once; its ask."""
        event = self.event
        assert isinstance(event, ProxyAsked) and event.ask in self.proxy_asks, (
            f"a policyRequest while no question is being asked: {message!r} at {event!r}")
        assert event.ask not in self.policy_requests.values(), f"asked twice: {message!r}"
        assert event.proc in self.proxied, f"asked for a process without a proxy: {message!r}"
        self.check_about(event, message, message["params"]["request"])
        self.check_route(conn, event.proc, message)
        assert conn not in self.closing, (
            f"asked on a connection being closed (its answer is ignored): {message!r}")
        return event.ask

    def check_policy_decision(self, conn: int, message: dict[str, Any]) -> None:
        """A ``network/policyDecision`` follows the `AnswerProxy` of the question it tells, on
        its process's session's connection, and none while that connection is not reading."""
        asked = self.decided
        assert asked is not None, f"a decision with no question just answered: {message!r}"
        self.check_about(asked, message, message["params"])
        self.check_route(conn, asked.proc, message)
        assert conn not in self.blocked, f"a decision to a connection not reading: {message!r}"

    def check_about(self, asked: ProxyAsked, message: dict[str, Any],
                    what: dict[str, Any]) -> None:
        """``message`` names the process and the connection ``asked`` is about."""
        q = asked.question
        assert message["params"]["processId"] == self.process_ids.get(asked.proc) and (
            what["host"], what["port"], what["protocol"]) == (
                normalize_host(q.host), q.port, q.protocol), (
            f"{message['method']} about another question than {asked!r}: {message!r}")

    def check_route(self, conn: int, proc: int, message: dict[str, Any]) -> None:
        """The decider's messages about ``proc`` go to its session's client, where it is now."""
        session = self.proc_session.get(proc)
        holder = self.session_conn.get(session) if session is not None else None
        where = "detached" if holder is None else f"on connection {holder}"
        assert conn == holder, (
            f"{message['method']} about proc {proc} sent on connection {conn}; its session "
            f"{session} is {where}: {message!r}")

    def check_proxy_answer(self, action: AnswerProxy) -> None:
        """Each question is answered once; only a process with a proxy, not yet finalized, has
        any let through; a refusal is a SOCKS5 code for SOCKS5, an HTTP answer otherwise."""
        asked = self.proxy_asks.pop(action.ask, None)
        assert asked is not None, f"an answer to no open question: {action!r}"
        self.decided = asked
        assert not action.allow or asked.proc in self.proxied, (
            f"let through for a process without a proxy: {action!r} to {asked!r}")
        assert not action.allow or asked.proc not in self.finalized, (
            f"let through for a process finalized: {action!r} to {asked!r}")
        if not action.allow:
            socks = asked.question.protocol in SOCKS
            assert (action.refusal is None) == socks, f"{action!r} to {asked.question!r}"
            assert action.socks_code, action

    def check_family_action(self, action: Action) -> None:
        """An http or forward action: for a call in a phase that allows it."""
        if isinstance(action, CancelHttp):
            assert self.http_ops.pop(action.op, None) is not None, (
                f"cancelled a call that is not running: {action!r}")
            return
        assert isinstance(action, FORWARD_ACTIONS), action
        stream = action.stream
        if isinstance(action, OpenForward):
            if action.route == "host":
                # The session's network was refused just now: the same stream, the host's.
                assert stream in self.ever_streams and stream not in self.forwards, action
            else:
                assert stream not in self.ever_streams, f"stream reused: {action!r}"
            self.ever_streams.add(stream)
            self.forwards[stream] = CONNECTING
            self.backlog[stream] = 0
            return
        assert stream in self.forwards, f"{action!r} for a stream that is gone"
        if isinstance(action, CloseForward):
            self.forget_stream(stream)
        elif isinstance(action, WriteForward):
            assert self.forwards[stream] != CONNECTING, f"written before connected: {action!r}"
            self.backlog[stream] += len(action.data)
        elif isinstance(action, PauseForward):
            assert stream not in self.paused, f"paused twice: {action!r}"
            self.paused.add(stream)
        else:
            assert stream in self.paused, f"resumed, not paused: {action!r}"
            self.paused.discard(stream)


def encode(message: Any) -> str:
    return json.dumps(message)


def request(msg_id: Any, method: str, params: Any = None) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        message["params"] = params
    return encode(message)


INITIALIZED = encode({"jsonrpc": "2.0", "method": "initialized", "params": {}})


def _start(process_id: str, **extra: Any) -> dict[str, Any]:
    params = {
        "processId": process_id, "argv": ["sh"], "cwd": "file:///tmp", "env": {}, "tty": False,
    }
    params.update(extra)
    return params


# -- target (a): client messages -------------------------------------------------------------

# Stages the client connection can be in when the fuzzed messages arrive.
NEW, INITIALIZING, READY = "new", "initializing", "ready"


def client_world(stage: str) -> World:
    """conn 1 at ``stage``. READY also has processes in every phase, an open fs handle, a
    forward, a streamed http response and a watch, and two other sessions: "session-old"
    (detached, resumable) and "session-busy" (attached)."""
    w = World()
    feed = w.feed
    if stage == READY:
        for conn, sid in ((8, "session-busy"), (9, "session-old")):
            feed(ConnectionOpened(conn=conn, session_id=sid))
            feed(MessageReceived(conn=conn, data=request(1, "initialize", {"clientName": "c"})))
            feed(MessageReceived(conn=conn, data=INITIALIZED))
        feed(ConnectionClosed(conn=9))
    feed(ConnectionOpened(conn=1, session_id=w.mint()))
    if stage == NEW:
        return w
    feed(MessageReceived(conn=1, data=request(1, "initialize", {"clientName": "fuzz"})))
    if stage == INITIALIZING:
        return w
    feed(MessageReceived(conn=1, data=INITIALIZED))
    # "p": running, stdin piped, some output; "t": tty, running; "x": exited, not closed;
    # "y": the same with a tty; "c": closed (still readable); "s": spawn not yet reported.
    spawn: dict[str, int] = {}
    for pid, extra in (
        ("p", {"pipeStdin": True}),
        ("t", {"tty": True}),
        ("x", {}),
        ("y", {"tty": True}),
        ("c", {}),
        ("s", {}),
    ):
        start = request(f"start-{pid}", "process/start", _start(pid, **extra))
        for action in feed(MessageReceived(conn=1, data=start)):
            if isinstance(action, Spawn):
                spawn[pid] = action.proc
    for pid in ("p", "t", "x", "y", "c"):
        feed(ProcessSpawned(proc=spawn[pid], pid=1000 + spawn[pid]))
    for i in range(3):
        feed(OutputReceived(proc=spawn["p"], stream="stdout", data=b"out %d\n" % i))
    feed(OutputReceived(proc=spawn["t"], stream="pty", data=b"\x1b[0m$ "))
    feed(ProcessExited(proc=spawn["x"], returncode=0))
    feed(ProcessExited(proc=spawn["y"], returncode=0))
    feed(ProcessExited(proc=spawn["c"], returncode=-9))
    feed(StreamClosed(proc=spawn["c"], stream="stdout"))
    feed(StreamClosed(proc=spawn["c"], stream="stderr"))
    fs_open = request("open", "fs/open", {"handleId": "h", "path": "file:///etc/hosts"})
    for action in feed(MessageReceived(conn=1, data=fs_open)):
        if isinstance(action, RunFs):
            feed(FsCompleted(op=action.op, result={}))
    # The other families' calls under way too: forward stream 1 connected, a streamed http
    # response "r" begun, watch 1 watching.
    feed(MessageReceived(conn=1, data=request("fwd", "forward/open", {"port": 8080})))
    feed(ForwardConnected(stream=max(w.ever_streams)))
    http = {"method": "GET", "url": "http://127.0.0.1:1/", "headers": [], "requestId": "r",
            "streamResponse": True}
    feed(MessageReceived(conn=1, data=request("http", "http/request", http)))
    feed(HttpResponded(op=w.ops[-1], status=200, headers=()))
    watch = {"watchId": 1, "missing": ["file:///x/y"]}
    feed(MessageReceived(conn=1, data=request("watch", "fs/watchMissing", watch)))
    feed(FsCompleted(op=w.ops[-1], result={"watching": True}))
    return w


# Every method the server answers, from the registry: each is fuzzed with its schema.
KNOWN_METHODS = list(METHODS)

MAX_DIGITS = sys.get_int_max_str_digits() or 4300

edge_ints = st.sampled_from(
    [0, 1, -1, 2, 255, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64,
     -(2**63)]
    + [10 ** (MAX_DIGITS - 1), -(10 ** (MAX_DIGITS - 1))]
) | st.integers()

# Any JSON value, including huge ints and floats that json.dumps writes as NaN/Infinity.
json_leaf = (
    st.none()
    | st.booleans()
    | edge_ints
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)

# Field kind -> values a correct client sends (VALID), and values at or past the edge of what
# the method accepts (TRICKY). A params object starts valid, then takes a few faults (`_fields`):
# so well-formed calls reach the deep paths, and each malformed one isolates a validation path.
text_map = st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3)
sessions = st.sampled_from(["session-old", "session-busy", "session-1", "session-2", "nope", ""])
globs = st.lists(
    st.sampled_from(["*", "?", "[", "[!", "[a-", "[z-a]", "*KEY*", "\\", "[]]", "P*", "l?ng"])
    | st.text(max_size=6),
    max_size=3,
)
valid_policy = st.fixed_dictionaries(
    {
        "inherit": st.sampled_from(["all", "core", "none"]),
        "ignoreDefaultExcludes": st.booleans(),
        "exclude": globs,
        "set": text_map,
        "includeOnly": globs,
    }
)



def _special(kind: str, access: str) -> dict[str, Any]:
    return {"path": {"type": "special", "value": {"kind": kind}}, "access": access}


def _sandbox(permissions: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A ``sandbox`` param as Codex sends it, with these permissions."""
    return {"permissions": permissions, "cwd": "file:///tmp", "workspaceRoots": ["file:///tmp"],
            "windowsSandboxLevel": "disabled", **extra}


_RESTRICTED = {"type": "restricted", "entries": [
    _special("root", "read"), _special("project_roots", "write"), _special("slash_tmp", "write"),
    {"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "none"},
    {"path": {"type": "path", "path": "file:///tmp/secret"}, "access": "none"},
]}
# Sandboxes a client sends (read-only, workspace-write, none at all, the host's own) ...
SANDBOXES = [
    _sandbox({"type": "managed", "file_system": {"type": "restricted",
                                                 "entries": [_special("root", "read")]},
              "network": "restricted"}),
    _sandbox({"type": "managed", "file_system": _RESTRICTED, "network": "enabled"}),
    _sandbox({"type": "managed", "file_system": {"type": "unrestricted"}, "network": "restricted"}),
    _sandbox({"type": "disabled"}),
    _sandbox({"type": "external", "network": "restricted"}),
]
# ... and ones a step off: a field missing or of the wrong variant, a relative path.
BAD_SANDBOXES = [
    {},
    {"permissions": {"type": "disabled"}},
    _sandbox({"type": "nope"}),
    _sandbox({"type": "disabled"}, windowsSandboxLevel="x"),
    _sandbox({"type": "managed", "file_system": {"type": "restricted", "entries": "x"},
              "network": "restricted"}),
    _sandbox({"type": "managed", "file_system": {"type": "restricted", "entries": [
        {"path": {"type": "path", "path": "relative"}, "access": "write"}]},
        "network": "restricted"}),
    _sandbox({"type": "managed", "file_system": {"type": "restricted", "entries": [
        _special("unknown", "read"), _special("root", "all")]}, "network": "maybe"}),
    {**_sandbox({"type": "disabled"}), "cwd": "relative"},
]

valid_uri = st.sampled_from(
    ["file:///tmp", "file:///tmp/a%20b", "file://localhost/etc/hosts", "file:///", "file:///%ff"]
)
counts = st.sampled_from([0, 1, 6, 64, 65, 10_000, 50_001]) | st.integers(0, 2**64 - 1)

VALID: dict[str, st.SearchStrategy[Any]] = {
    "id": st.sampled_from(["p", "t", "x", "y", "c", "s", "q", "h", "r"]),
    "newid": st.sampled_from(["n", "m", "o", "p"]),  # mostly unused ids, for process/start
    "text": st.text(max_size=12),
    "uri": valid_uri,
    "url": st.sampled_from(["http://127.0.0.1:1/", "https://example.com/a?b#c", "http://[::1]:80/"]),
    "argv": st.lists(st.text(max_size=6), min_size=1, max_size=3),
    "map": text_map,
    "bool": st.booleans(),
    "uint": st.sampled_from([0, 1, 5, 1000, 2**32]) | st.integers(0, 2**64 - 1),
    "b64": st.binary(max_size=24).map(lambda b: base64.b64encode(b).decode()),
    "headers": st.lists(
        st.fixed_dictionaries({"name": st.text(max_size=6), "value": st.text(max_size=6)}),
        max_size=2,
    ),
    "signal": st.just("interrupt"),
    "dim": st.sampled_from([1, 24, 80, 65535]) | st.integers(1, 65535),
    "session": sessions,
    "redirect": st.sampled_from(["follow", "stop"]),
    "policy": valid_policy,
    "method": st.sampled_from(["GET", "POST", "PATCH"]),
    # fs/walk's options: mostly within the budgets, sometimes past them (refused once parsed).
    "walk": st.fixed_dictionaries(
        {"maxDepth": counts, "maxDirectories": counts, "maxEntries": counts,
         "followDirectorySymlinks": st.booleans()},
        optional={"pruneHiddenDirectories": st.booleans()},
    ),
    "uris": st.lists(valid_uri, max_size=3),
    "keypaths": st.lists(st.lists(st.text(max_size=6), min_size=1, max_size=3), max_size=2),
    "roots": st.lists(st.fixed_dictionaries({"id": st.text(max_size=4), "path": valid_uri}),
                      max_size=2),
    "port": st.sampled_from([1, 22, 8080, 65535]) | st.integers(1, 65535),
    "host": st.sampled_from(["127.0.0.1", "::1", "localhost", "10.0.0.1"]),
    "openmode": st.sampled_from(["read", "replace", {"replace": None}]),
    "sandbox": st.sampled_from(SANDBOXES),
}
TRICKY: dict[str, st.SearchStrategy[Any]] = {
    "id": st.sampled_from(["", "P", " ", "\x00", "\ud800", "x" * 100]) | st.text(max_size=8),
    "newid": st.sampled_from(["", "p", "\ud800"]) | st.text(max_size=8),
    "text": st.sampled_from(["", "\ud800", "\x00", "é" * 40]),
    "uri": st.sampled_from(
        [
            "FILE:///tmp",
            "file://other/tmp",
            "file:relative",
            "file:///a%00b",
            "file:///C:/x",
            "file:///tmp?q=1",
            "file:///tmp#frag",
            "file://[",
            "file://[::1]/x",
            "file://a\uff03b/x",
            "file://\u2100/x",
            "file://host:99999/x",
            "/tmp",
            "http://example.com/",
            "",
        ]
    )
    | st.text(max_size=16).map(lambda s: "file://" + s),
    "url": st.sampled_from(
        [
            "http://[::1",
            "http://a\uff03b/",
            "http://\u2100.com/",
            "http://h:notaport/",
            "http://h:99999/",
            "http://",
            "ftp://x/",
            "relative",
            "",
        ]
    )
    | st.text(max_size=16).map(lambda s: "http://" + s),
    "argv": st.sampled_from([[], [""], ["sh", 1], [None]]),
    "map": st.sampled_from([{"A": 1}, {"A": None}, {"": ""}, {"A=B": "c", "\x00": "x"}, []]),
    "bool": st.sampled_from([0, 1, "true", None]),
    "uint": edge_ints | st.sampled_from([-1, -0.0, 1.5, 1e300, float("nan"), float("inf"), True]),
    "b64": st.sampled_from(
        ["=", "A", "AA=", "AAA", "!!!!", "QQ==\n", "QQ", "é===", "\x00AAA", "A" * 4097]
    )
    | st.text(max_size=8),
    "headers": st.sampled_from([{}, [{"name": "a"}], [["a", "b"]], [{"name": 1, "value": "v"}]]),
    "signal": st.sampled_from(["INT", "kill", "terminate", "", "Interrupt"]),
    "dim": st.sampled_from([0, -1, 65536, 2**64, 24.0, 1.5, "24", True, None, [24]]),
    "session": st.text(max_size=8),
    "redirect": st.sampled_from(["FOLLOW", "", "manual"]),
    "policy": st.fixed_dictionaries(
        {},
        optional={
            "inherit": st.sampled_from(["ALL", "", "some"]) | json_value,
            "ignoreDefaultExcludes": json_value,
            "exclude": globs | json_value,
            "set": text_map | json_value,
            "includeOnly": globs | json_value,
        },
    ),
    "method": st.sampled_from(["", "X Y", "get", "G\u00e9T", "GET\r\n"]),
    # The struct as a sequence (serde's other form), too short or too long; fields missing.
    "walk": st.sampled_from([None, [], [1, 1, 1], [1, 1, 1, True], [1, 1, 1, True, False, 9],
                             {"maxDepth": 1}, {"maxDepth": 1.5, "maxDirectories": 1,
                                               "maxEntries": 1, "followDirectorySymlinks": 0}]),
    "uris": st.sampled_from([[], ["/tmp"], [1], "file:///x", [None], ["file:///x"] * 257]),
    "keypaths": st.sampled_from([[], [[]], [["a", 1]], "a", [None], [["a"]] * 3]),
    "roots": st.sampled_from([[], [{}], [{"id": "r"}], [{"id": 1, "path": "file:///x"}],
                              [{"id": "r", "path": "/x"}], {"id": "r"},
                              [{"id": "r", "path": "file:///x", "sandbox": {}}]]),
    "port": st.sampled_from([0, -1, 65536, 1.5, "80", True, None, 2**64]),
    "host": st.sampled_from(["", "example.com", "[::1]", "127.1", "0.0.0.0", "fe80::1%eth0", 1]),
    "openmode": st.sampled_from(["", "write", "READ", {"read": 1}, {"read": None, "x": None}, []]),
    "sandbox": st.sampled_from(BAD_SANDBOXES),
}

# method -> field -> kind; a "?" marks a field a valid call may leave out (the registry's).
SCHEMAS: dict[str, dict[str, str]] = {name: method.schema for name, method in METHODS.items()}

# Strategies are built once: a strategy made inside a draw is re-validated on every draw, which
# costs more than the draw itself.
_PICK = {n: st.integers(0, n) for n in (1, 2, 3, 4, 9, 14, 19)}
_FAULTS = st.sampled_from([0, 0, 0, 1, 1, 1, 2, 3])
_EXTRA_FIELDS = st.dictionaries(st.text(max_size=6), json_value, max_size=2)
_MESSAGE_IDS = st.integers(-3, 10) | st.text(max_size=4)
_METHODS = st.sampled_from(KNOWN_METHODS)
_RESPONSE_KEYS = st.sampled_from(["result", "error"])


def _fields(schema: dict[str, str]) -> st.SearchStrategy[dict[str, Any]]:
    fields = [(name, kind.rstrip("?"), kind.endswith("?")) for name, kind in schema.items()]
    which = st.sampled_from(fields) if fields else None

    @st.composite
    def params(draw: st.DrawFn) -> dict[str, Any]:
        """A valid params object, then a few faults: a field dropped, junk, or a tricky value."""
        out: dict[str, Any] = {}
        for name, kind, optional in fields:
            if not optional or draw(_PICK[1]):
                out[name] = draw(VALID[kind])
        if which is not None:
            for _ in range(draw(_FAULTS)):
                name, kind, _optional = draw(which)
                how = draw(_PICK[3])
                if how == 0:
                    out.pop(name, None)
                elif how == 1:
                    out[name] = draw(json_value)
                else:
                    out[name] = draw(TRICKY[kind])
        if draw(_PICK[14]) == 0:
            out.update(draw(_EXTRA_FIELDS))
        return out

    return params()


PARAMS = {method: _fields(SCHEMAS[method]) for method in KNOWN_METHODS}
PARAMS[""] = _fields({})


@st.composite
def structured_message(draw: st.DrawFn) -> Any:
    message: dict[str, Any] = {}
    if draw(_PICK[4]):
        message["jsonrpc"] = "2.0" if draw(_PICK[4]) else draw(json_value)
    how_id = draw(_PICK[9])
    if how_id <= 5:
        message["id"] = draw(_MESSAGE_IDS)
    elif how_id <= 7:
        message["id"] = draw(json_value)
    method_kind = draw(_PICK[19])
    method = ""
    if method_kind < 17:
        method = draw(_METHODS)
        message["method"] = method
    elif method_kind < 19:
        message["method"] = draw(json_value)
    how_params = draw(_PICK[9])
    if how_params <= 6:
        message["params"] = draw(PARAMS[method])
    elif how_params <= 8:
        message["params"] = draw(json_value)
    if draw(_PICK[14]) == 0:
        message[draw(_RESPONSE_KEYS)] = draw(json_value)
    return message


# Hand-written frames: what JSON encoders never produce.
RAW_FRAMES = [
    b"",
    b" ",
    b"null",
    b"[]",
    b"[1]",
    b'"initialize"',
    b"1e400",
    b"NaN",
    b"{}",
    b'{"id":1}',
    b'{"id":1,"result":null}',
    b'{"id":null,"method":"initialize"}',
    b'{"id":true,"method":"initialize"}',
    b'{"id":1.0,"method":"initialize"}',
    b'{"id":1,"method":"initialize","params":{"clientName":"x"},"id":2}',
    b'{"id":' + b"9" * (MAX_DIGITS + 1) + b',"method":"initialize"}',
    b'{"id":1,"method":"process/read","params":{"processId":"p","afterSeq":'
    + b"9" * (MAX_DIGITS + 1)
    + b"}}",
    b'{"id":1,"method":"process/read","params":{"processId":"p","afterSeq":1e999}}',
    b'{"id":1,"method":"process/read","params":{"processId":"p","waitMs":-0}}',
    b'{"id":"\\ud800","method":"nope"}',
    b'{"id":"\xed\xa0\x80","method":"nope"}',
    b'{"id":"\xff","method":"nope"}',
    b'\xef\xbb\xbf{"id":1,"method":"environment/info"}',
    '{"id":1,"method":"environment/info"}'.encode("utf-16"),
    '{"id":1,"method":"environment/info"}'.encode("utf-32-le"),
    b'{"id":1,"method":"environment/info"}\n{"id":2,"method":"environment/info"}',
    b'{"id":1,"method":"process/write","params":{"processId":"p","writeId":"w","chunk":"\xc3\xa9==="}}',
]


_DEPTHS = st.sampled_from([10, 500, 990, 1000, 1500, 5000, 50_000])
_WHERE = st.sampled_from(["whole", "params", "id", "argv", "env"])


def deep(depth: int, open_: str, close: str, inner: str = "1") -> str:
    return open_ * depth + inner + close * depth


@st.composite
def deep_frame(draw: st.DrawFn) -> str:
    depth = draw(_DEPTHS)
    nested = deep(depth, "[", "]") if draw(_PICK[1]) else deep(depth, '{"a":', "}")
    where = draw(_WHERE)
    if where == "whole":
        return nested
    if where == "params":
        return '{"id":1,"method":"process/start","params":' + nested + "}"
    if where == "id":
        return '{"id":' + nested + ',"method":"initialize"}'
    if where == "argv":
        return '{"id":1,"method":"process/start","params":{"processId":"d","argv":' + nested + "}}"
    return '{"id":1,"method":"initialize","params":{"clientName":"x","extra":' + nested + "}}"


_RAW_BYTES = st.binary(max_size=48)
_RAW_TEXT = st.text(max_size=48)
_RAW_FRAMES = st.sampled_from(RAW_FRAMES)
_DEEP = deep_frame()
_STRUCTURED = structured_message()
_POKES = st.sampled_from([b"", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b'"'])


@st.composite
def client_frame(draw: st.DrawFn) -> bytes | str:
    """One frame as the adapter hands it over: bytes (binary frame) or str (text frame)."""
    kind = draw(_PICK[19])
    if kind == 0:
        return draw(_RAW_BYTES)
    if kind == 1:
        return draw(_RAW_TEXT)
    if kind == 2:
        return draw(_RAW_FRAMES)
    if kind == 3:
        return draw(_DEEP)
    if kind == 4:
        return encode(draw(json_value))
    message = draw(_STRUCTURED)
    text = json.dumps(message, ensure_ascii=bool(draw(_PICK[1])))
    form = draw(_PICK[9])
    if form <= 3:
        return text
    # Bytes. Lone surrogates become invalid UTF-8 ("surrogatepass" encodes them raw).
    data = text.encode("utf-8", "surrogatepass")
    if form == 4 and data:
        # A splice: cut, or poke an invalid byte in.
        at = draw(st.integers(0, len(data)))  # depends on the data: cannot be prebuilt
        data = data[:at] + draw(_POKES)
        if draw(_PICK[1]):
            data += text.encode("utf-8", "surrogatepass")[at:]
    return data


def client_messages(stage: str, frames: list[bytes | str]) -> None:
    """Bad client input never raises out of ``handle()``: it only ever becomes actions."""
    w = client_world(stage)
    for frame in frames:
        for action in w.feed(MessageReceived(conn=1, data=frame)):
            # The adapter's side of the bargain, so started processes can be driven further.
            if isinstance(action, Spawn):
                w.feed(ProcessSpawned(proc=action.proc, pid=1000 + action.proc))
    # Deadlines the client set (long-poll waits, kill graces, evictions) pass; it goes; the
    # session's TTL passes.
    w.run_out_timers()
    w.feed(ConnectionClosed(conn=1))
    w.run_out_timers()


CLIENT_MESSAGES = {
    "stage": st.sampled_from([READY, READY, NEW, INITIALIZING]),
    "frames": st.lists(client_frame(), min_size=1, max_size=4),
}


# -- target (b): adapter event sequences ------------------------------------------------------
#
# A step names its handles symbolically: a small index resolved, when the step is fed, against
# what the core has issued so far (open connections, procs from `Spawn`, ops from `RunFs` and
# `RunHttp`). A few index values are reserved for handles that are wrong: never issued, closed,
# a stream the process does not have. Drawn as concrete numbers instead, nearly every sequence
# would end at its first step on a handle that was never issued, and never get deep.

_FIELDS: dict[type, frozenset[str]] = {}


def make(cls: type, **fields: Any) -> Any:
    """``cls(**fields)`` minus the optional fields ``cls`` does not have (the API moves)."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(attrs.fields_dict(cls))
    return cls(**{k: v for k, v in fields.items() if k in names})


# 0-60: a handle the core issued (newest first); 61-63: a wrong one. Wrong ones must stay rare:
# the first one ends the sequence. Drawn from 0-255 and folded, because hypothesis draws a
# range's ends far more often than the rest: 63 drawn as often as 0 ended most sequences within
# a few steps.
HANDLE = st.integers(0, 255).map(lambda k: k if k < 64 else k % 57)
WRONG = 61
STREAM = st.integers(0, 31)  # 0-29: one the process has; 30-31: one it does not
STREAMS_PIPE = ("stdout", "stderr")
STREAMS_TTY = ("pty",)


class Skip(Exception):
    """The step needs a handle of a kind none of which was issued yet: feed nothing."""


def pick(issued: list[int], k: int, never: int) -> int:
    if k >= WRONG:
        return (never, 0, -1)[k % 3]
    if not issued:
        raise Skip
    return issued[len(issued) - 1 - k % len(issued)]


def pick_proc_in(w: World, k: int, state: str) -> int:
    """Mostly a proc in ``state``: "live" (spawn reported, not finalized: it may still output),
    "running" (live and its exit not reported), "starting" (spawn not reported); for k 57-60 any
    proc issued, whatever its state (often an impossible event)."""
    if k >= 57:
        return pick_proc(w, k)
    if state == "live":
        chosen = [p for p in w.procs if p in w.reported and p not in w.finalized]
    elif state == "running":
        chosen = [p for p in w.procs if p in w.reported and p not in w.finalized | w.exited]
    else:
        chosen = [p for p in w.procs if p not in w.reported and p not in w.finalized]
    if not chosen:
        raise Skip
    return chosen[len(chosen) - 1 - k % len(chosen)]


def pick_conn(w: World, k: int) -> int:
    return pick(sorted(w.conns), k, max(w.ever_conns, default=0) + 1)


def pick_proc(w: World, k: int) -> int:
    return pick(w.procs, k, len(w.procs) + 1)


def pick_op(w: World, k: int) -> int:
    return pick(w.ops, k, max(w.ops, default=0) + 1)


def pick_in(issued: list[int], chosen: list[int], k: int) -> int:
    """Mostly one of ``chosen`` (the handles in the phase an event needs, oldest first); 57-60:
    any handle ever issued (maybe over, which the core must ignore); 61-63: a wrong one."""
    if k >= 57:
        return pick(issued, k, max(issued, default=0) + 1)
    if not chosen:
        raise Skip
    return chosen[len(chosen) - 1 - k % len(chosen)]


def pick_op_in(w: World, k: int, chosen: list[int]) -> int:
    return pick_in(w.ops, chosen, k)


def pick_stream_in(w: World, k: int, *phases: str) -> int:
    chosen = [stream for stream, phase in w.forwards.items() if phase in phases]
    return pick_in(sorted(w.ever_streams), chosen, k)


def _stdin_written(w: World, k: int, part: int, closed: bool) -> list[Event]:
    """Some of what was asked written to a process's stdin (or, ``closed``, the process closed
    its end and the rest was dropped)."""
    proc = pick_in(w.procs, sorted(w.stdin), k)
    size = w.stdin.get(proc, 0) // (part + 1)
    return [StdinWritten(proc=proc, size=size, closed=closed)]


def _forward_written(w: World, k: int, part: int) -> list[Event]:
    """Some of what was asked written to an open stream's target: all of it, or a part."""
    waiting = [s for s, phase in w.forwards.items() if phase != CONNECTING and w.backlog[s]]
    stream = pick_in(sorted(w.ever_streams), waiting, k)
    backlog = w.backlog.get(stream, 0)
    return [ForwardWritten(stream=stream, size=max(1, backlog // (part + 1)))]


def pick_stream(w: World, proc: int, k: int) -> str:
    own = STREAMS_TTY if w.tty.get(proc) else STREAMS_PIPE
    if k < 30:
        return own[k % len(own)]
    if k == 30:
        return (STREAMS_PIPE if own is STREAMS_TTY else STREAMS_TTY)[0]
    return "stdin"


def _open(w: World, k: int, hello: dict[str, Any]) -> list[Event]:
    """A client connects: mostly on a fresh conn; 61: one that is open (impossible); 62: a
    closed one's number again (a route kept to the number would reach this other client). By
    ``k % 3``: the connection alone; the handshake at once (``hello`` may resume a session); a
    client that comes back (`_resume`)."""
    if k == 61 and w.conns:
        conn = min(w.conns)
    elif k == 62 and w.ever_conns - w.conns:
        conn = min(w.ever_conns - w.conns)
    else:
        conn = max(w.ever_conns, default=0) + 1
    # 63: a session id minted twice (impossible once "session-1" exists).
    opened = ConnectionOpened(conn=conn, session_id=w.mint() if k != 63 else "session-1")
    if k % 3 == 0:
        return [opened]
    if k % 3 == 2 and w.sessions:
        return _resume(w, k // 3, opened)
    return [opened, MessageReceived(conn=conn, data=w.request_frame(conn, ("initialize", hello))),
            MessageReceived(conn=conn, data=INITIALIZED)]


def _resume(w: World, j: int, opened: ConnectionOpened) -> list[Event]:
    """A client comes back (``opened``) and resumes a session it was given (by ``j``, newest
    first): a detached one, or one another connection still holds (refused), which for even
    ``j`` goes first, questions about its processes maybe still open (a client that moved).
    Then the proxy of the session's newest live proxied process (if any) asks: whose client
    hears of it?"""
    session = w.sessions[len(w.sessions) - 1 - j % len(w.sessions)]
    holder = w.session_conn.get(session)
    moves = j % 2 == 0 and holder is not None
    out: list[Event] = [ConnectionClosed(conn=holder)] if moves else []
    hello = {"clientName": "f", "resumeSessionId": session}
    out += [opened, MessageReceived(conn=opened.conn,
                                    data=w.request_frame(opened.conn, ("initialize", hello))),
            MessageReceived(conn=opened.conn, data=INITIALIZED)]
    asking = [p for p in w.procs if p in w.proxied and p in w.reported
              and p not in w.finalized and w.proc_session.get(p) == session]
    if asking:
        w.asks += 1
        question = RESUMED_QUESTIONS[j // 2 % len(RESUMED_QUESTIONS)]
        out.append(ProxyAsked(proc=asking[-1], ask=w.asks, question=question, wall=WALL + w.now))
    return out


def _proxied_start(w: World, k: int, process_id: str, proxy: dict[str, Any],
                   extra: dict[str, Any]) -> list[Event]:
    """A `process/start` with a managed network proxy (``networkProxy``), on an open conn."""
    conn = pick_conn(w, k)
    params = _start(process_id, networkProxy=proxy, **extra)
    return [MessageReceived(conn=conn, data=w.request_frame(conn, ("process/start", params)))]


def _proxy_asked(w: World, k: int, question: Question) -> list[Event]:
    """A process's proxy asked about a connection: mostly a live process with a proxy; 57-60,
    or when there is none, any process issued (without a proxy, or gone); 61-63 one never
    issued."""
    chosen = [p for p in w.procs if p in w.proxied and p in w.reported and p not in w.finalized]
    if k >= 57 or not chosen:
        proc = pick_proc(w, k)
    else:
        proc = chosen[len(chosen) - 1 - k % len(chosen)]
    w.asks += 1
    return [ProxyAsked(proc=proc, ask=w.asks, question=question, wall=WALL + w.now)]


def _policy_answer(w: World, k: int, answer: dict[str, Any]) -> list[Event]:
    """The client answers the decider's question (`network/policyRequest`); 61-63: an id it was
    never asked (the core closes that connection)."""
    if k >= WRONG and w.conns:
        key = (min(w.conns), 10_000 + k)
    elif w.policy_requests:
        keys = sorted(w.policy_requests)
        key = keys[len(keys) - 1 - k % len(keys)]
        del w.policy_requests[key]
    else:
        raise Skip
    return [MessageReceived(conn=key[0], data=encode({"jsonrpc": "2.0", "id": key[1], **answer}))]


def _finish(w: World, k: int, returncode: int) -> list[Event]:
    """The exit and then every EOF of a process: the common way to reach CLOSED."""
    proc = pick_proc_in(w, k, "running")
    out: list[Event] = [ProcessExited(proc=proc, returncode=returncode)]
    for stream in STREAMS_TTY if w.tty.get(proc) else STREAMS_PIPE:
        out.append(StreamClosed(proc=proc, stream=stream))
    return out


# Step kind -> how to turn its drawn arguments into events, given the world.
RESOLVE: dict[str, Callable[..., list[Event]]] = {
    "open": _open,
    "message": lambda w, k, frame: [
        MessageReceived(conn=(c := pick_conn(w, k)), data=w.request_frame(c, frame))
    ],
    "close": lambda w, k: [ConnectionClosed(conn=pick_conn(w, k))],
    "blocked": lambda w, k: [SendBlocked(conn=pick_conn(w, k))],
    "drained": lambda w, k: [SendDrained(conn=pick_conn(w, k))],
    "spawned": lambda w, k: [ProcessSpawned(proc=pick_proc_in(w, k, "starting"), pid=4242)],
    "spawn_failed": lambda w, k, kind: [
        make(
            SpawnFailed,
            proc=pick_proc_in(w, k, "starting"),
            error="No such file or directory (os error 2)",
            kind=kind,
            not_found=kind == "spawnNotFound",
        )
    ],
    "output": lambda w, k, sk, data: [
        OutputReceived(
            proc=(p := pick_proc_in(w, k, "live")), stream=pick_stream(w, p, sk), data=data
        )
    ],
    "eof": lambda w, k, sk: [
        StreamClosed(proc=(p := pick_proc_in(w, k, "live")), stream=pick_stream(w, p, sk))
    ],
    "exit": lambda w, k, rc: [ProcessExited(proc=pick_proc_in(w, k, "running"), returncode=rc)],
    "finish": _finish,
    "fs_done": lambda w, k, result, error: [
        FsCompleted(op=pick_op_in(w, k, list(w.fs_ops)), result=result, error=error)
    ],
    "watch_fired": lambda w, k: [
        MissingChanged(watch=pick_in(w.watches, sorted(w.live_watches), k))
    ],
    "http_responded": lambda w, k, status, headers, body: [
        HttpResponded(op=pick_op_in(w, k, w.http_in(ISSUED)), status=status, headers=headers,
                      body=body)
    ],
    "http_body": lambda w, k, data: [
        HttpBodyReceived(op=pick_op_in(w, k, w.http_in(RESPONDED)), data=data)
    ],
    "http_finished": lambda w, k, error: [
        HttpFinished(op=pick_op_in(w, k, list(w.http_ops)), error=error)
    ],
    "forward_connected": lambda w, k: [ForwardConnected(stream=pick_stream_in(w, k, CONNECTING))],
    "forward_unrouted": lambda w, k, network, listening: [
        ForwardUnrouted(stream=pick_stream_in(w, k, CONNECTING), network=network,
                        listening=listening)
    ],
    "forward_failed": lambda w, k: [
        ForwardFailed(stream=pick_stream_in(w, k, CONNECTING, OPEN, ENDED),
                      error="Connection refused (os error 111)")
    ],
    "forward_received": lambda w, k, data: [
        ForwardReceived(stream=pick_stream_in(w, k, OPEN), data=data)
    ],
    "forward_ended": lambda w, k: [ForwardEnded(stream=pick_stream_in(w, k, OPEN))],
    "forward_written": _forward_written,
    "stdin_written": _stdin_written,
    "finalize_failed": lambda w, k: [
        FinalizeFailed(proc=pick_in(w.procs, sorted(w.finalized), k), error="EBUSY")
    ],
    "tick": lambda w: [Tick()],
    "proxied_start": _proxied_start,
    "proxy_asked": _proxy_asked,
    "policy_answer": _policy_answer,
}
# The server stopping. Rare (its step is drawn rarely, and then one in four stops the server),
# or few sequences would get deep before it.
Shutdown: type | None = getattr(execproto, "Shutdown", None)


def _shutdown(w: World, k: int) -> list[Event]:
    assert Shutdown is not None
    return [Shutdown()] if k % 4 == 1 else []


if Shutdown is not None:
    RESOLVE["shutdown"] = _shutdown
# A drain before it: as rare, and the processes go on.
Drain: type | None = getattr(execproto, "Drain", None)


def _drain(w: World, k: int) -> list[Event]:
    assert Drain is not None
    return [Drain()] if k % 4 == 1 else []


if Drain is not None:
    RESOLVE["drain"] = _drain

returncodes = st.sampled_from(
    [0, 1, 2, 127, 255, -2, -9, -15, -64, 2**31, -(2**31), 2**63]
) | st.integers()
# Past every deadline the core sets (kill grace 1 s, TTLs 30 s); 1e9 leaves float precision intact.
delays = st.sampled_from([0.0, 0.0, 0.0, 0.001, 0.5, 1.0, 1.5, 30.0, 31.0, 1e9])

# The requests of the sequences: every method of the registry, each with valid params drawn
# from its schema (`VALID`), where the fields that name things are narrowed to the few names the
# sequence's other calls use: so a read finds the process a start made, a block call the handle
# an open made, a forward write the stream an open connected. A method added to the registry is
# sent with no edit here (and `test_methods` checks that it is).
NAMED: dict[str, st.SearchStrategy[Any]] = {  # field -> its values, rather than its kind's
    "processId": st.sampled_from(["p", "q", "t"]),
    "handleId": st.sampled_from(["h", "i"]),
    "requestId": st.sampled_from(["r", "s"]),
    "writeId": st.sampled_from(["1", "2"]),
    "streamId": st.just(1) | st.integers(2, 3),  # stream 1 half the time
    "watchId": st.integers(0, 6),
    "seq": st.integers(0, 6),
    "afterSeq": st.integers(0, 6),
    "maxBytes": st.integers(0, 20),
    "waitMs": st.sampled_from([0, 1, 1000, 40_000]),
    "offset": st.sampled_from([0, 1, 4096]),
    "len": st.sampled_from([0, 1, 10, 65536]),
    "chunk": st.just("aGk=") | st.just(""),
    "dataBase64": st.sampled_from(["", "aGk=", base64.b64encode(bytes(3000)).decode()]),
    "port": st.sampled_from([22, 8080]),
    "clientName": st.just("f"),
    "configPaths": st.just([["mcp_servers"]]),
    # Within the budgets: walks past them are `test_client_messages`' (and refused at once).
    "options": st.fixed_dictionaries(
        {"maxDepth": st.integers(1, 3), "maxDirectories": st.integers(1, 10),
         "maxEntries": st.integers(1, 100), "followDirectorySymlinks": st.booleans()},
    ),
}
# Processes are where most of the core's state is: their calls come twice as often.
SEQUENCE_METHODS = [name for name in METHODS for _ in range(2 if name.startswith("process/")
                                                              else 1)]


def _valid(schema: dict[str, str]) -> st.SearchStrategy[dict[str, Any]]:
    """Valid params of ``schema``: each field its NAMED values or its kind's VALID ones, an
    optional field half the time."""
    required, optional = {}, {}
    for name, kind in schema.items():
        values = NAMED.get(name, VALID[kind.rstrip("?")])
        (optional if kind.endswith("?") else required)[name] = values
    return st.fixed_dictionaries(required, optional=optional)


SEQUENCE_PARAMS = {name: _valid(METHODS[name].schema) for name in METHODS}
_SEQUENCE_METHOD = st.sampled_from(SEQUENCE_METHODS)


@st.composite
def useful_request(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A call (method, params): sent with an id of its own (`World.request_frame`)."""
    method = draw(_SEQUENCE_METHOD)
    return method, draw(SEQUENCE_PARAMS[method])


useful_requests = useful_request()
_JUNK = client_frame()
_ANYTHING = st.sampled_from([False] * 7 + [True])


@st.composite
def frame(draw: st.DrawFn) -> tuple[str, dict[str, Any]] | bytes | str:
    """What a client sends in a sequence: mostly useful requests, sometimes anything at all
    (one in eight: `client_frame`s are slow to draw, most are refused at once, and
    `test_client_messages` sends them by the thousand)."""
    return draw(_JUNK if draw(_ANYTHING) else useful_requests)


frames = frame()

json_results = st.none() | st.dictionaries(
    st.text(max_size=4), st.none() | st.booleans() | st.integers() | st.text(max_size=6), max_size=2
) | st.sampled_from([{"watching": True}, Encoded(text='{"entries":[]}')])
rpc_errors = st.none() | st.builds(
    RpcError, st.integers(-33000, -32000), st.text(max_size=8), st.none() | st.just({"kind": "x"})
)
kinds = st.sampled_from(["spawnNotFound", "spawnPermissionDenied", "spawnFailed"])

# The managed network proxy: a policy that allows some hosts, refuses others and reviews one;
# launched with or without a decider (whose silence lasts one second at most), a sandbox, a
# terminal; and the questions its listeners ask, about hosts it allows, refuses, misses and
# local ones, on every protocol.
WALL = 1_800_000_000.0
PROXY: dict[str, Any] = {
    "enabled": True, "enableSocks5": True, "enableSocks5Udp": True, "allowUpstreamProxy": False,
    "dangerouslyAllowAllUnixSockets": False, "mode": "full", "allowLocalBinding": False,
    "domains": {"blocked.example": "deny", "example.com": "allow", "**.example.org": "allow",
                "review.example": "allow", "10.0.0.1": "allow"},
    "unixSockets": None, "reviewDomains": ["review.example"],
}
proxy_launches = st.fixed_dictionaries(
    {"proxy": st.fixed_dictionaries(
        {"mode": st.sampled_from(["full", "limited"]), "allowLocalBinding": st.booleans(),
         "domains": st.sampled_from([PROXY["domains"], {"*": "allow", "blocked.example": "deny"},
                                     None])},
    ).map(lambda changes: {**PROXY, **changes})},
    optional={"policyDecisionTimeoutMs": st.sampled_from([1, 1000]),
              "environmentId": st.just("remote")},
)
proxied_extras = st.fixed_dictionaries(
    {}, optional={"sandbox": st.sampled_from(SANDBOXES), "tty": st.booleans(),
                  "enforceManagedNetwork": st.booleans()},
)
_HOSTS = ["example.com", "EXAMPLE.com.", "a.example.org", "blocked.example", "review.example",
          "other.test", "localhost", "127.0.0.1", "10.0.0.1", "[::1]", "::1", ""]
_ADDRESSES = [(), ("93.184.215.14",), ("127.0.0.1",), ("10.0.0.1",), ("93.184.215.14", "::1")]
_METHODS_BY_PROTOCOL = {"http": ["GET", "POST", "HEAD", "OPTIONS", "get"],
                        "https_connect": ["CONNECT"], "socks5_tcp": [None], "socks5_udp": [None]}


def _question(protocol: Any, host: str, port: int, addresses: tuple[str, ...],
              which: int) -> Question:
    methods = _METHODS_BY_PROTOCOL[protocol]
    return Question(protocol=protocol, host=host, port=port, method=methods[which % len(methods)],
                    client="127.0.0.1:40000", addresses=addresses)


MISSED = Question(protocol="https_connect", host="other.test", port=443, method="CONNECT",
                  client="127.0.0.1:40000", addresses=("93.184.215.16",))

# What a resumed session's process asks first: mostly its client is asked; or it is told the
# connection was let through, or refused.
RESUMED_QUESTIONS = (
    MISSED, Question(protocol="http", host="example.com", port=80, method="GET",
                     client="127.0.0.1:40000", addresses=()),
    MISSED, Question(protocol="socks5_tcp", host="blocked.example", port=443, method=None,
                     client="127.0.0.1:40000", addresses=("93.184.215.14",)))

questions = st.builds(
    _question,
    st.sampled_from(["http", "https_connect", "socks5_tcp", "socks5_udp"]),
    st.sampled_from(_HOSTS), st.sampled_from([80, 443, 8080, 0, 65535]),
    st.sampled_from(_ADDRESSES), st.integers(0, 4),
)
policy_answers = st.sampled_from([
    {"result": {"decision": {"type": "allow"}}},
    {"result": {"decision": {"type": "deny", "reason": "no"}}},
    {"result": {"decision": {"type": "deny", "reason": ""}}},
    {"result": {"decision": {"type": "deny"}}},
    {"result": {}}, {"result": None}, {"result": "allow"},
    {"error": {"code": -1, "message": "no"}},
])


def _step(kind: str, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(st.just(kind), *args)


STEPS: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "open": _step("open", HANDLE, SEQUENCE_PARAMS["initialize"]),
    "message": _step("message", HANDLE, frames),
    "close": _step("close", HANDLE),
    "blocked": _step("blocked", HANDLE),
    "drained": _step("drained", HANDLE),
    "spawned": _step("spawned", HANDLE),
    "spawn_failed": _step("spawn_failed", HANDLE, kinds),
    "output": _step("output", HANDLE, STREAM, st.binary(max_size=40)),
    "eof": _step("eof", HANDLE, STREAM),
    "exit": _step("exit", HANDLE, returncodes),
    "finish": _step("finish", HANDLE, returncodes),
    "fs_done": _step("fs_done", HANDLE, json_results, rpc_errors),
    "http_responded": _step(
        "http_responded",
        HANDLE,
        st.sampled_from([200, 404, 0, -1, 2**70]),
        st.lists(st.tuples(st.text(max_size=4), st.text(max_size=4)), max_size=2).map(tuple),
        st.binary(max_size=16),
    ),
    "http_body": _step("http_body", HANDLE, st.binary(max_size=16)),
    "http_finished": _step("http_finished", HANDLE, st.none() | st.text(max_size=8)),
    "watch_fired": _step("watch_fired", HANDLE),
    "forward_connected": _step("forward_connected", HANDLE),
    "forward_unrouted": _step(
        "forward_unrouted", HANDLE, st.sampled_from(["none", "none", "unknown"]),
        st.sampled_from([(), (8080,), (22, 8765)]),
    ),
    "forward_failed": _step("forward_failed", HANDLE),
    "forward_received": _step("forward_received", HANDLE, st.binary(max_size=16)),
    "forward_ended": _step("forward_ended", HANDLE),
    "forward_written": _step("forward_written", HANDLE, st.integers(0, 2)),
    "stdin_written": _step("stdin_written", HANDLE, st.integers(0, 2),
                           st.sampled_from([False, False, False, True])),
    "finalize_failed": _step("finalize_failed", HANDLE),
    "tick": _step("tick"),
    "proxied_start": _step("proxied_start", HANDLE, NAMED["processId"], proxy_launches,
                           proxied_extras),
    "proxy_asked": _step("proxy_asked", HANDLE, questions),
    "policy_answer": _step("policy_answer", HANDLE, policy_answers),
}
if Shutdown is not None:
    STEPS["shutdown"] = _step("shutdown", HANDLE)
if Drain is not None:
    STEPS["drain"] = _step("drain", HANDLE)
# Client messages and process events are where the state is; weight them up. (Weights by
# repeats in a `sampled_from`: `one_of` draws its branches about evenly, repeats or not.)
_WEIGHTS = {"message": 12, "open": 2, "spawned": 2, "output": 2, "finish": 2, "fs_done": 3,
            "forward_connected": 2, "proxy_asked": 3, "policy_answer": 2}
_STEP_KINDS = st.sampled_from([k for k in STEPS for _ in range(_WEIGHTS.get(k, 1))])


@st.composite
def any_step(draw: st.DrawFn) -> tuple[Any, ...]:
    return draw(STEPS[draw(_STEP_KINDS)])


steps = st.lists(st.tuples(delays, any_step()), min_size=1, max_size=40)


def _call(w: World, conn: int, method: str, params: dict[str, Any]) -> list[Action]:
    return w.feed(MessageReceived(conn=conn, data=w.request_frame(conn, (method, params))))


def event_prelude(w: World, level: int) -> None:
    """Level 1: conn 1 handshaken, "p" starting (proc 1). Level 2: also spawned, with output, a
    long-poll read pending, and conn 2 handshaken; on each connection a "q" running under a
    managed network proxy whose client decides the misses, each asked about one (the same
    processId in two sessions: only its session says which client is asked). Level 3: also,
    on conn 2 (where most calls go: the newest connection), "t" running with a terminal and
    stdin written to it, not yet reported, and a call of every other family under way: fs
    handles "h" (to read) and "i" (to write) open, forward stream 1 connected and stream 2
    connecting, a streamed http response begun ("r"), a watch watching, a file read waiting
    for the adapter. Short sequences then start deep."""
    if level == 0:
        return
    w.feed(ConnectionOpened(conn=1, session_id=w.mint()))
    w.feed(MessageReceived(conn=1, data=request(1, "initialize", {"clientName": "f"})))
    w.feed(MessageReceived(conn=1, data=INITIALIZED))
    w.feed(MessageReceived(conn=1, data=request(2, "process/start", _start("p", pipeStdin=True))))
    if level == 1:
        return
    w.feed(ProcessSpawned(proc=1, pid=4242))
    w.feed(OutputReceived(proc=1, stream="stdout", data=b"hello\n"))
    read = {"processId": "p", "afterSeq": 1, "waitMs": 5000}
    w.feed(MessageReceived(conn=1, data=request(3, "process/read", read)))
    w.feed(ConnectionOpened(conn=2, session_id=w.mint()))
    w.feed(MessageReceived(conn=2, data=request(1, "initialize", {"clientName": "g"})))
    w.feed(MessageReceived(conn=2, data=INITIALIZED))
    for conn in (1, 2):
        _call(w, conn, "process/start", _start("q", networkProxy={
            "proxy": PROXY, "policyDecisionTimeoutMs": 1000}))
        w.feed(ProcessSpawned(proc=w.procs[-1], pid=4242 + conn))
        w.feed(_proxy_asked(w, 0, MISSED)[0])  # the client is asked, and has a second to answer
    if level == 2:
        return
    _call(w, 2, "process/start", _start("t", tty=True))
    w.feed(ProcessSpawned(proc=w.procs[-1], pid=4245))
    _call(w, 2, "process/write", {"processId": "t", "chunk": "aGk=", "writeId": "0"})
    _call(w, 2, "fs/open", {"handleId": "h", "path": "file:///x"})
    w.feed(FsCompleted(op=w.ops[-1], result={}))
    _call(w, 2, "fs/open", {"handleId": "i", "path": "file:///y", "mode": "replace"})
    w.feed(FsCompleted(op=w.ops[-1], result={}))
    _call(w, 2, "fs/watchMissing", {"watchId": 1, "missing": ["file:///x/y"]})
    w.feed(FsCompleted(op=w.ops[-1], result={"watching": True}))
    _call(w, 2, "fs/readFile", {"path": "file:///x"})
    _call(w, 2, "http/request", {"method": "GET", "url": "http://127.0.0.1:1/", "headers": [],
                                 "requestId": "r", "streamResponse": True})
    w.feed(HttpResponded(op=w.ops[-1], status=200, headers=()))
    _call(w, 2, "forward/open", {"port": 8080})
    w.feed(ForwardConnected(stream=max(w.ever_streams)))
    _call(w, 2, "forward/open", {"port": 8081, "host": "127.0.0.1"})


def settle(w: World) -> Iterator[Event]:
    """The adapter finishes everything the core asked of it: every spawn is reported, every fs
    call and watch check completes, every http call answers and ends, every forward connects
    or fails and writes what it was asked to. Then no call may be left waiting (`unanswered`)
    but for long polls, which the timers answer."""
    for proc in list(w.procs):
        if proc not in w.reported and proc not in w.finalized:
            yield ProcessSpawned(proc=proc, pid=4242)
    for op in list(w.fs_ops):
        yield FsCompleted(op=op, result={})
    for op in w.http_in(ISSUED):
        yield HttpResponded(op=op, status=200, headers=())
    for op in list(w.http_ops):
        yield HttpFinished(op=op)
    for stream, phase in list(w.forwards.items()):
        if phase == CONNECTING:
            yield ForwardFailed(stream=stream, error="Connection refused (os error 111)")
        elif stream in w.forwards and w.backlog[stream]:
            yield ForwardWritten(stream=stream, size=w.backlog[stream])


def wind_down(w: World) -> Iterator[Event]:
    """Every client goes and every process ends: its exit, then its streams' EOFs."""
    for conn in sorted(w.conns):
        yield ConnectionClosed(conn=conn)
    for proc in list(w.procs):
        if proc not in w.reported or proc in w.finalized:
            continue
        if proc not in w.exited:
            yield ProcessExited(proc=proc, returncode=0)
        for stream in STREAMS_TTY if w.tty[proc] else STREAMS_PIPE:
            if (proc, stream) not in w.eofs:
                yield StreamClosed(proc=proc, stream=stream)


# What the core keeps for a client, a session, a process or a call: once all are gone and their
# timers have run out, each must be empty again (memory bounded by what is live). By owner: the
# core itself (""), its stats, a family made at its first use (skipped if it was not).
LEFTOVER_TABLES = {
    "": ("_conns", "_sessions", "_procs", "_finalized", "_closed_bytes", "_reclaimed", "_ops",
         "_launches", "_asks"),
    "stats": ("_pending", "_spawned"),
    "_fs.watches": ("_watch_of", "_last_id"),
    "_forwarding": ("_forwards", "_forward_ids", "_forward_next"),
}


def leftovers(core: ServerCore) -> dict[str, int]:
    """The LEFTOVER_TABLES not empty, and their sizes."""
    kept = {}
    for owner_name, names in LEFTOVER_TABLES.items():
        owner: Any = core
        for part in owner_name.split(".") if owner_name else ():
            owner = getattr(owner, part) if owner is not None else None
        if owner is None:
            continue
        for name in names:
            assert hasattr(owner, name), f"the core has no {owner_name}.{name}: see LEFTOVER_TABLES"
            if size := len(getattr(owner, name)):
                kept[f"{owner_name}.{name}" if owner_name else name] = size
    return kept


def event_sequences(
    prelude: int, steps: list[tuple[float, tuple[Any, ...]]], loopback: bool
) -> None:
    """Any event sequence: actions, or `LocalProtocolError` (then the core is done with).
    ``loopback``: the operator allows forwards to the host's loopback, where a session has no
    network of its own (so an unrouted forward may be opened again there)."""
    w = World(attrs.evolve(CONFIG, forward_loopback=loopback))
    fed: list[Event] = []
    try:
        event_prelude(w, prelude)
        for delay, (kind, *args) in steps:
            if delay:
                w.now += delay
                w.tick_due()  # as an adapter would: a deadline passed
            try:
                events = RESOLVE[kind](w, *args)
            except Skip:
                continue
            for event in events:
                fed.append(event)
                w.feed(event)
        for event in settle(w):
            fed.append(event)
            w.feed(event)
        w.run_out_timers()
        unanswered = [(conn, msg_id, method) for (conn, msg_id), method in w.asked.items()
                      if (conn, msg_id) not in w.answered and conn not in w.closing]
        assert not unanswered, f"never answered, though the adapter did its part: {unanswered}"
        # The proxy's questions too: the decider's silence has run out by now.
        assert not w.proxy_asks, f"the proxy was never answered: {list(w.proxy_asks.values())}"
        for event in wind_down(w):
            fed.append(event)
            w.feed(event)
        w.run_out_timers(100)
        assert w.core.next_deadline() is None, "time passed, and something still waits on it"
        assert not w.proxy_asks, f"the proxy was never answered: {list(w.proxy_asks.values())}"
        kept = leftovers(w.core)
        assert not kept, f"every client gone and every process over, the core still holds {kept}"
    except LocalProtocolError:
        return  # the adapter's mistake, reported as such; the core is unusable now
    except BaseException as exc:
        exc.add_note("events fed after the prelude, the last one failing:")
        for event in fed:
            exc.add_note(f"    {event!r}")
        raise


# The deeper preludes first: sampled_from shrinks toward its first element.
EVENT_SEQUENCES = {"prelude": st.sampled_from([3, 3, 2, 2, 1, 0]), "steps": steps,
                   "loopback": st.booleans()}


# -- running: pytest, long runs, atheris --------------------------------------------------------

TARGETS: dict[str, tuple[Callable[..., None], dict[str, st.SearchStrategy[Any]]]] = {
    "client_messages": (client_messages, CLIENT_MESSAGES),
    "event_sequences": (event_sequences, EVENT_SEQUENCES),
}


def hypothesis_test(name: str, examples: int, seed: int | None = None) -> Callable[[], None]:
    """Target ``name`` as a hypothesis test of ``examples`` examples."""
    body, strategies = TARGETS[name]
    # A fresh function object each time: hypothesis marks the one it decorates.
    fresh = types.FunctionType(body.__code__, body.__globals__, body.__name__, body.__defaults__)
    fresh.__doc__ = body.__doc__
    test = given(**strategies)(settings(FUZZ_SETTINGS, max_examples=examples)(fresh))
    return test if seed is None else hypothesis.seed(seed)(test)


def _run_batch(job: tuple[str, int, int]) -> str | None:
    """Run one batch in a worker; the failure report as text (exceptions may not pickle)."""
    name, examples, seed = job
    try:
        hypothesis_test(name, examples, seed)()
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
        report = "".join(traceback.format_exception(exc))
        rerun = (
            f"EXECPROTO_FUZZ_SEED={seed} EXECPROTO_FUZZ_EXAMPLES={examples} pytest fuzz -k {name}"
        )
        return f"{name}: a batch failed; rerun it alone with\n    {rerun}\n\n{report}"
    return None


# Examples of each target, as a share of EXAMPLES. An event sequence sends calls of every family
# and settles them all at its end, which costs half as much again as the process calls it sent
# before: so two thirds as many, and `make test` takes the time it did.
SHARE = {"client_messages": 1.0, "event_sequences": 2 / 3}


def fuzz(name: str) -> None:
    """Run target ``name`` for its SHARE of EXAMPLES examples.

    Up to BATCH examples it is one hypothesis run. Beyond, the budget is split into batches, each
    a fresh hypothesis engine with its own seed: one engine remembers every example it tried
    (about 12 KB each), so a million in one run would not fit in memory. Batches run on WORKERS
    processes (forked; default: every CPU), and the first failure stops the rest.
    """
    if SEED is not None:  # one batch again, of the size its report gave
        hypothesis_test(name, EXAMPLES, int(SEED))()
        return
    examples = max(1, round(EXAMPLES * SHARE.get(name, 1.0)))  # other files' targets: all
    if examples <= BATCH:
        hypothesis_test(name, examples)()
        return
    seeds = random.SystemRandom()
    jobs = []
    for start in range(0, examples, BATCH):
        jobs.append((name, min(BATCH, examples - start), seeds.getrandbits(64)))
    workers = min(WORKERS, len(jobs))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for job in jobs:
            failure = _run_batch(job)
            if failure is not None:
                raise AssertionError(failure)
        return
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for failure in pool.imap_unordered(_run_batch, jobs):
            if failure is not None:
                pool.terminate()
                raise AssertionError(failure)


def test_client_messages() -> None:
    fuzz("client_messages")


def test_event_sequences() -> None:
    fuzz("event_sequences")


def test_each_method_goes_through_a_sequence() -> None:
    """Each method of the registry, its example sent in a sequence, is answered once the
    adapter has done its part (`settle`): so the world knows every event a call waits for,
    and a method added to the registry is fuzzed deep, not only refused. Its own failure says
    which method waits for what the world cannot yet feed."""
    waiting = []
    for name, method in METHODS.items():
        w = World()
        event_prelude(w, 3)
        w.feed(MessageReceived(conn=2, data=w.request_frame(2, (name, method.example))))
        for event in settle(w):
            w.feed(event)
        w.run_out_timers()
        if name != "initialized" and not w.answered >= set(w.asked):
            waiting.append(name)
    assert not waiting, f"never answered in a settled sequence: {waiting}"


_ATHERIS_TESTS = [hypothesis_test(name, 1) for name in TARGETS]


def one_input(data: bytes) -> None:
    """libFuzzer entry point: the first byte picks the target, the rest drives hypothesis."""
    if not data:
        return
    test = _ATHERIS_TESTS[data[0] % len(_ATHERIS_TESTS)]
    test.hypothesis.fuzz_one_input(data[1:])  # type: ignore[attr-defined]


def main() -> None:
    try:
        import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]  # optional
    except ImportError:
        raise SystemExit(
            "atheris is not installed (pip install atheris); or run: pytest fuzz"
        ) from None

    atheris.instrument_all()
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
