"""Sessions: creation, detach, resume, expiry, cancelled long polls and flow control."""

from __future__ import annotations

import json
from typing import Any

import pytest

from execproto import (
    CloseConnection,
    Config,
    ConnectionOpened,
    EndSession,
    Finalize,
    Greeting,
    PauseOutput,
    ProcessSpawned,
    ResumeOutput,
    Send,
    SendBlocked,
    SendDrained,
    Signal,
    Spawn,
    SpawnFailed,
    Tick,
)
from execproto.actions import CloseCode

from .harness import CWD, Harness, b64, unb64

# -- expected wire errors (the one place to update when the core's wording changes) -------------

INVALID_REQUEST = -32600
SESSION_ATTACHED = -32010


def unknown_session(session_id: str) -> str:
    return f"unknown session id {session_id}"


def already_attached(session_id: str) -> str:
    return f"session {session_id} is already attached to another connection"


def unknown_process(process_id: str) -> str:
    return f"unknown process id {process_id}"


TTL = 30.0  # Config() defaults, spelled out so the timing assertions read plainly
GRACE = 1.0

# -- helpers ------------------------------------------------------------------------------------


def ready(config: Config | None = None) -> Harness:
    h = Harness(config)
    h.connect(1)
    h.handshake(1)
    return h


def resume(h: Harness, conn: int, session_id: str) -> dict[str, Any]:
    """Open ``conn`` and resume ``session_id`` on it; return the initialize response."""
    h.connect(conn)
    reply = h.handshake(conn, resume=session_id)
    return reply


def chunks(reply: dict[str, Any]) -> list[tuple[int, str, bytes]]:
    return [(c["seq"], c["stream"], unb64(c["chunk"])) for c in reply["result"]["chunks"]]


def error(reply: dict[str, Any]) -> tuple[int, str]:
    assert "result" not in reply, reply
    return reply["error"]["code"], reply["error"]["message"]


# -- creation -----------------------------------------------------------------------------------


def test_session_is_created_on_initialize_with_the_minted_id() -> None:
    h = Harness()
    h.feed(ConnectionOpened(conn=5, session_id="6b0c5f0e-1111-2222-3333-444455556666"))
    reply = h.handshake(5)
    assert reply["result"]["sessionId"] == "6b0c5f0e-1111-2222-3333-444455556666"


def test_no_session_exists_before_initialize() -> None:
    h = Harness()
    h.connect(1)  # mints session-1, but never initializes
    h.connect(2)
    reply = h.call(2, "initialize", {"clientName": "c", "resumeSessionId": "session-1"})
    assert error(reply) == (INVALID_REQUEST, unknown_session("session-1"))
    # Closing the connections that never initialized leaves nothing waiting on time.
    h.disconnect(1)
    h.disconnect(2)
    assert h.core.next_deadline() is None


def test_the_core_says_how_each_connections_initialize_was_answered() -> None:
    """`ServerCore.greeting`: what an adapter logs for a connection, read from the core rather
    than from the messages: nothing before an answer, then a refusal with its reason, then the
    session, new or resumed."""
    h = ready()  # conn 1: session-1
    assert h.core.greeting(1) == Greeting("session-1", resumed=False)
    h.connect(2)
    assert h.core.greeting(2) is None  # nothing answered yet
    h.call(2, "initialize", {"clientName": "c", "resumeSessionId": "session-1"})
    assert h.core.greeting(2) == Greeting(None, refused=already_attached("session-1"))
    h.disconnect(1)
    assert h.core.greeting(1) is None  # a connection gone is no connection
    assert "result" in h.call(2, "initialize", {"clientName": "c", "resumeSessionId": "session-1"})
    assert h.core.greeting(2) == Greeting("session-1", resumed=True)


def test_a_connection_that_never_initializes_is_closed_after_the_handshake_timeout() -> None:
    h = Harness(Config(handshake_timeout=5.0))
    h.connect(1)  # never initializes
    h.connect(2)
    assert "result" in h.call(2, "initialize", {"clientName": "c"})
    h.connect(3)
    h.call(3, "initialize", {"clientName": "c", "resumeSessionId": "nope"})  # refused: still new
    assert h.advance(4.9) == []
    closed = [a for a in h.advance(0.2) if isinstance(a, CloseConnection)]
    assert sorted((a.conn, a.code) for a in closed) == [(1, 1008), (3, 1008)]
    assert "no initialize within 5 s" in closed[0].reason
    h.disconnect(1)
    h.disconnect(3)
    assert h.core.next_deadline() is None  # the initialized one waits on nothing


