"""A model-based test of `ServerCore`: a fake world of clients and processes, explicit time.

A hypothesis `RuleBasedStateMachine` plays every participant the core talks to:

- clients open connections, do the handshake, start/read/write/signal/terminate processes,
  drop their connections and resume their sessions (also with unknown or attached ids);
- each `Spawn` becomes a fake process that is later reported spawned or failed, writes bytes on
  its streams, exits (maybe killed by a signal) and closes its streams in any order, obeying
  physics (nothing on a stream after its EOF, one exit, a KILLed process exits soon after);
- the transport reports `SendBlocked` / `SendDrained`;
- time advances, with a `Tick` at every deadline the core asked for (as `Harness.advance` does).

Beside the world runs a reference model of the protocol (docs/protocol.md; holding, pausing and
the deadlines as docs/design.md and `execproto._lifecycle` state them): it predicts every step's
responses, notifications, signals, spawns, stdin writes, pause/resume and finalizations, and the
step compares them with what the core emitted. Invariants that need no model at all (seq
consistency, no signal after exit, one `Finalize`, no byte lost or corrupted) are checked on what
was observed, after every step. At teardown every live session is read from seq 0 (resuming the
detached ones) and the recorded trace must replay identically.

Times are exact binary fractions and the model computes every deadline with the same arithmetic
as the core, so "the core missed a deadline" is an exact check (`no_deadline_missed`).

One machine, so one file; its sections, in order (the ``# --`` banners):

- `CONFIGS` and the pools the rules draw from (connections, processIds, write ids, exit codes).
- *the model's state*: `MConn`, `MSession`, `MProc` (a process's expected log, seqs, hold and
  read results), `PendingRead`, and `Expect` (what one step must emit).
- *the state machine*, `CoreModel`:
  - *feeding one event, and checking its actions*: `feed` predicts, then `_check` compares;
  - *expectations helpers*: `_expect_*`, and the model's follow-ups (`_notify`, `_wake`,
    `_sync` for pause/resume, `_terminate`, `_close`);
  - *the model: what each event must do*: `_predict` and the `_predict_*` methods (spawn,
    spawn failure, exit, deadlines, each request);
  - *clients*: the rules (connect and handshake, calls before it, start, spawn results, output
    and EOF, exit, read and long poll, write, signal and terminate, disconnect, flow control,
    advancing time, reading everything back);
  - *invariants*, checked without the model; then `teardown`.
- The settings (examples, steps per run) and `TestCoreModel`.
"""

from __future__ import annotations

import base64
import json
import sys
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import event as note_event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from execproto import (
    Action,
    CloseConnection,
    CloseStdin,
    Config,
    ConnectionClosed,
    ConnectionOpened,
    EndSession,
    Event,
    Finalize,
    LocalProtocolError,
    MessageReceived,
    OutputReceived,
    PauseOutput,
    ProcessExited,
    ProcessSpawned,
    ResizeTerminal,
    ResumeOutput,
    Send,
    SendBlocked,
    SendDrained,
    Signal,
    Spawn,
    SpawnFailed,
    SpawnSpec,
    StreamClosed,
    Tick,
    WriteStdin,
    replay,
)

from .harness import CWD, Harness

# Small bounds so that drops, write-id forgetting, kills, abandonment, expiry and eviction all
# happen within a few dozen steps. Times are multiples of 1/8 s, exact in binary floating point.
CONFIGS = [
    Config(
        retention_bytes=256,
        retention_chunks=8,
        kill_grace=0.5,
        session_ttl=2.0,
        closed_ttl=3.0,
        write_id_memory=4,
    ),
    Config(
        retention_bytes=100,
        retention_chunks=3,
        kill_grace=1.0,
        session_ttl=4.0,
        closed_ttl=1.0,
        write_id_memory=2,
    ),
    Config(kill_grace=0.25, session_ttl=1.5, closed_ttl=2.0),
]

CONNS = (1, 2, 3)  # connection numbers are reused once closed, as an adapter may
PROCESS_IDS = ("a", "b", "c")
WRITE_IDS = ("w1", "w2", "w3", "w4")
ARGV_WORDS = ("sh", "-c", "echo hi", "x y", "ünï", "")
RETURNCODES = (0, 1, 2, 127, 255, -2, -9, -15)
CHUNK_SIZES = (1, 5, 40, 90, 150)

