r"""Every rule of the life of processes and sessions, in one place, and the state they rule.

Theory of operation
===================

There are four small machines, as h11 has one per party beside its keep-alive and switch flags:

1. A process's `Phase`::

       STARTING --spawned--> RUNNING --exited--> EXITED --last stream at EOF--> CLOSED
           \--spawn failed--> FAILED (forgotten: its processId is free at once)

2. A process's `Stop`, the terminate sequence: NONE, PENDING (asked while starting), TERM_SENT
   (KILL due), KILL_SENT, DRAINING (exited while stopping, a stray holds the pipes: abandon due).
3. Two flags that are machines of two states, as h11's keep-alive is a bool: a process is
   *held* (its log drops nothing: its client is away, or acknowledges output) and *paused* (the
   adapter stopped reading its pipes; `pause_wanted` says when).
4. A session's `SessionState`::

       NEW --created--> ATTACHED --detached--> DETACHED --expired--> EXPIRED (gone)
                            ^                      |
                            \------resumed---------/

   A resume of an ATTACHED session is refused (`SESSION_REFUSED`): it changes nothing.

The state lives here too, as h11's `ConnectionState` holds its own: a `ProcessLife` holds a
process's phase, stop, open streams, held and paused, a `SessionLife` a session's state and
connection, and each is the only writer of what it holds. The rest of the core reads them and
asks for a change by an input; the tables answer with the new state and the follow-ups.

Transitions are *event-triggered* (`PROCESS_EVENTS`, `STOP_EVENTS`, `AFTER`, `SESSION_EVENTS`)
or *state-triggered* (`STATE_TRIGGERED`, applied by `ProcessLife.settle` until none fires):
CLOSED follows from "exited and every stream at EOF" however that came about, and in either
order. A transition's follow-ups (`Do`: signals, timers, Finalize, readers woken, holds, pauses)
are listed in the order the handlers (`_processes`, `_server`) carry them out. The handlers
parse, answer and emit; they never decide a transition. A (phase, input) pair not in
`PROCESS_EVENTS` is an adapter bug, and a (state, input) pair in neither `SESSION_EVENTS` nor
`SESSION_REFUSED` cannot happen: both raise `LocalProtocolError`. Exactly one
``process/exited`` and one ``process/closed`` go out; output, the exit and the close take seqs
from 1; closed is last.

WARNING: a few transitions are written in `ProcessLife`'s code, not in a table: which streams
are open (output needs its stream open, a close takes it out, an abandon empties the set) and
the two flags, set when the predicates at the end of this file say. A change to them belongs
here, and in tests/core/test_lifecycle_tables.py, which drives every table alone.

What happens when
-----------------

- *spawned*: RUNNING. The start is answered; a stop asked meanwhile (PENDING) sends TERM now
  with KILL due after ``kill_grace``; the output is paused if `pause_wanted`; a terminal size
  asked meanwhile (``process/resize`` while STARTING) is applied.
- *spawn failed* (only while STARTING): FAILED. The start fails (-32602 if refused, else -32603
  with its kind); the process is forgotten, waiting reads fail as for an unknown process, and
  ``Finalize(status="failed")``.
- *output* (RUNNING or EXITED, on an open stream): the next seq; logged; ``process/output`` to an
  attached client. Held and detached, it counts toward ``max_held_bytes`` and crossing that
  pauses every held detached process (`cap_crossed`); held with a full log, it is paused. Waiting
  reads are answered if `read_ready`. Output after the exit is a descendant's, sequenced after.
- *stream closed*: that stream is at EOF; if the process exited and it was the last: CLOSED.
- *stdin written* (RUNNING): the backlog falls; writes waiting their turn go, in order, and
  are answered. With ``closed``, or at the exit, they are answered ``stdinClosed``.
- *exited* (RUNNING only): stdin closes, KILL is cancelled, ``process/exited`` with the next seq
  and the exit code (128+N for signal N). Then CLOSED if every stream is at EOF, or DRAINING if
  stopping (abandon due after ``kill_grace``); waiting reads are answered by the exit.
- *closed*: ``process/closed`` with the last seq; the process is finalized, readable until
  ``closed_ttl`` (EVICT); KILL and ABANDON cancelled; the held total recounted if it counted;
  ``Finalize(status="completed", exit code, timed_out)``; every waiting read answered.
- *terminate requested* (``process/terminate``, Shutdown, its session expired): once. A hold is
  released (the pipes must drain to EOF). RUNNING: TERM, KILL due. STARTING: PENDING, TERM at the
  spawn. EXITED: DRAINING (no signal once exited: the pid may be about to be reaped). CLOSED or
  already stopping: nothing.
- *kill due* (TERM_SENT and still RUNNING): KILL; the process ends ``timed_out``.
- *abandon due* (DRAINING: something that escaped the group, a daemon that called setsid, holds
  the pipes): the streams are given up, ``failure`` says why, ``timed_out``; CLOSED, and the
  adapter closes the pipes at Finalize. ``timed_out`` always means a server deadline ended the
  process: KILL after the grace, abandoned streams, or an expired session.
- *finalize failed*: a finalized, still readable process gets ``failure``; otherwise ignored.
- *any process event after Finalize*: ignored (the adapter had queued it).
- *session detached* (its connection closed): what would answer on it later (waiting reads,
  start answers, fs and http calls) is dropped, as nothing is sent to a closed connection; every
  live process not stopping is held; pauses and the held total are synced; EXPIRE due after
  ``session_ttl``. Output goes on into the logs. Past ``max_detached_sessions``, the oldest
  detached session of the address holding the most expires at once. While the server runs
  ``max_processes``, a start from a client holding fewer terminates the oldest live process of
  a detached session of the address holding the most (`_shares`), as ``timed_out``.
- *connection opened*: GREET due after ``handshake_timeout``, cancelled once its
  ``initialize`` is answered or it closes; when due, a connection still without one is closed
  (1008), so connections that never initialize cannot hold every place. Past
  ``max_connections`` the oldest of those that had ``MAKE_ROOM_AFTER`` makes room (1013), else
  for a newcomer from another address the oldest initialized connection of the address
  holding over half (`_shares`; 1013: its session detaches).
- *resumed* (``initialize`` with ``resumeSessionId``; DETACHED only, ATTACHED is refused with
  -32010 and nothing changes): EXPIRE cancelled; with output acks every live process not
  stopping is held; pauses (the new connection may be blocked) and the held total (it no longer
  counts) are synced.
- *expired*: the session is gone; each live process is terminated as ``timed_out``, each closed
  one forgotten.
- *closed process evicted* (EVICT due, or early when the closed processes' logs hold more
  than ``max_closed_bytes``, those closed longest ago first): no longer readable; its
  processId is free.
- *read deadline* (READ due): the long-poll read is answered with what there is.
- *a read answered in full* (not cut by ``maxBytes``), held, no output acks: the hold is released.
- *send blocked / drained*: every process of the session is paused / resumed by `pause_wanted`.
- *Signal*: emitted only while RUNNING (`SIGNALLABLE`): the adapter sees the exit without
  reaping, so the pid and group id stay reserved until Finalize, and are never signalled then.
- *resize* (``process/resize``, a tty only): RUNNING, `ResizeTerminal` at once; STARTING, the
  newest size waits for the spawn; once exited, nothing (as for a signal), and no error.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs

from ._errors import SESSION_ATTACHED, LocalProtocolError, RpcError
from ._records import Record

if TYPE_CHECKING:
    from ._process import Process


class Phase(enum.Enum):
    # Members are singletons, so identity hashing is exact, and it is C-level: the transition
    # lookup runs once per output chunk, and Enum's own __hash__ is Python code.
    __hash__ = object.__hash__

    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    CLOSED = "closed"
    FAILED = "spawn failed"


class Input(enum.Enum):
    __hash__ = object.__hash__  # see Phase

    SPAWNED = "spawned"
    SPAWN_FAILED = "spawn failed"
    OUTPUT = "output"
    STREAM_CLOSED = "stream closed"
    EXITED = "exited"
    ABANDONED = "streams abandoned"


class Stop(enum.Enum):
    __hash__ = object.__hash__  # see Phase

    NONE = "not asked to stop"
    PENDING = "asked to stop while starting"
    TERM_SENT = "TERM sent"
    KILL_SENT = "KILL sent"
    DRAINING = "exited while stopping"


class StopInput(enum.Enum):
    __hash__ = object.__hash__  # see Phase

    TERMINATE = "terminate requested"
    KILL_DUE = "kill due"


class SessionState(enum.Enum):
    __hash__ = object.__hash__  # see Phase

    NEW = "new"  # minted by an initialize, not yet attached
    ATTACHED = "attached"  # ``conn`` is its connection
    DETACHED = "detached"  # its connection closed; EXPIRE due
    EXPIRED = "expired"  # gone: nothing can find it


class SessionInput(enum.Enum):
    __hash__ = object.__hash__  # see Phase

    CREATED = "created"
    RESUMED = "resumed"
    DETACHED = "detached"
    EXPIRED = "expired"


class Timer(enum.Enum):
    """What a deadline is for; a timer's key is ``(Timer, subject)``."""

    __hash__ = object.__hash__  # see Phase: keys are hashed on every set and cancel

    READ = "a long-poll read's deadline"  # subject: the PendingRead
    KILL = "KILL after kill_grace"  # subject: the proc handle
    ABANDON = "abandon the pipes after kill_grace"  # subject: the proc handle
    EVICT = "a closed process stops being readable"  # subject: the Process
    EXPIRE = "a detached session expires"  # subject: the session id
    GREET = "a connection's initialize is due"  # subject: the conn
    DECIDE = "a decider's answer is due"  # subject: (conn, the server's request id)