def test_nothing_large_is_looked_at_before_initialize() -> None:
    """Four 45 MiB writes before initialize were parsed and decoded, seconds of the owner's
    time each, only to be refused. Past 64 KiB before initialize, the connection is closed
    unread (1009); after it, a large message is read as any other."""
    h = Harness()
    h.connect(1)
    write = {"jsonrpc": "2.0", "id": 1, "method": "process/write",
             "params": {"processId": "p", "chunk": "A" * (64 << 10), "writeId": "w"}}
    closed = [a for a in h.send(1, json.dumps(write)) if isinstance(a, CloseConnection)]
    assert [(a.conn, a.code) for a in closed] == [(1, 1009)]
    assert "before initialize (at most 65536)" in closed[0].reason
    h.connect(2)
    h.handshake(2)
    answer = h.call(2, "process/write", write["params"])
    assert answer["result"] == {"status": "unknownProcess"}  # read, decoded, answered


def test_each_connection_gets_its_own_session() -> None:
    h = Harness()
    h.connect(1)
    h.connect(2)
    assert h.handshake(1)["result"]["sessionId"] == "session-1"
    assert h.handshake(2)["result"]["sessionId"] == "session-2"


# -- detach -------------------------------------------------------------------------------------


def test_connection_close_detaches_and_processes_keep_running() -> None:
    h = ready()
    proc = h.start(1, "p")
    actions = h.disconnect(1)
    assert actions == []  # no Signal, no Finalize, nothing to send
    assert h.core.next_deadline() == pytest.approx(TTL)
    # Output, exit and more while detached: retained, and no Send goes anywhere.
    before = len(h.of_type(Send))
    h.now = 1.0
    assert h.output(proc, "stdout", b"one\n") == []
    assert h.output(proc, "stderr", b"two\n") == []
    assert h.advance(10.0) == []
    assert len(h.of_type(Send)) == before
    assert h.of_type(Signal) == [] and h.of_type(Finalize) == []


def test_resume_within_the_ttl_gets_the_same_session_and_catches_up() -> None:
    h = ready(Config(closed_ttl=1000.0))
    proc = h.start(1, "p", pipeStdin=True)
    h.output(proc, "stdout", b"before\n")
    h.disconnect(1)
    h.advance(5.0)
    h.output(proc, "stdout", b"while detached\n")
    h.exit(proc, 3)
    h.advance(TTL - 5.0 - 0.001)  # just inside the TTL

    reply = resume(h, 2, "session-1")
    assert reply["result"]["sessionId"] == "session-1"
    read = h.call(2, "process/read", {"processId": "p", "afterSeq": 1})
    assert chunks(read) == [(2, "stdout", b"while detached\n")]
    assert read["result"]["exited"] is True and read["result"]["exitCode"] == 3
    assert read["result"]["nextSeq"] == 4 and read["result"]["closed"] is False
    all_of_it = h.call(2, "process/read", {"processId": "p"})
    assert [c[0] for c in chunks(all_of_it)] == [1, 2]

    # Later events of the session now go to the new connection only.
    old = len(h.messages(1))
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    assert [n["params"]["seq"] for n in h.notifications(2, "process/closed")] == [4]
    assert len(h.messages(1)) == old
    # The TTL is no longer running: nothing happens when it would have passed.
    assert h.advance(TTL) == []
    assert h.of_type(Signal) == []


def test_a_resumed_session_can_write_signal_and_start() -> None:
    h = ready()
    proc = h.start(1, "p", pipeStdin=True)
    h.disconnect(1)
    resume(h, 2, "session-1")
    write = h.call(2, "process/write", {"processId": "p", "chunk": b64(b"hi"), "writeId": "w"})
    assert write["result"] == {"status": "accepted"}
    h.call(2, "process/signal", {"processId": "p", "signal": "interrupt"})
    assert Signal(proc=proc, signal="INT") in h.actions
    second = h.start(2, "q")
    assert second != proc
    (out,) = h.output(second, "stdout", b"q")
    assert out.conn == 2


def test_session_can_be_detached_and_resumed_repeatedly_and_the_ttl_restarts() -> None:
    h = ready()
    proc = h.start(1, "p")
    h.disconnect(1)
    h.advance(20.0)
    resume(h, 2, "session-1")
    h.advance(20.0)
    h.disconnect(2)
    assert h.core.next_deadline() == pytest.approx(40.0 + TTL)
    h.advance(TTL - 1.0)  # 49 s after the first detach, 29 s after the second
    resume(h, 3, "session-1")
    h.output(proc, "stdout", b"x")
    assert h.notifications(3, "process/output")[-1]["params"]["seq"] == 1
    assert h.of_type(Signal) == []


