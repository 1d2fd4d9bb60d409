"""Server shutdown: every connection closed, every process terminated and finalized once."""

from execproto import CloseConnection, Finalize, ProcessSpawned, Shutdown, Signal, Spawn

from .harness import Harness


def test_shutdown_terminates_everything_and_becomes_idle(h: Harness) -> None:
    running = h.start(1, "running")
    held = h.start(1, "held")
    h.exit(held, 0)  # exited, but a stray descendant holds its pipes
    assert not h.core.idle

    h.feed(Shutdown())
    closing = CloseConnection(conn=1, code=1001, reason="server shutting down")
    assert h.of_type(CloseConnection) == [closing]
    assert h.of_type(Signal) == [Signal(proc=running, signal="TERM")]  # none for the exited one

    h.advance(1.0)  # the grace: KILL for the one still running, the held pipes abandoned
    assert h.of_type(Signal)[-1] == Signal(proc=running, signal="KILL")
    abandoned = Finalize(proc=held, status="completed", exit_code=0, timed_out=True)
    assert h.of_type(Finalize) == [abandoned]
    h.exit(running, -9)
    h.eof(running, "stdout")
    h.eof(running, "stderr")
    killed = Finalize(proc=running, status="completed", exit_code=137, timed_out=True)
    assert h.of_type(Finalize)[-1] == killed
    assert h.core.idle
    h.assert_replays()


def test_a_connection_opened_during_shutdown_is_closed_at_once(h: Harness) -> None:
    h.feed(Shutdown())
    h.connect(2)
    assert h.of_type(CloseConnection)[-1] == CloseConnection(
        conn=2, code=1001, reason="server shutting down"
    )
    assert h.core.idle  # nothing was running


def test_a_process_starting_at_shutdown_is_terminated_when_spawned(h: Harness) -> None:
    start = {"processId": "p", "argv": ["x"], "cwd": "file:///", "env": {}, "tty": False}
    h.request(1, "process/start", start)
    h.feed(Shutdown())
    assert not h.core.idle
    (spawn,) = h.of_type(Spawn)
    h.feed(ProcessSpawned(proc=spawn.proc, pid=42))
    assert h.of_type(Signal) == [Signal(proc=spawn.proc, signal="TERM")]