class Do(enum.Enum):
    """A follow-up a transition requires of the server."""

    __hash__ = object.__hash__  # see Phase

    SETTLE = "apply the state-triggered rules, then their follow-ups"
    SIGNAL_TERM = "send TERM to the process group"
    SIGNAL_KILL = "send KILL to the process group; it ends timed_out"
    SET_KILL = "KILL due after kill_grace"
    CANCEL_KILL = "KILL no longer due"
    SET_ABANDON = "abandon due after kill_grace"
    CANCEL_ABANDON = "abandon no longer due"
    RELEASE_HOLD = "stop holding the log, if held; sync its pause and the held total"
    NOTIFY_CLOSED = "send process/closed with the next seq"
    RETIRE = "move to the finalized processes, readable until evicted"
    RECOUNT_IF_HELD = "if its output counted as held, count the held total afresh"
    SET_EVICT = "evict after closed_ttl"
    FINALIZE = "Finalize(status='completed')"
    FORGET = "forget the process at once: its processId is free"
    FAIL_READERS = "fail the waiting reads as for an unknown process"
    FINALIZE_FAILED = "Finalize(status='failed')"
    WAKE_READERS = "answer the waiting reads that are ready"
    SYNC_PAUSED = "pause or resume by pause_wanted (every process, for a session)"
    APPLY_SIZE = "resize the terminal to the size asked while starting, if any"
    # Session follow-ups.
    SET_EXPIRE = "expire after session_ttl"
    CANCEL_EXPIRE = "expiry no longer due"
    HOLD_LIVE = "hold every live process not stopping"
    HOLD_LIVE_IF_ACKS = "with output acks, hold every live process not stopping"
    RECOUNT_HELD = "count the held total afresh; pause or resume the held detached processes"
    STOP_ALL = "terminate every live process as timed_out; forget the closed ones"