def test_resume_while_the_first_connection_is_initializing_counts_as_attached() -> None:
    h = Harness()
    h.connect(1)
    h.call(1, "initialize", {"clientName": "c"})  # no `initialized` yet
    h.connect(2)
    reply = h.call(2, "initialize", {"clientName": "c", "resumeSessionId": "session-1"})
    assert error(reply) == (SESSION_ATTACHED, already_attached("session-1"))


def test_a_session_detached_while_initializing_can_be_resumed() -> None:
    h = Harness()
    h.connect(1)
    h.call(1, "initialize", {"clientName": "c"})
    h.disconnect(1)
    assert resume(h, 2, "session-1")["result"]["sessionId"] == "session-1"


def test_resume_of_an_unknown_session_is_refused_and_the_connection_may_retry() -> None:
    h = ready()
    h.connect(2)
    reply = h.call(2, "initialize", {"clientName": "c", "resumeSessionId": "no-such-session"})
    assert error(reply) == (INVALID_REQUEST, unknown_session("no-such-session"))
    # The failure left the connection un-initialized: it may start a fresh session instead.
    assert h.handshake(2)["result"]["sessionId"] == "session-2"


def test_resume_while_still_attached_is_refused_with_session_attached() -> None:
    h = ready()
    proc = h.start(1, "p")
    h.connect(2)
    reply = h.call(2, "initialize", {"clientName": "c", "resumeSessionId": "session-1"})
    assert error(reply) == (SESSION_ATTACHED, already_attached("session-1"))
    # The owner is undisturbed.
    (out,) = h.output(proc, "stdout", b"x")
    assert out.conn == 1
    # And once it detaches, the second connection may take it over.
    h.disconnect(1)
    h.handshake(2, resume="session-1")
    (out,) = h.output(proc, "stdout", b"y")
    assert out.conn == 2


def test_two_connections_racing_to_resume_only_one_wins() -> None:
    h = ready()
    h.disconnect(1)
    h.connect(2)
    h.connect(3)
    first = h.call(2, "initialize", {"clientName": "c", "resumeSessionId": "session-1"})
    second = h.call(3, "initialize", {"clientName": "c", "resumeSessionId": "session-1"})
    assert first["result"]["sessionId"] == "session-1"
    assert error(second) == (SESSION_ATTACHED, already_attached("session-1"))


# -- expiry -------------------------------------------------------------------------------------


def test_resume_after_the_ttl_fails_and_running_processes_get_term_then_kill() -> None:
    h = ready()
    proc = h.start(1, "p")
    other = h.start(1, "q")
    h.disconnect(1)
    assert h.advance(TTL - 0.01) == []
    actions = h.advance(0.01)
    # The adapter hears the session's end after its processes were told to stop.
    assert actions == [Signal(proc=proc, signal="TERM"), Signal(proc=other, signal="TERM"),
                       EndSession(session_id="session-1")]
    assert h.now == pytest.approx(TTL)
    assert h.advance(GRACE - 0.01) == []
    actions = h.advance(0.01)
    assert actions == [Signal(proc=proc, signal="KILL"), Signal(proc=other, signal="KILL")]

    h.connect(2)
    reply = h.call(2, "initialize", {"clientName": "c", "resumeSessionId": "session-1"})
    assert error(reply) == (INVALID_REQUEST, unknown_session("session-1"))

    # When they die, they are finalized as ended by a server deadline, and nothing is sent.
    assert h.exit(proc, -9) + h.eof(proc, "stdout") == []
    actions = h.eof(proc, "stderr")
    assert actions == [Finalize(proc=proc, status="completed", exit_code=137, timed_out=True)]


def test_a_process_that_obeys_term_is_not_killed_and_is_finalized_as_timed_out() -> None:
    h = ready()
    proc = h.start(1, "p")
    h.disconnect(1)
    h.advance(TTL)
    assert h.of_type(Signal) == [Signal(proc=proc, signal="TERM")]
    h.advance(0.5)
    h.exit(proc, -15)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    h.advance(10.0)
    assert h.of_type(Signal) == [Signal(proc=proc, signal="TERM")]
    assert h.of_type(Finalize) == [
        Finalize(proc=proc, status="completed", exit_code=143, timed_out=True)
    ]


def test_an_exited_but_unclosed_process_of_an_expired_session_is_closed_after_the_grace() -> None:
    h = ready()
    proc = h.start(1, "p")
    h.exit(proc, 0)  # a descendant still holds the pipes
    h.disconnect(1)
    # No signal: the exit was observed, the pid must not be touched.
    assert h.advance(TTL) == [EndSession(session_id="session-1")]
    assert h.advance(GRACE - 0.01) == []
    actions = h.advance(0.01)
    assert actions == [Finalize(proc=proc, status="completed", exit_code=0, timed_out=True)]
    assert h.of_type(Signal) == []
    # Late events the adapter had queued for it are ignored.
    assert h.output(proc, "stdout", b"late") == []
    assert h.eof(proc, "stdout") == []