STARTING, RUNNING, EXITED, CLOSED, FAILED = "starting", "running", "exited", "closed", "failed"
LIVE = (STARTING, RUNNING, EXITED)  # not finalized

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SESSION_ATTACHED = -32010


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def exit_code_of(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


# -- the model's state ------------------------------------------------------------------------


class MConn:
    def __init__(self, conn: int, inc: int, new_sid: str) -> None:
        self.conn = conn
        self.inc = inc  # unique per incarnation: connection numbers are reused
        self.new_sid = new_sid
        self.state = "new"  # new -> initializing -> ready
        self.session: MSession | None = None
        self.blocked = False
        self.open = True
        self.closing = False  # the core emitted CloseConnection for it
        self.greet_at: float | None = None  # when it is closed unless it has initialized
        self.received = 0  # messages the core sent it: a send buffer fills only with these


class MSession:
    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.conn: MConn | None = None
        self.detached_at: float | None = None
        self.expired = False
        self.procs: dict[str, MProc] = {}  # processId -> process, until failed or evicted


class MProc:
    def __init__(
        self, handle: int, pid: str, session: MSession, start_id: int, start_conn: MConn,
        tty: bool, pipe_stdin: bool,
    ) -> None:
        self.handle = handle
        self.pid = pid
        self.session = session
        self.start_id = start_id
        self.start_conn = start_conn
        self.tty = tty
        self.pending_size: tuple[int, int] | None = None  # resized while starting
        streams = ("pty",) if tty else ("stdout", "stderr")
        # The world's side (physics).
        self.world_open = set(streams)  # streams not yet at EOF
        self.world_exited = False
        self.kill_sent = False  # obligation: exit soon
        self.spawn_outcome: str | None = None  # "spawned" | "failed"
        self.fed: dict[str, bytearray] = {s: bytearray() for s in streams}  # bytes fed while live
        # The protocol's side (what the core must be doing).
        self.phase = STARTING
        self.core_open = set(streams)
        self.next_seq = 1
        self.expected: dict[int, tuple[Any, ...]] = {}  # seq -> the event that took it
        self.log: list[int] = []  # retained output seqs, oldest first
        self.log_bytes = 0
        self.dropped_bytes = 0
        self.exit_code: int | None = None
        self.stdin_open = tty or pipe_stdin
        self.write_ids: OrderedDict[str, None] = OrderedDict()
        self.terminating = False
        self.kill_at: float | None = None
        self.abandon_at: float | None = None
        self.evict_at: float | None = None
        self.timed_out = False
        self.abandoned = False
        self.paused = False
        self.held = False  # detached: the log drops nothing, output pauses when it is full

    @property
    def live(self) -> bool:
        return self.phase in LIVE

    def take_seq(self, what: tuple[Any, ...]) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.expected[seq] = what
        return seq

    def view(self) -> tuple[Any, ...]:
        """What a read result shows besides the chunks (which no timer changes)."""
        return (self.phase, self.next_seq, self.exit_code, self.abandoned)

    def append_output(self, seq: int, size: int, config: Config) -> None:
        self.log.append(seq)
        self.log_bytes += size
        if not self.held:
            self.trim(config)

    def full(self, config: Config) -> bool:
        return self.log_bytes >= config.retention_bytes or len(self.log) >= config.retention_chunks

    def trim(self, config: Config) -> None:
        # Newest chunks are kept, never the newest one dropped (docs/design.md, "Output,
        # retention and flow control").
        while len(self.log) > 1 and (
            self.log_bytes > config.retention_bytes or len(self.log) > config.retention_chunks
        ):
            gone = self.log.pop(0)
            size_gone = len(self.expected[gone][2])
            self.log_bytes -= size_gone
            self.dropped_bytes += size_gone

    def ready(self, after: int) -> bool:
        """Whether a read at ``after`` is answered at once (docs/protocol.md, `process/read`)."""
        if self.phase == CLOSED or (self.log and self.log[-1] > after):
            return True
        return self.phase == EXITED and after < self.next_seq - 1

    def snapshot(self) -> tuple[tuple[int, ...], int]:
        """The log as a read sees it: retained seqs and dropped bytes."""
        return tuple(self.log), self.dropped_bytes

    def take(
        self, after: int, max_bytes: int | None, log: tuple[int, ...]
    ) -> tuple[list[int], bool]:
        """The seqs a read returns, and whether max_bytes cut it short."""
        chunks = [s for s in log if s > after]
        taken: list[int] = []
        total = 0
        for s in chunks:
            total += len(self.expected[s][2])
            if max_bytes is not None and taken and total > max_bytes:
                break
            taken.append(s)
        return taken, len(taken) < len(chunks)

    def read_result(
        self, after: int, max_bytes: int | None, view: tuple[Any, ...],
        snapshot: tuple[tuple[int, ...], int],
    ) -> dict[str, Any]:
        phase, next_seq, exit_code, abandoned = view
        log, dropped_bytes = snapshot
        taken, truncated = self.take(after, max_bytes, log)
        return {
            "chunks": [
                {"seq": s, "stream": self.expected[s][1], "chunk": b64(self.expected[s][2])}
                for s in taken
            ],
            "nextSeq": taken[-1] + 1 if truncated else next_seq,
            "exited": phase in (EXITED, CLOSED),
            "exitCode": exit_code,
            "closed": phase == CLOSED,
            "failure": "<abandoned>" if abandoned else None,
            "sandboxDenied": False,
            "firstRetainedSeq": log[0] if log else next_seq,
            "droppedBytes": dropped_bytes,
        }


class PendingRead:
    def __init__(
        self, msg_id: int, conn: MConn, proc: MProc, after: int, max_bytes: int | None,
        deadline: float,
    ) -> None:
        self.msg_id = msg_id
        self.conn = conn
        self.proc = proc
        self.after = after
        self.max_bytes = max_bytes
        self.deadline = deadline


Checker = Callable[[dict[str, Any]], None]


class Expect:
    """What one `handle()` call must emit, as the model predicts it."""

    def __init__(self, allow_pre: bool) -> None:
        self.allow_pre = allow_pre  # a Tick may answer a read before a timer in the same Tick
        self.responses: dict[int, tuple[int, Checker]] = {}  # msg id -> (conn, checker)
        self.notifications: list[tuple[int, dict[str, Any]]] = []
        self.others: list[Action] = []


class _Driver(Harness):
    """The scripted harness, with every fed event routed through the model."""

    def __init__(self, model: CoreModel, config: Config) -> None:
        super().__init__(config)
        self.model = model

    def feed(self, event: Event) -> list[Action]:
        return self.model.feed(event)


def _pick(items: list[Any], index: int) -> Any:
    return items[index % len(items)]


# -- the state machine --------------------------------------------------------------------------


class CoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h: _Driver | None = None

    @initialize(
        config=st.sampled_from(CONFIGS),
        processes=st.integers(0, 2),
        tty=st.booleans(),
    )
    def setup(self, config: Config, processes: int, tty: bool) -> None:
        self.config = config
        self.h = _Driver(self, config)
        self.conns: dict[int, MConn] = {}  # open connections by number
        self.sessions: dict[str, MSession] = {}  # every session ever created
        self.procs: dict[int, MProc] = {}  # every process ever spawned, by handle
        self.reads: dict[int, PendingRead] = {}  # long-poll reads waiting, by msg id
        self.next_handle = 1
        self.next_msg_id = 0
        self.next_inc = 0
        self.next_sid = 0
        self.step_no = 0
        self.exp: Expect | None = None
        self.pre_views: dict[int, tuple[Any, ...]] = {}
        self.responses: dict[int, dict[str, Any]] = {}  # msg id -> the response seen
        # Observations, for the model-free invariants.
        # (proc, connection incarnation, via, seq, what), checked by the invariants.
        self.new_obs: list[tuple[int, int, str, int, tuple[Any, ...]]] = []
        self.seen: dict[int, dict[int, tuple[Any, ...]]] = {}  # proc -> seq -> what
        self.last_note_seq: dict[tuple[int, int], int] = {}  # (inc, proc) -> last notified seq
        self.exited_notes: dict[int, int] = {}  # proc -> seq of its exited notification
        self.closed_notes: dict[int, int] = {}
        self.exit_step: dict[int, int] = {}  # proc -> step that fed its ProcessExited
        self.finalizes: Counter[int] = Counter()
        self.finalize_status: dict[int, str] = {}
        self.actual_paused: dict[int, bool] = {}
        self.stats: Counter[str] = Counter()
        self.chunks_made = 0
        # Most runs are about processes: begin with one client past the handshake.
        c = self._open(1)
        self._send(c, "initialize", {"clientName": "model"})
        self._send(c, "initialized", {}, request=False)
        for n in range(processes):
            self._start(c, PROCESS_IDS[-1 - n], ["sh", "-c", "work"], tty and n == 0, True, "now")

    @property
    def now(self) -> float:
        assert self.h is not None
        return self.h.now

    # -- feeding one event, and checking its actions ----------------------------------------------

    def feed(self, event: Event) -> list[Action]:
        assert self.h is not None
        self.step_no += 1
        self.pre_views = {h: p.view() for h, p in self.procs.items()}
        self.exp = exp = Expect(allow_pre=isinstance(event, Tick))
        self._predict(event)
        try:
            actions = Harness.feed(self.h, event)
        except LocalProtocolError as exc:
            raise AssertionError(f"LocalProtocolError for a legal event {event!r}: {exc}") from exc
        self._check(event, actions, exp)
        self.exp = None
        return actions

    def _check(self, event: Event, actions: list[Action], exp: Expect) -> None:
        notes: list[tuple[int, dict[str, Any]]] = []
        others: list[Action] = []
        finalized_now: set[int] = set()
        for action in actions:
            proc = getattr(action, "proc", None)
            if proc is not None and not isinstance(action, Spawn):
                assert self.finalizes[proc] == 0 and proc not in finalized_now, (
                    f"{action!r} after the process was finalized"
                )
            if isinstance(action, Send):
                assert action.conn in self.conns, f"Send on a closed connection: {action!r}"
                self.conns[action.conn].received += 1
                msg = json.loads(action.data)
                assert msg.get("jsonrpc") == "2.0", msg
                if "method" in msg:
                    notes.append((action.conn, msg))
                    self._observe_notification(action.conn, msg)
                    continue
                found = exp.responses.pop(msg.get("id"), None)
                assert found is not None, f"unexpected response on conn {action.conn}: {msg}"
                conn, checker = found
                assert action.conn == conn, f"response on conn {action.conn}, asked on {conn}"
                checker(msg)
                self.responses[msg["id"]] = msg
                continue
            if isinstance(action, CloseConnection):
                assert action.reason, action
                action = CloseConnection(conn=action.conn, code=action.code, reason="")
            others.append(action)
            if isinstance(action, Signal):
                # Invariant 2: never a signal once the exit was fed (the pid may be reaped).
                assert proc not in self.exit_step, f"{action!r} after ProcessExited"
                assert self.procs[action.proc].spawn_outcome == "spawned", (
                    f"{action!r} before the process was spawned"
                )
            elif isinstance(action, Finalize):
                finalized_now.add(action.proc)
                self.finalizes[action.proc] += 1
                self.finalize_status[action.proc] = action.status
            elif isinstance(action, PauseOutput):
                self.actual_paused[action.proc] = True
            elif isinstance(action, ResumeOutput):
                self.actual_paused[action.proc] = False
        assert not exp.responses, f"not answered in this step: {sorted(exp.responses)}"

        def key(item: tuple[int, dict[str, Any]]) -> str:
            return json.dumps([item[0], item[1]], sort_keys=True)

        assert sorted(map(key, notes)) == sorted(map(key, exp.notifications)), (
            f"notifications differ on {event!r}:\n got      {notes}\n expected {exp.notifications}"
        )
        assert Counter(others) == Counter(exp.others), (
            f"actions differ on {event!r}:\n got      {others}\n expected {exp.others}"
        )

    def _observe_notification(self, conn: int, msg: dict[str, Any]) -> None:
        c = self.conns[conn]
        method, params = msg["method"], msg["params"]
        assert method in ("process/output", "process/exited", "process/closed"), msg
        assert c.session is not None, f"notification on a connection without a session: {msg}"
        proc = c.session.procs.get(params["processId"])
        assert proc is not None, f"notification for a process the session lacks: {msg}"
        if method == "process/output":
            what: tuple[Any, ...] = (
                "output", params["stream"], base64.b64decode(params["chunk"], validate=True)
            )
        elif method == "process/exited":
            assert params["sandboxDenied"] is False
            what = ("exited", params["exitCode"])
        else:
            what = ("closed",)
        self.new_obs.append((proc.handle, c.inc, "notification", params["seq"], what))

    def _observe_read(self, proc: MProc, result: dict[str, Any]) -> None:
        for chunk in result["chunks"]:
            what = ("output", chunk["stream"], base64.b64decode(chunk["chunk"], validate=True))
            self.new_obs.append((proc.handle, 0, "read", chunk["seq"], what))

    # -- expectations helpers ---------------------------------------------------------------------

    def _expect_response(self, conn: MConn, msg_id: int, checker: Checker) -> None:
        assert self.exp is not None
        self.exp.responses[msg_id] = (conn.conn, checker)

    def _expect_result(self, conn: MConn, msg_id: int, result: Any) -> None:
        def check(msg: dict[str, Any]) -> None:
            assert msg == {"jsonrpc": "2.0", "id": msg_id, "result": result}, (msg, result)

        self._expect_response(conn, msg_id, check)

    def _expect_error(
        self, conn: MConn, msg_id: int, code: int, contains: str = "", data: Any = None
    ) -> None:
        def check(msg: dict[str, Any]) -> None:
            assert "error" in msg and "result" not in msg, msg
            error = msg["error"]
            assert error["code"] == code, (error, code)
            assert contains in error["message"], (error, contains)
            assert error.get("data") == data, (error, data)

        self._expect_response(conn, msg_id, check)

    def _expect_read(self, read: PendingRead) -> None:
        proc, exp = read.proc, self.exp
        assert exp is not None
        allow_pre = exp.allow_pre
        pre = self.pre_views.get(proc.handle)
        # The log as it is when the read is answered: a release later in the step may trim it.
        snapshot = proc.snapshot()

        def check(msg: dict[str, Any]) -> None:
            assert "result" in msg, msg
            result = dict(msg["result"])
            if result["failure"] is not None:
                assert isinstance(result["failure"], str) and result["failure"]
                result["failure"] = "<abandoned>"
            candidates = [proc.read_result(read.after, read.max_bytes, proc.view(), snapshot)]
            if allow_pre and pre is not None:
                candidates.append(proc.read_result(read.after, read.max_bytes, pre, snapshot))
            assert result in candidates, (
                f"read of {proc.pid} after {read.after} max {read.max_bytes}:\n"
                f" got      {result}\n expected {candidates[0]}"
            )
            self._observe_read(proc, msg["result"])

        self._expect_response(read.conn, read.msg_id, check)
        if proc.held and not proc.take(read.after, read.max_bytes, snapshot[0])[1]:
            # Everything held was read back: the log may drop again.
            self._release(proc)

    def _release(self, proc: MProc) -> None:
        proc.held = False
        proc.trim(self.config)
        self._sync(proc)

    def _emit(self, action: Action) -> None:
        assert self.exp is not None
        self.exp.others.append(action)

    def _notify(self, proc: MProc, method: str, params: dict[str, Any]) -> None:
        conn = proc.session.conn
        if conn is not None:
            assert self.exp is not None
            msg = {"jsonrpc": "2.0", "method": method, "params": params}
            self.exp.notifications.append((conn.conn, msg))

    def _wake(self, proc: MProc) -> None:
        for msg_id, read in list(self.reads.items()):
            if read.proc is proc and proc.ready(read.after):
                del self.reads[msg_id]
                self.stats["long poll woken"] += 1
                self._expect_read(read)

    def _should_pause(self, proc: MProc) -> bool:
        """Output waits while the client is blocked, or while a held log is full."""
        conn = proc.session.conn
        blocked = conn is not None and conn.blocked
        return blocked or (proc.held and proc.full(self.config))

    def _sync(self, proc: MProc) -> None:
        # Only spawned, unfinalized processes have pipes to pause; one still starting is synced
        # when its spawn is reported.
        paused = self._should_pause(proc)
        if proc.phase in (RUNNING, EXITED) and proc.paused != paused:
            proc.paused = paused
            kind = PauseOutput if paused else ResumeOutput
            self._emit(kind(proc=proc.handle))

    def _sync_session(self, session: MSession) -> None:
        for proc in session.procs.values():
            self._sync(proc)

    def _terminate(self, proc: MProc) -> None:
        if proc.terminating or proc.phase == CLOSED:
            return
        proc.terminating = True
        if proc.held:
            self._release(proc)
        if proc.phase == RUNNING:
            self._emit(Signal(proc=proc.handle, signal="TERM"))
            proc.kill_at = self.now + self.config.kill_grace
        elif proc.phase == EXITED:
            proc.abandon_at = self.now + self.config.kill_grace

    def _close(self, proc: MProc) -> None:
        seq = proc.take_seq(("closed",))
        self._notify(proc, "process/closed", {"processId": proc.pid, "seq": seq})
        proc.phase = CLOSED
        proc.kill_at = proc.abandon_at = None
        proc.evict_at = self.now + self.config.closed_ttl
        self._emit(
            Finalize(
                proc=proc.handle, status="completed", exit_code=proc.exit_code,
                timed_out=proc.timed_out,
            )
        )
        self.stats["closed"] += 1
        if proc.timed_out:
            self.stats["closed timed out"] += 1
        self._wake(proc)

    # -- the model: what each event must do -------------------------------------------------

    def _predict(self, event: Event) -> None:
        if isinstance(event, ConnectionOpened):
            assert event.conn not in self.conns
            self.next_inc += 1
            c = self.conns[event.conn] = MConn(event.conn, self.next_inc, event.session_id)
            c.greet_at = self.now + self.config.handshake_timeout
        elif isinstance(event, ConnectionClosed):
            c = self.conns.pop(event.conn)
            c.open = False
            for msg_id, read in list(self.reads.items()):
                if read.conn is c:
                    del self.reads[msg_id]  # cancelled: never answered
            if c.session is not None:
                c.session.conn = None
                c.session.detached_at = self.now
                for proc in c.session.procs.values():
                    if proc.phase in (STARTING, RUNNING, EXITED) and not proc.terminating:
                        proc.held = True
                        self.stats["held"] += 1
                self._sync_session(c.session)
        elif isinstance(event, (SendBlocked, SendDrained)):
            c = self.conns[event.conn]
            c.blocked = isinstance(event, SendBlocked)
            if c.session is not None:
                self._sync_session(c.session)
        elif isinstance(event, MessageReceived):
            self._predict_message(self.conns[event.conn], json.loads(event.data))
        elif isinstance(event, ProcessSpawned):
            self._predict_spawned(self.procs[event.proc])
        elif isinstance(event, SpawnFailed):
            self._predict_spawn_failed(self.procs[event.proc], event)
        elif isinstance(event, OutputReceived):
            proc = self.procs[event.proc]
            if proc.live:
                seq = proc.take_seq(("output", event.stream, event.data))
                proc.append_output(seq, len(event.data), self.config)
                if proc.dropped_bytes:
                    self.stats["output dropped"] += 1
                proc.fed[event.stream] += event.data
                self._notify(
                    proc, "process/output",
                    {"processId": proc.pid, "stream": event.stream, "seq": seq,
                     "chunk": b64(event.data)},
                )
                if proc.held and not proc.paused and proc.full(self.config):
                    self.stats["held full"] += 1
                    self._sync(proc)
                self._wake(proc)
        elif isinstance(event, StreamClosed):
            proc = self.procs[event.proc]
            if proc.live:
                proc.core_open.discard(event.stream)
                if proc.phase == EXITED and not proc.core_open:
                    self._close(proc)
        elif isinstance(event, ProcessExited):
            self._predict_exited(self.procs[event.proc], event.returncode)
        elif isinstance(event, Tick):
            self._predict_tick()
        else:  # pragma: no cover - the world sends nothing else
            raise AssertionError(event)

    def _predict_spawned(self, proc: MProc) -> None:
        assert proc.phase == STARTING
        proc.phase = RUNNING
        if proc.start_conn.open:
            self._expect_result(
                proc.start_conn, proc.start_id, {"processId": proc.pid, "sandboxType": "none"}
            )
        if proc.terminating:
            proc.terminating = False
            self._terminate(proc)
        self._sync(proc)
        if proc.pending_size is not None:  # asked while starting: the terminal gets it now
            rows, cols = proc.pending_size
            self._emit(ResizeTerminal(proc=proc.handle, rows=rows, cols=cols))
            proc.pending_size = None

    def _predict_spawn_failed(self, proc: MProc, event: SpawnFailed) -> None:
        assert proc.phase == STARTING
        proc.phase = FAILED
        assert proc.session.procs.get(proc.pid) is proc
        del proc.session.procs[proc.pid]
        if proc.start_conn.open:
            data = {"kind": event.kind}
            self._expect_error(proc.start_conn, proc.start_id, INTERNAL_ERROR, event.error, data)
        for msg_id, read in list(self.reads.items()):
            if read.proc is proc:
                del self.reads[msg_id]
                unknown = f"unknown process id {proc.pid}"
                self._expect_error(read.conn, msg_id, INVALID_REQUEST, unknown)
        self._emit(Finalize(proc=proc.handle, status="failed", exit_code=None, timed_out=False))

    def _predict_exited(self, proc: MProc, returncode: int) -> None:
        assert proc.phase == RUNNING, proc.phase  # the world exits only spawned processes, once
        proc.phase = EXITED
        proc.exit_code = exit_code_of(returncode)
        proc.stdin_open = False
        proc.kill_at = None
        seq = proc.take_seq(("exited", proc.exit_code))
        self._notify(
            proc, "process/exited",
            {"processId": proc.pid, "seq": seq, "exitCode": proc.exit_code, "sandboxDenied": False},
        )
        if not proc.core_open:
            self._close(proc)
            return
        if proc.terminating:
            proc.abandon_at = self.now + self.config.kill_grace
        self._wake(proc)

    def _due(self) -> list[tuple[float, int, str, Any]]:
        now, due = self.now, list[tuple[float, int, str, Any]]()
        for proc in self.procs.values():
            if proc.kill_at is not None and proc.kill_at <= now:
                due.append((proc.kill_at, 0, "kill", proc))
            if proc.abandon_at is not None and proc.abandon_at <= now:
                due.append((proc.abandon_at, 1, "abandon", proc))
            if proc.evict_at is not None and proc.evict_at <= now:
                due.append((proc.evict_at, 2, "evict", proc))
        for session in self.sessions.values():
            if session.detached_at is not None and not session.expired and session.conn is None:
                when = session.detached_at + self.config.session_ttl
                if when <= now:
                    due.append((when, 3, "expire", session))
        for read in self.reads.values():
            if read.deadline <= now:
                due.append((read.deadline, 4, "read", read))
        for c in self.conns.values():
            if c.greet_at is not None and c.greet_at <= now:
                due.append((c.greet_at, 5, "greet", c))
        due.sort(key=lambda item: item[:2])
        return due

    def _predict_tick(self) -> None:
        for _, _, kind, what in self._due():
            if kind == "kill":
                proc = what
                proc.kill_at = None
                if proc.phase == RUNNING:
                    proc.timed_out = True
                    proc.kill_sent = True
                    self._emit(Signal(proc=proc.handle, signal="KILL"))
                    self.stats["kill"] += 1
            elif kind == "abandon":
                proc = what
                proc.abandon_at = None
                if proc.live:
                    proc.core_open.clear()
                    proc.abandoned = True
                    proc.timed_out = True
                    self.stats["abandoned"] += 1
                    self._close(proc)
            elif kind == "evict":
                proc = what
                proc.evict_at = None
                if proc.session.procs.get(proc.pid) is proc:
                    del proc.session.procs[proc.pid]
                    self.stats["evicted"] += 1
            elif kind == "expire":
                session = what
                session.expired = True
                self.stats["expired"] += 1
                for proc in list(session.procs.values()):
                    if proc.live:
                        proc.timed_out = True
                        self._terminate(proc)
                    else:
                        del session.procs[proc.pid]
                self._emit(EndSession(session_id=session.sid))
            elif kind == "greet":
                c = what
                c.greet_at = None
                if c.state == "new" and not c.closing:
                    c.closing = True
                    self._emit(CloseConnection(conn=c.conn, code=1008, reason=""))
                    self.stats["never initialized"] += 1
            else:
                read = what
                if read.msg_id in self.reads:
                    del self.reads[read.msg_id]
                    self._expect_read(read)

    def _predict_message(self, c: MConn, msg: dict[str, Any]) -> None:
        method, msg_id = msg["method"], msg.get("id")
        params: dict[str, Any] = msg.get("params") or {}
        if c.closing:
            return  # the core asked the adapter to close it: everything after is moot
        if msg_id is None:
            assert method == "initialized"
            if c.state == "new":  # a protocol violation: the connection is dropped
                c.closing = True
                self._emit(CloseConnection(conn=c.conn, code=1002, reason=""))
            else:
                c.state = "ready"
            return
        if method == "initialize":
            if c.state == "new":
                self._predict_initialize(c, msg_id, params)
            else:
                self._expect_error(c, msg_id, INVALID_REQUEST, "initialize")
            return
        # Params are checked before the handshake state.
        if method == "process/start" and not params["argv"]:
            self._expect_error(c, msg_id, INVALID_PARAMS, "argv")
            return
        if c.state == "new":
            self._expect_error(c, msg_id, INVALID_REQUEST, "must call initialize")
            return
        if c.state == "initializing":
            self._expect_error(c, msg_id, INVALID_REQUEST, "must send initialized")
            return
        session = c.session
        assert session is not None
        proc = session.procs.get(params.get("processId", ""))
        if method == "process/start":
            self._predict_start(c, session, msg_id, params)
        elif method == "process/read":
            self._predict_read(c, proc, msg_id, params)
        elif method == "process/write":
            self._predict_write(c, proc, msg_id, params)
        elif method == "process/signal":
            if proc is not None and proc.phase == RUNNING:
                self._emit(Signal(proc=proc.handle, signal="INT"))
            self._expect_result(c, msg_id, {})
        elif method == "process/resize":
            self._predict_resize(c, proc, msg_id, params)
        elif method == "process/terminate":
            running = proc is not None and proc.phase in (STARTING, RUNNING)
            if proc is not None:
                self._terminate(proc)
            self._expect_result(c, msg_id, {"running": running})
        else:  # pragma: no cover
            raise AssertionError(method)

    def _predict_resize(
        self, c: MConn, proc: MProc | None, msg_id: int, params: dict[str, Any]
    ) -> None:
        """Unknown or without a terminal: -32600. Starting: the size waits for the spawn;
        running: resized at once; exited: nothing, and no error (docs/protocol.md)."""
        if proc is None or not proc.tty:
            why = "unknown process id" if proc is None else "has no terminal"
            self._expect_error(c, msg_id, INVALID_REQUEST, why)
            self.stats["resize refused"] += 1
            return
        size = (params["rows"], params["cols"])
        if proc.phase == STARTING:
            proc.pending_size = size
            self.stats["resize while starting"] += 1
        elif proc.phase == RUNNING:
            self._emit(ResizeTerminal(proc=proc.handle, rows=size[0], cols=size[1]))
            self.stats["resized"] += 1
        self._expect_result(c, msg_id, {})

    def _predict_initialize(self, c: MConn, msg_id: int, params: dict[str, Any]) -> None:
        resume = params.get("resumeSessionId")
        if resume is None:
            assert c.new_sid not in self.sessions
            session = self.sessions[c.new_sid] = MSession(c.new_sid)
        else:
            found = self.sessions.get(resume)
            if found is None or found.expired:
                self._expect_error(c, msg_id, INVALID_REQUEST, "unknown session id")
                self.stats["resume unknown"] += 1
                return
            if found.conn is not None:
                self._expect_error(c, msg_id, SESSION_ATTACHED)
                self.stats["resume attached"] += 1
                return
            session = found
            session.detached_at = None
            self.stats["resumed"] += 1
        session.conn = c
        c.session = session
        c.state = "initializing"
        c.greet_at = None
        self._expect_result(c, msg_id, {"sessionId": session.sid, "environmentInfo": {},
                                        "execproto": {"methods": [
                                            "process/ack", "process/resize", "session/end",
                                            "forward/open", "forward/write", "forward/ack",
                                            "forward/close"]}})
        self._sync_session(session)

    def _predict_start(
        self, c: MConn, session: MSession, msg_id: int, params: dict[str, Any]
    ) -> None:
        pid, argv = params["processId"], params["argv"]
        if pid in session.procs:
            self._expect_error(c, msg_id, INVALID_REQUEST, f"process {pid} already exists")
            return
        handle = self.next_handle
        self.next_handle += 1
        proc = MProc(handle, pid, session, msg_id, c, params["tty"], params["pipeStdin"])
        self.procs[handle] = proc
        session.procs[pid] = proc
        spec = SpawnSpec(
            argv=tuple(argv), arg0=None, cwd="/tmp", env=(), tty=params["tty"],
            pipe_stdin=params["pipeStdin"], session_id=session.sid, process_id=pid,
        )
        self._emit(Spawn(proc=handle, spec=spec))

    def _predict_read(
        self, c: MConn, proc: MProc | None, msg_id: int, params: dict[str, Any]
    ) -> None:
        if proc is None:
            unknown = f"unknown process id {params['processId']}"
            self._expect_error(c, msg_id, INVALID_REQUEST, unknown)
            return
        after = params.get("afterSeq") or 0
        wait_ms = params.get("waitMs") or 0
        deadline = self.now + wait_ms / 1000  # as the core computes it, to the last bit
        read = PendingRead(msg_id, c, proc, after, params.get("maxBytes"), deadline)
        if wait_ms == 0 or proc.ready(after):
            self._expect_read(read)
        else:
            self.reads[msg_id] = read
            self.stats["long poll"] += 1

    def _predict_write(
        self, c: MConn, proc: MProc | None, msg_id: int, params: dict[str, Any]
    ) -> None:
        write_id, data = params["writeId"], base64.b64decode(params["chunk"])
        if proc is None:
            status = "unknownProcess"
        elif proc.phase == STARTING:
            status = "starting"
        elif write_id in proc.write_ids:
            status = "accepted"  # a retry: not written again
            self.stats["write retried"] += 1
        elif not proc.stdin_open:
            status = "stdinClosed"
        else:
            proc.write_ids[write_id] = None
            if len(proc.write_ids) > self.config.write_id_memory:
                proc.write_ids.popitem(last=False)
            if data:
                self._emit(WriteStdin(proc=proc.handle, data=data))
            if params.get("closeStdin"):
                proc.stdin_open = False
                self._emit(CloseStdin(proc=proc.handle))
            status = "accepted"
        self.stats[f"write {status}"] += 1
        self._expect_result(c, msg_id, {"status": status})

    # -- clients -----------------------------------------------------------------------------------

    def _send(self, c: MConn, method: str, params: Any, request: bool = True) -> int:
        assert self.h is not None
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        msg_id = 0
        if request:
            self.next_msg_id += 1
            msg_id = message["id"] = self.next_msg_id
        self.h.feed(MessageReceived(conn=c.conn, data=json.dumps(message)))
        return msg_id

    def _open(self, conn: int) -> MConn:
        assert self.h is not None
        self.next_sid += 1
        self.h.feed(ConnectionOpened(conn=conn, session_id=f"session-{self.next_sid}"))
        return self.conns[conn]

    def _free_conns(self) -> list[int]:
        return [n for n in CONNS if n not in self.conns]

    def _open_conns(self) -> list[MConn]:
        return [self.conns[n] for n in sorted(self.conns)]

    def _resumable(self) -> list[MSession]:
        return [s for s in self.sessions.values() if s.conn is None and not s.expired]

    @precondition(lambda self: self._free_conns())
    @rule(i=st.integers(0, 10))
    def open_connection(self, i: int) -> None:
        self._open(_pick(self._free_conns(), i))

    @precondition(lambda self: self._free_conns())
    @rule(i=st.integers(0, 10), resume=st.booleans())
    def connect_and_handshake(self, i: int, resume: bool) -> None:
        """Open, initialize (a new session, or resume a detached one) and send initialized."""
        c = self._open(_pick(self._free_conns(), i))
        params: dict[str, Any] = {"clientName": "model"}
        sessions = self._resumable()
        if resume and sessions:
            params["resumeSessionId"] = _pick(sessions, i).sid
        self._send(c, "initialize", params)
        assert c.state == "initializing"
        self._send(c, "initialized", {}, request=False)

    @precondition(lambda self: self.conns)
    @rule(
        i=st.integers(0, 10),
        kind=st.sampled_from(
            ["initialized", "new", "detached", "attached", "expired", "no such session"]
        ),
    )
    def handshake_step(self, i: int, kind: str) -> None:
        """One handshake message on any connection, in or out of order: ``initialized``, or
        ``initialize`` for a new session or resuming a session: detached (resumable), attached
        elsewhere, expired, or one that never existed."""
        assert self.h is not None
        c = _pick(self._open_conns(), i)
        if kind == "initialized":
            self._send(c, "initialized", {}, request=False)
            if c.closing:  # sent before initialize: the core dropped it, the adapter closes it
                self.h.feed(ConnectionClosed(conn=c.conn))
            return
        params: dict[str, Any] = {"clientName": "model"}
        if kind != "new":
            sessions = {
                "detached": self._resumable(),
                "attached": [s for s in self.sessions.values() if s.conn is not None],
                "expired": [s for s in self.sessions.values() if s.expired],
            }.get(kind)
            params["resumeSessionId"] = _pick(sessions, i).sid if sessions else "no-such-session"
        self._send(c, "initialize", params)

    def _unready(self) -> list[MConn]:
        return [c for c in self._open_conns() if c.state != "ready"]

    @precondition(lambda self: self._unready())
    @rule(
        i=st.integers(0, 10),
        method=st.sampled_from(["process/read", "process/write", "process/terminate"]),
    )
    def call_before_handshake(self, i: int, method: str) -> None:
        """A process method before the handshake is done: an error, nothing else changes."""
        params: dict[str, Any] = {"processId": "a"}
        if method == "process/write":
            params.update(chunk="", writeId="w1")
        self._send(_pick(self._unready(), i), method, params)

    def _start(
        self, c: MConn, pid: str, argv: list[str], tty: bool, pipe_stdin: bool, spawn: str
    ) -> None:
        assert self.h is not None
        params = {
            "processId": pid, "argv": argv, "cwd": CWD, "env": {}, "tty": tty,
            "pipeStdin": pipe_stdin,
        }
        before = self.next_handle
        self._send(c, "process/start", params)
        if spawn != "later" and self.next_handle > before:
            self._spawn_result(self.procs[before], spawn == "now", "spawnNotFound")

    @precondition(lambda self: self.conns)
    @rule(
        i=st.integers(0, 10),
        pid=st.sampled_from(PROCESS_IDS),
        argv=st.lists(st.sampled_from(ARGV_WORDS), min_size=1, max_size=3),
        empty_argv=st.sampled_from([False] * 9 + [True]),
        tty=st.booleans(),
        pipe_stdin=st.sampled_from([True, False]),
        spawn=st.sampled_from(["now", "now", "now", "later", "fail"]),
    )
    def start(
        self, i: int, pid: str, argv: list[str], empty_argv: bool, tty: bool, pipe_stdin: bool,
        spawn: str,
    ) -> None:
        """process/start; the spawn is mostly reported at once, sometimes later (spawn_result)."""
        argv = [] if empty_argv else argv
        self._start(_pick(self._ready_conns(), i), pid, argv, tty, pipe_stdin, spawn)

    def _starting(self) -> list[MProc]:
        return [p for p in self.procs.values() if p.spawn_outcome is None]

    @precondition(lambda self: self._starting())
    @rule(
        i=st.integers(0, 10),
        ok=st.sampled_from([True, True, True, False]),
        kind=st.sampled_from(["spawnNotFound", "spawnPermissionDenied", "spawnFailed"]),
    )
    def spawn_result(self, i: int, ok: bool, kind: str) -> None:
        self._spawn_result(_pick(self._starting(), i), ok, kind)

    def _spawn_result(self, proc: MProc, ok: bool, kind: str) -> None:
        assert self.h is not None
        if ok:
            proc.spawn_outcome = "spawned"
            self.h.feed(ProcessSpawned(proc=proc.handle, pid=10_000 + proc.handle))
        else:
            proc.spawn_outcome = "failed"
            self.stats["spawn failed"] += 1
            error = f"os error ({kind})"
            self.h.feed(SpawnFailed(proc=proc.handle, error=error, kind=kind))

    def _chunk(self, size: int, salt: bytes) -> bytes:
        """``size`` bytes, unlike any other chunk of the run (so a misplaced chunk shows)."""
        self.chunks_made += 1
        unit = salt + self.chunks_made.to_bytes(4, "big")
        return (unit * (size // len(unit) + 1))[-size:]

    def _writing(self) -> list[MProc]:
        """Processes with a stream not at EOF, even finalized ones (abandoned pipes: their
        events are stale, and the core must ignore them)."""
        return [p for p in self.procs.values() if p.spawn_outcome == "spawned" and p.world_open]

    @precondition(lambda self: self._writing())
    @rule(
        i=st.integers(0, 10),
        sizes=st.lists(st.sampled_from(CHUNK_SIZES), min_size=1, max_size=6),
        salt=st.binary(min_size=1, max_size=4),
    )
    def output(self, i: int, sizes: list[int], salt: bytes) -> None:
        assert self.h is not None
        proc = _pick(self._writing(), i)
        for n, size in enumerate(sizes):
            data = self._chunk(size, salt)
            if not proc.world_open:
                break
            stream = _pick(sorted(proc.world_open), i + n)
            if not proc.live:
                self.stats["stale output"] += 1
            self.h.feed(OutputReceived(proc=proc.handle, stream=stream, data=data))

    @precondition(lambda self: self._writing())
    @rule(i=st.integers(0, 10))
    def close_stream(self, i: int) -> None:
        assert self.h is not None
        proc = _pick(self._writing(), i)
        stream = _pick(sorted(proc.world_open), i)
        proc.world_open.discard(stream)
        self.h.feed(StreamClosed(proc=proc.handle, stream=stream))

    def _running(self) -> list[MProc]:
        return [
            p for p in self.procs.values() if p.spawn_outcome == "spawned" and not p.world_exited
        ]

    def _exit(self, proc: MProc, returncode: int) -> None:
        assert self.h is not None
        proc.world_exited = True
        self.exit_step[proc.handle] = self.step_no + 1
        self.h.feed(ProcessExited(proc=proc.handle, returncode=returncode))

    @precondition(lambda self: self._running())
    @rule(i=st.integers(0, 10), returncode=st.sampled_from(RETURNCODES))
    def exit(self, i: int, returncode: int) -> None:
        self._exit(_pick(self._running(), i), returncode)

    @precondition(lambda self: self._running())
    @rule(
        i=st.integers(0, 10),
        returncode=st.sampled_from(RETURNCODES),
        order=st.randoms(use_true_random=False),
        late=st.lists(st.sampled_from(CHUNK_SIZES), max_size=3),
    )
    def finish(self, i: int, returncode: int, order: Any, late: list[int]) -> None:
        """A process exits and closes its streams in a random interleaving, with some output
        (late output of descendants, when it comes after the exit) mixed in."""
        assert self.h is not None
        proc = _pick(self._running(), i)
        steps: list[Any] = [None, *sorted(proc.world_open), *late]
        order.shuffle(steps)
        for step in steps:
            if step is None:
                self._exit(proc, returncode)
            elif isinstance(step, str):
                proc.world_open.discard(step)
                self.h.feed(StreamClosed(proc=proc.handle, stream=step))
            elif proc.world_open:
                stream = order.choice(sorted(proc.world_open))
                data = self._chunk(step, b"late")
                self.h.feed(OutputReceived(proc=proc.handle, stream=stream, data=data))

    @staticmethod
    def _target(c: MConn, pid: str, known: bool, i: int) -> str:
        """Mostly a processId the client's session has, sometimes any (maybe unknown)."""
        if known and c.session is not None and c.session.procs:
            return str(_pick(sorted(c.session.procs), i))
        return pid

    def _ready_conns(self) -> list[MConn]:
        return [c for c in self._open_conns() if c.state == "ready"] or self._open_conns()

    @precondition(lambda self: self.conns)
    @rule(
        i=st.integers(0, 10),
        pid=st.sampled_from(PROCESS_IDS),
        known=st.sampled_from([True, True, False]),
        after=st.sampled_from([None, -1, -1, -1, 0, 1, 2, 3, 5, 8, 13]),
        max_bytes=st.sampled_from([None, None, 0, 1, 16, 100, 1000]),
        wait_ms=st.sampled_from([None, 0, 250, 1000, 3000, 3000]),
    )
    def read(
        self, i: int, pid: str, known: bool, after: int | None, max_bytes: int | None,
        wait_ms: int | None,
    ) -> None:
        c = _pick(self._ready_conns(), i)
        pid = self._target(c, pid, known, i)
        params: dict[str, Any] = {"processId": pid}
        if after == -1:  # the cursor of a client that has seen everything so far
            proc = c.session.procs.get(pid) if c.session else None
            after = proc.next_seq - 1 if proc else 0
        if after is not None:
            params["afterSeq"] = after
        if max_bytes is not None:
            params["maxBytes"] = max_bytes
        if wait_ms is not None:
            params["waitMs"] = wait_ms
        self._send(c, "process/read", params)

    def _pollable(self) -> list[tuple[MConn, MProc]]:
        return [
            (c, p)
            for c in self._open_conns()
            if c.state == "ready" and c.session is not None
            for p in c.session.procs.values()
            if p.live
        ]

    @precondition(lambda self: self._pollable())
    @rule(
        i=st.integers(0, 10),
        behind=st.sampled_from([0, 0, 0, 1]),
        max_bytes=st.sampled_from([None, None, 1, 100]),
        wait_ms=st.sampled_from([250, 1000, 3000]),
    )
    def long_poll(self, i: int, behind: int, max_bytes: int | None, wait_ms: int) -> None:
        """A client that has seen everything waits for what comes next."""
        c, proc = _pick(self._pollable(), i)
        params: dict[str, Any] = {
            "processId": proc.pid,
            "afterSeq": max(0, proc.next_seq - 1 - behind),
            "waitMs": wait_ms,
        }
        if max_bytes is not None:
            params["maxBytes"] = max_bytes
        self._send(c, "process/read", params)

    @precondition(lambda self: self.conns)
    @rule(
        i=st.integers(0, 10),
        pid=st.sampled_from(PROCESS_IDS),
        known=st.sampled_from([True, True, False]),
        data=st.binary(max_size=8),
        write_id=st.sampled_from(WRITE_IDS),
        close=st.sampled_from([False] * 5 + [True]),
    )
    def write(
        self, i: int, pid: str, known: bool, data: bytes, write_id: str, close: bool
    ) -> None:
        c = _pick(self._ready_conns(), i)
        pid = self._target(c, pid, known, i)
        params: dict[str, Any] = {"processId": pid, "chunk": b64(data), "writeId": write_id}
        if close:
            params["closeStdin"] = True
        self._send(c, "process/write", params)

    @precondition(lambda self: self.conns)
    @rule(
        i=st.integers(0, 10),
        pid=st.sampled_from(PROCESS_IDS),
        known=st.sampled_from([True, True, False]),
        terminate=st.booleans(),
    )
    def signal_or_terminate(self, i: int, pid: str, known: bool, terminate: bool) -> None:
        c = _pick(self._ready_conns(), i)
        pid = self._target(c, pid, known, i)
        if terminate:
            self._send(c, "process/terminate", {"processId": pid})
        else:
            self._send(c, "process/signal", {"processId": pid, "signal": "interrupt"})

    @precondition(lambda self: self.conns)
    @rule(
        i=st.integers(0, 10),
        pid=st.sampled_from(PROCESS_IDS),
        known=st.sampled_from([True, True, False]),
        rows=st.sampled_from([1, 24, 65535]),
        cols=st.sampled_from([1, 80, 65535]),
    )
    def resize(self, i: int, pid: str, known: bool, rows: int, cols: int) -> None:
        c = _pick(self._ready_conns(), i)
        pid = self._target(c, pid, known, i)
        self._send(c, "process/resize", {"processId": pid, "rows": rows, "cols": cols})

    @precondition(lambda self: self.conns)
    @rule(i=st.integers(0, 10))
    def disconnect(self, i: int) -> None:
        assert self.h is not None
        self.h.feed(ConnectionClosed(conn=_pick(self._open_conns(), i).conn))

    def _flowing(self) -> list[MConn]:
        """Connections whose send buffer can change: something was sent on them."""
        return [c for c in self._open_conns() if c.received or c.blocked]

    @precondition(lambda self: self._flowing())
    @rule(i=st.integers(0, 10))
    def flow_control(self, i: int) -> None:
        """The transport's send buffer crossed its high (SendBlocked) or low (SendDrained) mark."""
        assert self.h is not None
        c = _pick(self._flowing(), i)
        self.stats["flow"] += 1
        self.h.feed(SendDrained(conn=c.conn) if c.blocked else SendBlocked(conn=c.conn))

    def _keep_kill_obligations(self) -> None:
        """A process sent KILL exits before time moves on (its streams may stay open)."""
        for proc in list(self.procs.values()):
            if proc.kill_sent and not proc.world_exited:
                self._exit(proc, -9)

    @precondition(lambda self: self.h is not None)
    @rule(eighths=st.integers(1, 24))
    def advance(self, eighths: int) -> None:
        assert self.h is not None
        self._advance_until(self.now + eighths / 8)

    def _advance_until(self, end: float) -> None:
        assert self.h is not None
        h = self.h
        self._keep_kill_obligations()
        # As `Harness.advance`, but a KILLed process exits at the very deadline that killed it.
        while (due := h.core.next_deadline()) is not None and due <= end:
            h.now = max(h.now, due)
            h.feed(Tick())
            self._keep_kill_obligations()
        h.now = end

    @precondition(lambda self: self.h is not None and self.h.core.next_deadline() is not None)
    @rule(past=st.sampled_from([0, 0, 1, 3]))
    def advance_to_next_deadline(self, past: int) -> None:
        """Time moves to exactly the next deadline (or just past it)."""
        assert self.h is not None
        due = self.h.core.next_deadline()
        assert due is not None
        self._advance_until(max(due, self.now) + past / 64)

    @precondition(lambda self: self.h is not None)
    @rule()
    def read_everything(self) -> None:
        self._drain(resume=False)

    def _drain(self, resume: bool) -> None:
        """Read every readable process from seq 0: retained + dropped must be all that was fed."""
        for session in list(self.sessions.values()):
            if session.expired:
                continue
            c = session.conn
            if c is None:
                if not resume:
                    continue
                c = self._open(100 + self.next_inc)
                self._send(c, "initialize", {"clientName": "drain", "resumeSessionId": session.sid})
            if c.state == "initializing":
                self._send(c, "initialized", {}, request=False)
            for pid, proc in sorted(session.procs.items()):
                msg_id = self._send(c, "process/read", {"processId": pid, "afterSeq": 0})
                result = self.responses[msg_id]["result"]
                retained = sum(len(base64.b64decode(ch["chunk"])) for ch in result["chunks"])
                fed = sum(len(data) for data in proc.fed.values())
                assert retained + result["droppedBytes"] == fed, (pid, result, fed)
                # Each stream's retained chunks are the tail of what that stream wrote.
                for stream, data in proc.fed.items():
                    tail = b"".join(
                        base64.b64decode(ch["chunk"]) for ch in result["chunks"]
                        if ch["stream"] == stream
                    )
                    assert bytes(data).endswith(tail), (pid, stream)
                if result["droppedBytes"]:
                    self.stats["drained with drops"] += 1

    # -- invariants (model-free: on what was fed and what was observed) ----------------------

    @invariant()
    def seqs_are_consistent_and_bytes_exact(self) -> None:
        """Invariants 1 and 4: one meaning per seq, notification order, exact bytes."""
        if self.h is None:
            return
        for proc_handle, inc, via, seq, what in self.new_obs:
            proc = self.procs[proc_handle]
            seen = self.seen.setdefault(proc_handle, {})
            assert seen.setdefault(seq, what) == what, (
                f"process {proc.pid}: seq {seq} seen as {seen[seq]!r} and as {what!r}"
            )
            # Against what was fed: the seq-th event of the process, bytes exact.
            assert proc.expected.get(seq) == what, (
                f"process {proc.pid}: seq {seq} carried {what!r}, the world fed "
                f"{proc.expected.get(seq)!r}"
            )
            closed = self.closed_notes.get(proc_handle)
            assert closed is None or seq <= closed, f"seq {seq} after closed ({closed})"
            if via != "notification":
                continue
            last = self.last_note_seq.get((inc, proc_handle), 0)
            assert seq > last, f"process {proc.pid}: notification seq {seq} after {last}"
            self.last_note_seq[inc, proc_handle] = seq
            if what[0] == "exited":
                assert proc_handle not in self.exited_notes, f"{proc.pid}: a second exited"
                self.exited_notes[proc_handle] = seq
            elif what[0] == "closed":
                assert proc_handle not in self.closed_notes, f"{proc.pid}: a second closed"
                exited = self.exited_notes.get(proc_handle)
                assert exited is None or exited < seq, f"{proc.pid}: closed not after exited"
                assert seq == max(seen), f"{proc.pid}: closed is not the last event"
                self.closed_notes[proc_handle] = seq
        self.new_obs.clear()

    @invariant()
    def finalize_exactly_once(self) -> None:
        """Invariant 3."""
        if self.h is None:
            return
        for handle, proc in self.procs.items():
            count = self.finalizes[handle]
            assert count <= 1, f"{count} Finalize for process {proc.pid}"
            if proc.spawn_outcome == "failed":
                assert count == 1 and self.finalize_status[handle] == "failed"
            elif proc.world_exited and not proc.world_open:
                assert count == 1 and self.finalize_status[handle] == "completed", (
                    f"process {proc.pid} exited and closed, {count} Finalize"
                )
            elif count:
                # Finalized before its pipes closed: only by giving up on them after a terminate.
                assert proc.world_exited and proc.terminating and proc.timed_out

    @invariant()
    def no_deadline_missed(self) -> None:
        """Every deadline the protocol implies was ticked: the core asked for it in time."""
        if self.h is None:
            return
        assert not self._due(), f"due at {self.now} and never ticked: {self._due()}"

    @invariant()
    def output_paused_iff_blocked_or_held_full(self) -> None:
        if self.h is None:
            return
        for handle, proc in self.procs.items():
            if proc.live and proc.spawn_outcome == "spawned":
                want = self._should_pause(proc)
                assert self.actual_paused.get(handle, False) == want, (
                    f"process {proc.pid}: paused={self.actual_paused.get(handle, False)}, "
                    f"should be {want}"
                )

    def teardown(self) -> None:
        if self.h is None or sys.exc_info()[0] is not None:
            return  # a step already failed: its report is the useful one
        self._keep_kill_obligations()
        self._drain(resume=True)
        self.seqs_are_consistent_and_bytes_exact()
        for name in self.stats:
            note_event(f"{name} (runs with)")
        result = replay(self.h.lines)
        assert result.ok, result


# About 4 s. Derandomized, so a run is repeatable; but Hypothesis also draws constants found in
# every loaded local module (the core included), so editing the core, or running this file beside
# other test modules, can change which examples are tried. To hunt harder, run it with
# derandomize=False and max_examples in the thousands.
CoreModel.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCoreModel = CoreModel.TestCase