# -- event-triggered --------------------------------------------------------------------------

# (phase, input) -> phase. Pairs not listed are impossible: the adapter reported something that
# cannot happen, and it is told so. This runs once per output chunk: keep it one dict lookup.
PROCESS_EVENTS: dict[tuple[Phase, Input], Phase] = {
    (Phase.STARTING, Input.SPAWNED): Phase.RUNNING,
    (Phase.STARTING, Input.SPAWN_FAILED): Phase.FAILED,
    (Phase.RUNNING, Input.OUTPUT): Phase.RUNNING,
    (Phase.RUNNING, Input.STREAM_CLOSED): Phase.RUNNING,
    (Phase.RUNNING, Input.EXITED): Phase.EXITED,
    (Phase.EXITED, Input.OUTPUT): Phase.EXITED,
    (Phase.EXITED, Input.STREAM_CLOSED): Phase.EXITED,
    (Phase.EXITED, Input.ABANDONED): Phase.EXITED,
}

# Input -> follow-ups after its phase transition (and after the handler's answer: the start's,
# the exit's notification). OUTPUT has none here: its path is inline, once per chunk.
AFTER: dict[Input, tuple[Do, ...]] = {
    Input.SPAWNED: (Do.SETTLE, Do.SYNC_PAUSED, Do.APPLY_SIZE),
    Input.SPAWN_FAILED: (Do.FORGET, Do.FAIL_READERS, Do.FINALIZE_FAILED),
    Input.STREAM_CLOSED: (Do.SETTLE,),
    Input.EXITED: (Do.CANCEL_KILL, Do.SETTLE, Do.WAKE_READERS),
    Input.ABANDONED: (Do.SETTLE,),
}