def test_a_process_still_starting_when_its_session_expires_is_terminated_once_spawned() -> None:
    h = ready()
    h.request(1, "process/start", {"processId": "p", "argv": ["sh"], "cwd": CWD, "env": {},
                                   "tty": False})
    (spawn,) = h.of_type(Spawn)
    h.disconnect(1)
    assert h.advance(TTL) == [EndSession(session_id="session-1")]
    actions = h.feed(ProcessSpawned(proc=spawn.proc, pid=77))
    assert actions == [Signal(proc=spawn.proc, signal="TERM")]  # and no start response anywhere
    assert h.advance(GRACE) == [Signal(proc=spawn.proc, signal="KILL")]


def test_a_process_still_starting_when_its_session_expires_may_fail_to_spawn() -> None:
    h = ready()
    h.request(1, "process/start", {"processId": "p", "argv": ["nope"], "cwd": CWD, "env": {},
                                   "tty": False})
    (spawn,) = h.of_type(Spawn)
    h.disconnect(1)
    h.advance(TTL)
    actions = h.feed(SpawnFailed(proc=spawn.proc, error="No such file", kind="spawnNotFound"))
    assert actions == [Finalize(proc=spawn.proc, status="failed", exit_code=None, timed_out=False)]


def test_closed_processes_of_an_expired_session_need_nothing() -> None:
    h = ready(Config(closed_ttl=1000.0))
    proc = h.start(1, "p")
    h.exit(proc, 0)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    finalized = len(h.of_type(Finalize))
    h.disconnect(1)
    assert h.advance(TTL + 5 * GRACE) == [EndSession(session_id="session-1")]
    assert len(h.of_type(Finalize)) == finalized == 1


def test_expiry_only_touches_the_expired_session() -> None:
    h = ready()
    mine = h.start(1, "p")
    h.connect(2)
    h.handshake(2)
    theirs = h.start(2, "p")
    h.disconnect(1)
    h.advance(TTL + GRACE)
    assert {s.proc for s in h.of_type(Signal)} == {mine}
    (out,) = h.output(theirs, "stdout", b"still here")
    assert out.conn == 2


def test_custom_ttl_and_grace_are_honoured() -> None:
    h = ready(Config(session_ttl=2.0, kill_grace=0.25))
    proc = h.start(1, "p")
    h.disconnect(1)
    assert h.advance(1.99) == []
    assert h.advance(0.01) == [Signal(proc=proc, signal="TERM"),
                               EndSession(session_id="session-1")]
    assert h.advance(0.25) == [Signal(proc=proc, signal="KILL")]


def test_expiry_and_resume_at_the_same_instant_after_the_tick_is_refused() -> None:
    h = ready()
    h.disconnect(1)
    h.advance(TTL)  # the adapter ticks at the deadline
    h.connect(2)
    reply = h.call(2, "initialize", {"clientName": "c", "resumeSessionId": "session-1"})
    assert error(reply) == (INVALID_REQUEST, unknown_session("session-1"))


def test_a_resume_arriving_after_the_ttl_without_a_tick_is_refused() -> None:
    # The adapter never ticked: the core runs the passed deadline before the message itself.
    h = ready()
    h.start(1, "p")
    h.disconnect(1)
    h.now = TTL + 0.5
    h.connect(2)
    reply = h.call(2, "initialize", {"clientName": "c", "resumeSessionId": "session-1"})
    assert error(reply) == (INVALID_REQUEST, unknown_session("session-1"))
    assert [a.signal for a in h.of_type(Signal)] == ["TERM"]


# -- pending long polls on a closed connection --------------------------------------------------


def test_a_pending_read_on_a_closed_connection_is_cancelled() -> None:
    h = ready()
    proc = h.start(1, "p")
    read_id = h.request(1, "process/read", {"processId": "p", "waitMs": 5000})
    assert h.core.next_deadline() == pytest.approx(5.0)
    h.disconnect(1)
    # Only the session's TTL is left: the read's deadline no longer matters.
    assert h.core.next_deadline() == pytest.approx(TTL)
    assert h.output(proc, "stdout", b"x") == []
    assert h.advance(10.0) == []

    resume(h, 2, "session-1")
    assert h.response(1, read_id) is None
    assert h.response(2, read_id) is None
    # The new connection's reads work, both at once and as long polls.
    assert chunks(h.call(2, "process/read", {"processId": "p"})) == [(1, "stdout", b"x")]
    long_id = h.request(2, "process/read", {"processId": "p", "afterSeq": 1, "waitMs": 5000})
    assert h.response(2, long_id) is None
    h.output(proc, "stdout", b"y")
    assert chunks(h.response(2, long_id)) == [(2, "stdout", b"y")]
    h.advance(60.0)
    # No message ever answered the cancelled read, on any connection.
    answered = [m for conn in (1, 2) for m in h.messages(conn) if m.get("id") == read_id]
    assert answered == []


def test_closing_one_connection_does_not_cancel_another_connections_reads() -> None:
    h = ready()
    h.start(1, "p")
    h.connect(2)
    h.handshake(2)
    theirs = h.start(2, "p")
    read_id = h.request(2, "process/read", {"processId": "p", "waitMs": 5000})
    h.disconnect(1)
    h.output(theirs, "stdout", b"x")
    assert chunks(h.response(2, read_id)) == [(1, "stdout", b"x")]


def test_a_pending_start_answer_is_dropped_when_its_connection_closes() -> None:
    h = ready()
    start_id = h.request(1, "process/start", {"processId": "p", "argv": ["sh"], "cwd": CWD,
                                              "env": {}, "tty": False})
    (spawn,) = h.of_type(Spawn)
    h.disconnect(1)
    resume(h, 2, "session-1")
    # The spawn completes after the resume: the answer belonged to the old connection.
    assert h.feed(ProcessSpawned(proc=spawn.proc, pid=5)) == []
    assert h.response(2, start_id) is None
    # The process is there for the new connection all the same.
    (out,) = h.output(spawn.proc, "stdout", b"x")
    assert out.conn == 2
    assert h.call(2, "process/read", {"processId": "p"})["result"]["nextSeq"] == 2


def test_a_spawn_failure_while_detached_frees_the_id() -> None:
    h = ready()
    h.request(1, "process/start", {"processId": "p", "argv": ["nope"], "cwd": CWD, "env": {},
                                   "tty": False})
    (spawn,) = h.of_type(Spawn)
    h.disconnect(1)
    actions = h.feed(SpawnFailed(proc=spawn.proc, error="No such file"))
    assert actions == [Finalize(proc=spawn.proc, status="failed", exit_code=None, timed_out=False)]
    resume(h, 2, "session-1")
    reply = h.call(2, "process/read", {"processId": "p"})
    assert error(reply) == (INVALID_REQUEST, unknown_process("p"))
    h.start(2, "p")  # the id is free again


# -- flow control -------------------------------------------------------------------------------


def test_send_blocked_pauses_every_live_process_of_that_session_only() -> None:
    h = ready(Config(closed_ttl=1000.0))
    a = h.start(1, "a")
    b = h.start(1, "b")
    done = h.start(1, "done")
    h.exit(done, 0)
    h.eof(done, "stdout")
    h.eof(done, "stderr")
    h.connect(2)
    h.handshake(2)
    theirs = h.start(2, "a")

    assert h.feed(SendBlocked(conn=1)) == [PauseOutput(proc=a), PauseOutput(proc=b)]
    assert h.feed(SendBlocked(conn=1)) == []  # already paused: no duplicates
    assert h.feed(SendDrained(conn=1)) == [ResumeOutput(proc=a), ResumeOutput(proc=b)]
    assert h.feed(SendDrained(conn=1)) == []
    assert theirs not in {x.proc for x in h.of_type(PauseOutput) + h.of_type(ResumeOutput)}

    assert h.feed(SendBlocked(conn=2)) == [PauseOutput(proc=theirs)]
    assert h.feed(SendDrained(conn=2)) == [ResumeOutput(proc=theirs)]


def test_output_still_flows_into_the_log_and_to_the_client_while_blocked() -> None:
    h = ready()
    proc = h.start(1, "p")
    h.feed(SendBlocked(conn=1))
    # The adapter may have read a chunk before it carried out PauseOutput.
    (out,) = h.output(proc, "stdout", b"in flight")
    assert out.conn == 1
    assert chunks(h.call(1, "process/read", {"processId": "p"})) == [(1, "stdout", b"in flight")]


def test_a_process_spawned_while_blocked_is_paused_at_once() -> None:
    h = ready()
    h.feed(SendBlocked(conn=1))
    start_id = h.request(1, "process/start", {"processId": "p", "argv": ["sh"], "cwd": CWD,
                                              "env": {}, "tty": False})
    (spawn,) = h.of_type(Spawn)
    actions = h.feed(ProcessSpawned(proc=spawn.proc, pid=10))
    assert isinstance(actions[0], Send) and json.loads(actions[0].data)["id"] == start_id
    assert actions[-1] == PauseOutput(proc=spawn.proc)
    assert h.feed(SendDrained(conn=1)) == [ResumeOutput(proc=spawn.proc)]