# (stop, phase, input) -> (stop, follow-ups). Pairs not listed change nothing: a terminate of a
# process already stopping or closed, a KILL due once the exit is seen.
STOP_EVENTS: dict[tuple[Stop, Phase, StopInput], tuple[Stop, tuple[Do, ...]]] = {
    (Stop.NONE, Phase.STARTING, StopInput.TERMINATE): (Stop.PENDING, (Do.RELEASE_HOLD,)),
    (Stop.NONE, Phase.RUNNING, StopInput.TERMINATE): (
        Stop.TERM_SENT,
        (Do.RELEASE_HOLD, Do.SIGNAL_TERM, Do.SET_KILL),
    ),
    (Stop.NONE, Phase.EXITED, StopInput.TERMINATE): (
        Stop.DRAINING,
        (Do.RELEASE_HOLD, Do.SET_ABANDON),
    ),
    (Stop.TERM_SENT, Phase.RUNNING, StopInput.KILL_DUE): (Stop.KILL_SENT, (Do.SIGNAL_KILL,)),
}

# (state, input) -> (state, follow-ups). A pair in neither this nor `SESSION_REFUSED` is
# impossible: an expired session cannot be found, a closed connection cannot close again.
SESSION_EVENTS: dict[tuple[SessionState, SessionInput], tuple[SessionState, tuple[Do, ...]]] = {
    (SessionState.NEW, SessionInput.CREATED): (
        SessionState.ATTACHED,
        (Do.HOLD_LIVE_IF_ACKS, Do.SYNC_PAUSED, Do.RECOUNT_HELD),
    ),
    (SessionState.DETACHED, SessionInput.RESUMED): (
        SessionState.ATTACHED,
        (Do.CANCEL_EXPIRE, Do.HOLD_LIVE_IF_ACKS, Do.SYNC_PAUSED, Do.RECOUNT_HELD),
    ),
    (SessionState.ATTACHED, SessionInput.DETACHED): (
        SessionState.DETACHED,
        (Do.HOLD_LIVE, Do.SYNC_PAUSED, Do.RECOUNT_HELD, Do.SET_EXPIRE),
    ),
    (SessionState.DETACHED, SessionInput.EXPIRED): (SessionState.EXPIRED, (Do.STOP_ALL,)),
}

# (state, input) -> (error code, why): what a client may ask and is refused. The session is
# left as it was; the request fails with "session <id> <why>".
SESSION_REFUSED: dict[tuple[SessionState, SessionInput], tuple[int, str]] = {
    (SessionState.ATTACHED, SessionInput.RESUMED): (
        SESSION_ATTACHED,
        "is already attached to another connection",
    ),
}

# -- state-triggered --------------------------------------------------------------------------

_ANY_STOP = frozenset(Stop)