def test_resuming_onto_a_blocked_connection_pauses_the_sessions_output() -> None:
    h = ready()
    proc = h.start(1, "p")
    h.disconnect(1)
    h.feed(ConnectionOpened(conn=2, session_id="session-2"))
    h.request(2, "process/read", {"processId": "p"})  # before initialize: an error answer
    h.feed(SendBlocked(conn=2))
    h.handshake(2, resume="session-1")
    assert h.of_type(PauseOutput) == [PauseOutput(proc=proc)]


def test_a_process_spawned_after_drain_is_not_paused() -> None:
    h = ready()
    h.feed(SendBlocked(conn=1))
    h.feed(SendDrained(conn=1))
    h.start(1, "p")
    assert h.of_type(PauseOutput) == []


def test_detaching_resumes_output() -> None:
    h = ready()
    a = h.start(1, "a")
    b = h.start(1, "b")
    h.feed(SendBlocked(conn=1))
    assert h.disconnect(1) == [ResumeOutput(proc=a), ResumeOutput(proc=b)]
    # The new connection starts unblocked; a new block pauses again.
    resume(h, 2, "session-1")
    assert h.of_type(PauseOutput)[-2:] == [PauseOutput(proc=a), PauseOutput(proc=b)]
    assert h.feed(SendBlocked(conn=2)) == [PauseOutput(proc=a), PauseOutput(proc=b)]


def test_detaching_an_unblocked_connection_sends_no_resume() -> None:
    h = ready()
    h.start(1, "a")
    assert h.disconnect(1) == []


# -- held output: a detached session drops nothing -------------------------------------------


def held(retention: int = 10) -> tuple[Harness, int]:
    """A detached session with one running process whose retention is ``retention`` bytes."""
    h = ready(Config(retention_bytes=retention))
    proc = h.start(1, "p")
    h.disconnect(1)
    return h, proc


def test_detached_output_pauses_when_the_log_is_full_instead_of_dropping() -> None:
    h, proc = held()
    assert h.output(proc, "stdout", b"12345") == []
    assert h.output(proc, "stdout", b"67890") == [PauseOutput(proc=proc)]
    # Chunks the adapter read before it paused are kept too, past the bound.
    assert h.output(proc, "stdout", b"late") == []
    resume(h, 2, "session-1")
    assert h.of_type(ResumeOutput) == []  # still full, and not yet read back
    reply = h.call(2, "process/read", {"processId": "p"})
    assert chunks(reply) == [
        (1, "stdout", b"12345"), (2, "stdout", b"67890"), (3, "stdout", b"late")
    ]
    assert reply["result"]["droppedBytes"] == 0
    assert h.of_type(ResumeOutput) == [ResumeOutput(proc=proc)]
    # Read back: the log is bounded again, and drops what the client already has.
    h.output(proc, "stdout", b"more")
    reply = h.call(2, "process/read", {"processId": "p"})
    assert chunks(reply) == [(3, "stdout", b"late"), (4, "stdout", b"more")]
    assert reply["result"]["droppedBytes"] == 10


def test_a_read_cut_short_by_max_bytes_keeps_the_output_held() -> None:
    h, proc = held()
    h.output(proc, "stdout", b"12345")
    h.output(proc, "stdout", b"67890")
    resume(h, 2, "session-1")
    reply = h.call(2, "process/read", {"processId": "p", "maxBytes": 5})
    assert chunks(reply) == [(1, "stdout", b"12345")]
    assert h.of_type(ResumeOutput) == []
    reply = h.call(2, "process/read", {"processId": "p", "afterSeq": 1})
    assert chunks(reply) == [(2, "stdout", b"67890")]
    assert h.of_type(ResumeOutput) == [ResumeOutput(proc=proc)]


def test_output_on_a_resumed_session_stays_held_until_read_back() -> None:
    h, proc = held()
    resume(h, 2, "session-1")
    h.output(proc, "stdout", b"1234567890")  # notified live, yet the log still holds it
    assert h.of_type(PauseOutput) == [PauseOutput(proc=proc)]
    h.call(2, "process/read", {"processId": "p", "afterSeq": 1})
    assert h.of_type(ResumeOutput) == [ResumeOutput(proc=proc)]


def test_a_long_poll_answered_in_full_releases_the_hold() -> None:
    h, proc = held()
    resume(h, 2, "session-1")
    read_id = h.request(2, "process/read", {"processId": "p", "waitMs": 5000})
    actions = h.output(proc, "stdout", b"1234567890")
    assert actions[-1] == ResumeOutput(proc=proc)
    assert chunks(h.response(2, read_id) or {}) == [(1, "stdout", b"1234567890")]