@attrs.frozen(repr=False, eq=False, slots=False)
class Rule(Record):
    """When a process is in ``phase`` with its stop in ``stops`` (and, unless None, some stream
    open or not), it moves to ``to_phase`` / ``to_stop`` (None: unchanged), then ``then``."""

    name: str
    phase: Phase
    stops: frozenset[Stop]
    streams_open: bool | None
    to_phase: Phase
    to_stop: Stop | None
    then: tuple[Do, ...]

    def applies(self, life: ProcessLife) -> bool:
        if life.phase is not self.phase or life.stop not in self.stops:
            return False
        return self.streams_open is None or self.streams_open == bool(life.open_streams)


CLOSE = (
    Do.NOTIFY_CLOSED,
    Do.RETIRE,
    Do.RECOUNT_IF_HELD,
    Do.CANCEL_KILL,
    Do.CANCEL_ABANDON,
    Do.SET_EVICT,
    Do.FINALIZE,
    Do.WAKE_READERS,
)

# In order: the first that applies fires, then they are tried again until none does.
STATE_TRIGGERED: tuple[Rule, ...] = (
    Rule("exited, every stream at EOF", Phase.EXITED, _ANY_STOP, False, Phase.CLOSED, None, CLOSE),
    Rule(
        "asked to stop while starting, now spawned",
        Phase.RUNNING, frozenset({Stop.PENDING}), None,
        Phase.RUNNING, Stop.TERM_SENT, (Do.SIGNAL_TERM, Do.SET_KILL),
    ),
    Rule(
        "stopped and exited, a stray outside the group holds the pipes",
        Phase.EXITED, frozenset({Stop.TERM_SENT, Stop.KILL_SENT}), True,
        Phase.EXITED, Stop.DRAINING, (Do.SET_ABANDON,),
    ),
)

# -- the state, and its only writers ----------------------------------------------------------


class ProcessLife:
    """One process's place in the tables: ``phase``, ``stop``, ``open_streams``, ``held`` and
    ``paused``. The methods below are the only code that writes them; the rest of the core
    reads. An input the tables refuse raises `LocalProtocolError` and changes nothing."""

    __slots__ = ("proc", "phase", "stop", "open_streams", "held", "paused")

    def __init__(self, proc: int, streams: Iterable[str]) -> None:
        self.proc = proc  # only to name the process in errors
        self.phase = Phase.STARTING
        self.stop = Stop.NONE
        self.open_streams = set(streams)
        self.held = False  # see `may_hold` and `releases_on_read`
        self.paused = False  # see `pause_wanted`

    # Each event-triggered input returns its `AFTER` follow-ups, for the handler to carry out
    # once it has answered (the start, the exit's notification).

    def spawned(self) -> tuple[Do, ...]:
        return self._event(Input.SPAWNED)

    def spawn_failed(self) -> tuple[Do, ...]:
        return self._event(Input.SPAWN_FAILED)

    def output(self, stream: str) -> None:
        """A chunk on ``stream``. The hot path: one set test and one dict lookup."""
        if stream not in self.open_streams:
            raise LocalProtocolError(
                f"process {self.proc}: output on {stream!r}, which is not open")
        try:  # `_step`, inline: a call less per chunk
            self.phase = PROCESS_EVENTS[self.phase, Input.OUTPUT]
        except KeyError:
            raise self._impossible(Input.OUTPUT) from None

    def close_stream(self, stream: str) -> tuple[Do, ...]:
        if stream not in self.open_streams:
            raise LocalProtocolError(f"process {self.proc}: {stream!r} closed twice or unknown")
        todo = self._event(Input.STREAM_CLOSED)
        self.open_streams.discard(stream)
        return todo

    def exited(self) -> tuple[Do, ...]:
        return self._event(Input.EXITED)

    def abandon_streams(self) -> tuple[Do, ...]:
        todo = self._event(Input.ABANDONED)
        self.open_streams.clear()
        return todo

    def _event(self, event: Input) -> tuple[Do, ...]:
        self._step(event)
        return AFTER[event]

    def _step(self, event: Input) -> None:
        try:
            self.phase = PROCESS_EVENTS[self.phase, event]
        except KeyError:
            raise self._impossible(event) from None

    def _impossible(self, event: Input) -> LocalProtocolError:
        return LocalProtocolError(
            f"process {self.proc}: {event.value} is impossible while {self.phase.value}")

    def stop_event(self, event: StopInput) -> tuple[Do, ...]:
        """Apply a terminate request or a KILL deadline; the follow-ups, in order."""
        row = STOP_EVENTS.get((self.stop, self.phase, event))
        if row is None:
            return ()
        self.stop, todo = row
        return todo

    def settle(self) -> list[Do]:
        """Apply the state-triggered rules until none fires; their follow-ups, in order."""
        todo: list[Do] = []
        fired = True
        while fired:
            fired = False
            for rule in STATE_TRIGGERED:
                if rule.applies(self):
                    self.phase = rule.to_phase
                    if rule.to_stop is not None:
                        self.stop = rule.to_stop
                    todo += rule.then
                    fired = True
                    break
        return todo

    # The two flags, set as the predicates below decide (see the WARNING above).

    def hold(self) -> None:
        self.held = True

    def release(self) -> None:
        self.held = False

    def set_paused(self, paused: bool) -> bool:
        """Record whether the adapter is to stop reading the pipes; whether that changed."""
        if self.paused is paused:
            return False
        self.paused = paused
        return True


class SessionLife:
    """A session's place in `SESSION_EVENTS`: ``state`` and ``conn`` (its connection while
    ATTACHED, else None). `event` is the only code that writes them."""

    __slots__ = ("session_id", "state", "conn")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id  # only to name the session in errors
        self.state = SessionState.NEW
        self.conn: int | None = None

    def event(self, event: SessionInput, conn: int | None = None) -> tuple[Do, ...]:
        """Apply ``event`` (``conn``: the connection CREATED or RESUMED attaches it to); the
        follow-ups, in order. A refusal raises its `RpcError` and changes nothing."""
        key = (self.state, event)
        row = SESSION_EVENTS.get(key)
        if row is None:
            refused = SESSION_REFUSED.get(key)
            if refused is not None:
                code, why = refused
                raise RpcError(code, f"session {self.session_id} {why}")
            raise LocalProtocolError(
                f"session {self.session_id}: {event.value} is impossible while "
                f"{self.state.value}")
        self.state, todo = row
        self.conn = conn if self.state is SessionState.ATTACHED else None
        return todo


# -- the rules that are predicates ------------------------------------------------------------

SIGNALLABLE = Phase.RUNNING  # see "Signal" above
LIVE = (Phase.STARTING, Phase.RUNNING)  # what process/terminate answers as `running`


def may_hold(process: Process, live: bool) -> bool:
    """A process starts holding when its client leaves or acks: if live and not being stopped
    (a stopping process's pipes must drain to EOF)."""
    return live and process.life.stop is Stop.NONE


def releases_on_read(process: Process, truncated: bool) -> bool:
    """A read that returned everything up to the newest chunk ends a hold, unless the client
    acknowledges output (then the hold is its window)."""
    return process.life.held and not truncated and not process.session.acks


def pause_wanted(process: Process, blocked: bool, held_total: int, cap: int) -> bool:
    """Paused while its connection is blocked, or held with a full log, or held and detached
    while the held total is at the cap."""
    held = process.life.held
    over_cap = held and process.session.conn is None and held_total >= cap
    return blocked or (held and process.log.full) or over_cap


def cap_crossed(before: int, after: int, cap: int) -> bool:
    """Whether a chunk took the held total to the cap: every held detached process waits."""
    return before < cap <= after


def read_ready(process: Process, after_seq: int) -> bool:
    """A read at ``after_seq`` is answered now (else it waits): closed, output past the cursor,
    or exited with the exit's seq past the cursor."""
    phase = process.life.phase
    if phase is Phase.CLOSED or process.log.has_after(after_seq):
        return True
    return phase is Phase.EXITED and after_seq < process.next_seq - 1