def test_terminating_a_held_process_releases_it_so_its_pipes_drain() -> None:
    h, proc = held()
    h.output(proc, "stdout", b"1234567890")
    resume(h, 2, "session-1")
    terminate = {"id": 99, "method": "process/terminate", "params": {"processId": "p"}}
    actions = [a for a in h.send(2, terminate) if not isinstance(a, Send)]
    assert actions == [ResumeOutput(proc=proc), Signal(proc=proc, signal="TERM")]


def test_an_expired_session_releases_its_held_processes() -> None:
    h, proc = held()
    h.output(proc, "stdout", b"1234567890")
    actions = h.advance(TTL)
    assert actions[:2] == [ResumeOutput(proc=proc), Signal(proc=proc, signal="TERM")]


def test_a_process_terminating_when_its_client_leaves_is_not_held() -> None:
    h = ready(Config(retention_bytes=10))
    proc = h.start(1, "p")
    h.call(1, "process/terminate", {"processId": "p"})
    h.disconnect(1)
    assert h.output(proc, "stdout", b"1234567890") == []
    assert h.output(proc, "stdout", b"more") == []
    assert h.of_type(PauseOutput) == []


# -- output acks (execproto's extension) ---------------------------------------------------------


def acking(retention: int = 10) -> tuple[Harness, int]:
    h = Harness(Config(retention_bytes=retention, retention_chunks=100))
    h.connect(1)
    h.call(1, "initialize", {"clientName": "t", "outputAcks": True})
    h.send(1, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
    return h, h.start(1, "p")


def test_initialize_with_output_acks_reports_the_window() -> None:
    h = Harness(Config(retention_bytes=10, retention_chunks=100))
    h.connect(1)
    reply = h.call(1, "initialize", {"clientName": "t", "outputAcks": True})
    assert reply["result"]["outputAcks"] == {"bytes": 10, "chunks": 100}
    plain = ready()
    assert "outputAcks" not in plain.messages(1)[0]["result"]


def test_unacknowledged_output_is_kept_and_pauses_the_process_when_full() -> None:
    h, proc = acking()
    h.output(proc, "stdout", b"12345")
    assert h.output(proc, "stdout", b"67890")[-1] == PauseOutput(proc=proc)
    # Reading it all does not release it: only an ack does.
    h.call(1, "process/read", {"processId": "p"})
    assert h.of_type(ResumeOutput) == []
    assert h.call(1, "process/ack", {"processId": "p", "seq": 1})["result"] == {}
    assert h.of_type(ResumeOutput) == [ResumeOutput(proc=proc)]
    reply = h.call(1, "process/read", {"processId": "p"})
    assert chunks(reply) == [(2, "stdout", b"67890")]
    assert reply["result"]["firstRetainedSeq"] == 2


def test_an_ack_for_an_unknown_process_is_answered_and_ignored() -> None:
    h, _ = acking()
    assert h.call(1, "process/ack", {"processId": "nope", "seq": 3})["result"] == {}


@pytest.mark.parametrize(
    "params, message",
    [
        ({"processId": "p"}, "missing field `seq`"),
        ({"processId": "p", "seq": -1}, "invalid number"),
        ({"seq": 1}, "missing field `processId`"),
    ],
)
def test_a_malformed_ack_is_invalid_params(params: dict[str, Any], message: str) -> None:
    h, _ = acking()
    assert error(h.call(1, "process/ack", params)) == (-32602, message)


def test_resuming_without_acks_keeps_the_output_held_until_read_back() -> None:
    h, proc = acking()
    h.output(proc, "stdout", b"1234567890")
    h.disconnect(1)
    resume(h, 2, "session-1")
    h.call(2, "process/read", {"processId": "p"})
    assert h.of_type(ResumeOutput) == [ResumeOutput(proc=proc)]


def test_flow_control_on_a_connection_without_a_session_does_nothing() -> None:
    h = Harness()
    h.connect(1)
    assert h.feed(SendBlocked(conn=1)) == []
    assert h.feed(SendDrained(conn=1)) == []
    h.feed(SendBlocked(conn=1))
    h.handshake(1)
    # A process spawned on a connection that was already blocked before its session existed.
    proc = h.start(1, "p")
    assert h.of_type(PauseOutput) == [PauseOutput(proc=proc)]


def test_a_finalized_process_is_not_resumed() -> None:
    h = ready(Config(closed_ttl=1000.0))
    proc = h.start(1, "p")
    h.feed(SendBlocked(conn=1))
    h.exit(proc, 0)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    assert h.feed(SendDrained(conn=1)) == []


# -- process ids are per session ----------------------------------------------------------------


def test_two_sessions_process_ids_are_independent() -> None:
    h = ready()
    h.connect(2)
    h.handshake(2)
    mine = h.start(1, "p")
    theirs = h.start(2, "p")
    assert mine != theirs
    (out1,) = h.output(mine, "stdout", b"mine")
    (out2,) = h.output(theirs, "stdout", b"theirs")
    assert (out1.conn, out2.conn) == (1, 2)
    assert json.loads(out1.data)["params"]["seq"] == json.loads(out2.data)["params"]["seq"] == 1
    assert chunks(h.call(1, "process/read", {"processId": "p"})) == [(1, "stdout", b"mine")]
    assert chunks(h.call(2, "process/read", {"processId": "p"})) == [(1, "stdout", b"theirs")]

    h.call(2, "process/terminate", {"processId": "p"})
    assert h.of_type(Signal) == [Signal(proc=theirs, signal="TERM")]
    h.call(1, "process/signal", {"processId": "p", "signal": "interrupt"})
    assert h.of_type(Signal)[-1] == Signal(proc=mine, signal="INT")

    # A third session sees neither.
    h.connect(3)
    h.handshake(3)
    reply = h.call(3, "process/read", {"processId": "p"})
    assert error(reply) == (INVALID_REQUEST, unknown_process("p"))
    reply = h.call(3, "process/write", {"processId": "p", "chunk": "", "writeId": "w"})
    assert reply["result"] == {"status": "unknownProcess"}


def test_spawn_spec_names_the_owning_session() -> None:
    h = ready()
    h.connect(2)
    h.handshake(2)
    h.start(2, "x")
    (spawn,) = h.of_type(Spawn)
    assert (spawn.spec.session_id, spawn.spec.process_id) == ("session-2", "x")


def test_the_trace_of_a_detach_and_resume_replays() -> None:
    h = ready()
    proc = h.start(1, "p")
    read_id = h.request(1, "process/read", {"processId": "p", "waitMs": 5000})
    h.feed(SendBlocked(conn=1))
    h.disconnect(1)
    h.output(proc, "stdout", b"x")
    h.advance(3.0)
    resume(h, 2, "session-1")
    h.feed(Tick())
    assert h.response(2, read_id) is None
    h.assert_replays()


def test_a_closed_process_id_is_freed_for_its_session_after_closed_ttl() -> None:
    h = ready()
    proc = h.start(1, "p")
    h.exit(proc, 0)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    h.advance(29.9)  # Config().closed_ttl is 30 s
    assert h.call(1, "process/read", {"processId": "p"})["result"]["closed"] is True
    h.advance(0.1)
    reply = h.call(1, "process/read", {"processId": "p"})
    assert error(reply) == (INVALID_REQUEST, unknown_process("p"))
    h.start(1, "p")


def test_a_closed_process_of_a_detached_session_is_evicted_while_detached() -> None:
    h = ready(Config(session_ttl=100.0))
    proc = h.start(1, "p")
    h.exit(proc, 0)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    h.disconnect(1)
    assert h.advance(31.0) == []
    resume(h, 2, "session-1")
    reply = h.call(2, "process/read", {"processId": "p"})
    assert error(reply) == (INVALID_REQUEST, unknown_process("p"))


def test_an_expired_sessions_closed_process_is_dropped_before_its_eviction() -> None:
    h = ready(Config(session_ttl=1.0, closed_ttl=30.0))
    proc = h.start(1, "p")
    h.exit(proc, 0)
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    h.disconnect(1)
    # Expiry drops it, and its later eviction is harmless.
    assert h.advance(60.0) == [EndSession(session_id="session-1")]


# -- session/end (execproto's extension) ------------------------------------------------------


def test_a_session_its_client_ends_goes_at_once_and_its_processes_are_stopped() -> None:
    """It waited, detached, for its TTL (30 s by default) though nobody would resume it, and
    counted against the detached sessions other clients need room among."""
    h = ready()
    proc = h.start(1, "p")
    assert h.call(1, "session/end")["result"] == {}
    assert h.of_type(CloseConnection)[-1] == CloseConnection(conn=1, code=CloseCode.NORMAL_CLOSURE,
                                                             reason="session ended")
    h.disconnect(1)
    assert h.advance(0.0) == [Signal(proc=proc, signal="TERM"),
                              EndSession(session_id="session-1", ended=True)]
    h.connect(2)
    refused = h.handshake(2, resume="session-1")
    assert refused["error"]["message"] == "unknown session id session-1", refused
    h.assert_replays()

