"""Signals and the terminate/stop sequence (`Stop`, `STOP_EVENTS` in `execproto._lifecycle`).

``process/signal`` is emitted only while RUNNING (`SIGNALLABLE`). ``process/terminate``:
TERM, then KILL after ``kill_grace``; asked while STARTING, TERM at the spawn (PENDING); exited
while stopping with a descendant holding the pipes, the streams abandoned after the grace
(DRAINING). Every world is checked when the test ends (`lifecycle_world.World.check`).
"""

from __future__ import annotations

from collections.abc import Callable

from execproto import (
    Config,
    Finalize,
    Signal,
)

from .lifecycle_world import (
    ABANDONED,
    BAD_SIGNAL,
    EPS,
    INVALID_PARAMS,
    World,
    begin,
    chunks,
    close_all,
    error_of,
    events,
    expected_read,
    finalizes,
    finish,
    interrupt,
    park,
    read,
    result_of,
    run,
    signals,
    spawned,
    terminate,
)

# =================================================================================================
# process/signal
# =================================================================================================


def test_interrupt_while_running(w: World) -> None:
    proc = run(w)
    assert interrupt(w) == {}
    assert w.of_type(Signal) == [Signal(proc=proc, signal="INT")]
    assert interrupt(w) == {}  # every interrupt is delivered while it runs
    assert signals(w, proc) == ["INT", "INT"]


def test_interrupt_after_exit_before_close_and_after_close_signals_nothing(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    assert interrupt(w) == {}
    close_all(w, proc)
    assert interrupt(w) == {}
    assert signals(w) == []


def test_interrupt_before_the_spawn_is_not_deferred(w: World) -> None:
    _, spawn = begin(w)
    assert interrupt(w) == {}
    spawned(w, spawn.proc)
    w.advance(10)
    assert signals(w) == []


def test_interrupt_of_an_unknown_process(w: World) -> None:
    run(w, "p")
    assert interrupt(w, "q") == {}
    assert signals(w) == []


def test_unknown_signal_name_is_invalid_params(w: World) -> None:
    run(w)
    msg_id = w.request(1, "process/signal", {"processId": "p", "signal": "kill"})
    assert error_of(w, msg_id) == {"code": INVALID_PARAMS, "message": BAD_SIGNAL.format("kill")}
    assert signals(w) == []


# =================================================================================================
# process/terminate
# =================================================================================================


def test_terminate_sends_term_then_kill_after_the_grace(make_world: Callable[..., World]) -> None:
    w = make_world(Config(kill_grace=2.0))
    proc = run(w)
    w.advance(1)
    assert terminate(w) == {"running": True}
    assert signals(w, proc) == ["TERM"]
    w.advance(2.0 - EPS)
    assert signals(w, proc) == ["TERM"]
    assert w.advance(EPS) == [Signal(proc=proc, signal="KILL")]
    assert terminate(w) == {"running": True}  # still running, and no re-signal
    w.output(proc, "stdout", b"dying words")
    close_all(w, proc)
    w.exit(proc, -9)
    assert events(w) == [("output", 1), ("exited", 2), ("closed", 3)]
    assert w.notifications(1, "process/exited")[0]["params"]["exitCode"] == 137
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=137, timed_out=True)
    ]
    assert signals(w, proc) == ["TERM", "KILL"]
    # terminate keeps the output produced before it.
    assert chunks(read(w)) == [(1, "stdout", b"dying words")]
    assert read(w)["failure"] is None


def test_terminate_with_no_kill_when_it_exits_in_time(w: World) -> None:
    proc = run(w)
    assert terminate(w) == {"running": True}
    w.advance(0.5)
    w.exit(proc, -15)
    w.advance(0.25)
    close_all(w, proc)
    w.advance(10)
    assert signals(w, proc) == ["TERM"]
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=143, timed_out=False)
    ]
    assert read(w)["failure"] is None


def test_second_terminate_does_not_resignal(w: World) -> None:
    proc = run(w)
    assert terminate(w) == {"running": True}
    w.advance(0.5)
    assert terminate(w) == {"running": True}
    w.advance(0.5)  # the KILL is due one grace after the first terminate, not the second
    assert signals(w, proc) == ["TERM", "KILL"]
    w.advance(10)
    assert signals(w, proc) == ["TERM", "KILL"]
    finish(w, proc, -9)
    assert terminate(w) == {"running": False}
    assert signals(w, proc) == ["TERM", "KILL"]


def test_interrupt_while_terminating_is_still_delivered(w: World) -> None:
    proc = run(w)
    terminate(w)
    assert interrupt(w) == {}
    assert signals(w, proc) == ["TERM", "INT"]


def test_terminate_while_starting_sends_term_as_soon_as_spawned(w: World) -> None:
    start_id, spawn = begin(w)
    assert terminate(w) == {"running": True}
    assert terminate(w) == {"running": True}
    w.advance(5)
    assert signals(w) == []  # nothing to signal before the spawn
    actions = spawned(w, spawn.proc)
    assert actions[-1] == Signal(proc=spawn.proc, signal="TERM")
    assert result_of(w, start_id) == {"processId": "p", "sandboxType": "none"}
    w.advance(1.0 - EPS)
    assert signals(w) == ["TERM"]
    w.advance(EPS)
    assert signals(w) == ["TERM", "KILL"]
    finish(w, spawn.proc, -9)
    assert finalizes(w, spawn.proc) == [
        Finalize(proc=spawn.proc, status="completed", exit_code=137, timed_out=True)
    ]


def test_terminate_after_exit_abandons_held_pipes_after_the_grace(
    make_world: Callable[..., World],
) -> None:
    w = make_world(Config(kill_grace=3.0))
    proc = run(w)
    w.output(proc, "stdout", b"before")
    w.exit(proc, 5)
    w.eof(proc, "stderr")  # stdout stays held by a descendant
    assert terminate(w) == {"running": False}
    assert terminate(w) == {"running": False}
    w.advance(3.0 - EPS)
    w.output(proc, "stdout", b"late")  # still flowing until the grace ends
    assert finalizes(w, proc) == [] and events(w)[-1] == ("output", 3)
    assert read(w, afterSeq=3, waitMs=0)["closed"] is False
    waiting = park(w, afterSeq=3, waitMs=60_000)
    actions = w.advance(EPS)
    assert Finalize(proc=proc, status="completed", exit_code=5, timed_out=True) in actions
    assert events(w) == [("output", 1), ("exited", 2), ("output", 3), ("closed", 4)]
    abandoned = expected_read(
        nextSeq=5, exited=True, exitCode=5, closed=True, failure=ABANDONED, firstRetainedSeq=1
    )
    assert result_of(w, waiting) == abandoned
    assert read(w, afterSeq=4) == abandoned
    assert chunks(read(w)) == [(1, "stdout", b"before"), (3, "stdout", b"late")]
    # The adapter's queued events for the abandoned pipe are ignored.
    assert w.output(proc, "stdout", b"too late") == []
    assert w.eof(proc, "stdout") == []
    assert signals(w) == []
    assert terminate(w) == {"running": False}


def test_terminated_process_whose_descendant_holds_the_pipes_is_abandoned(w: World) -> None:
    proc = run(w)
    assert terminate(w) == {"running": True}
    w.advance(0.5)
    w.exit(proc, -15)  # the kill timer is moot; the abandon grace starts at the exit
    w.advance(1.0 - EPS)
    assert finalizes(w, proc) == []
    w.output(proc, "stderr", b"orphan says hi")
    w.advance(EPS)
    assert signals(w, proc) == ["TERM"]
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=143, timed_out=True)
    ]
    assert read(w)["failure"] == ABANDONED
    assert events(w) == [("exited", 1), ("output", 2), ("closed", 3)]


def test_killed_process_whose_descendant_holds_the_pipes_is_abandoned(w: World) -> None:
    proc = run(w)
    terminate(w)
    w.advance(1.0)
    assert signals(w, proc) == ["TERM", "KILL"]
    w.advance(0.5)
    w.exit(proc, -9)
    w.advance(1.0)
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=137, timed_out=True)
    ]
    assert read(w)["failure"] == ABANDONED


def test_terminated_process_whose_pipes_close_in_time_is_not_abandoned(w: World) -> None:
    proc = run(w)
    terminate(w)
    w.exit(proc, -15)
    w.advance(0.5)
    close_all(w, proc)
    w.advance(10)
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=143, timed_out=False)
    ]
    assert read(w)["failure"] is None


def test_terminate_after_exit_with_pipes_closing_in_time_is_not_abandoned(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    assert terminate(w) == {"running": False}
    close_all(w, proc)
    w.advance(10)
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=0, timed_out=False)
    ]
    assert read(w)["failure"] is None


def test_terminate_of_a_closed_or_unknown_process(w: World) -> None:
    proc = run(w)
    finish(w, proc)
    assert terminate(w) == {"running": False}
    assert terminate(w, "nope") == {"running": False}
    w.advance(10)
    assert signals(w) == []
    assert len(finalizes(w, proc)) == 1


def test_terminate_of_a_process_with_closed_streams_closes_on_exit(w: World) -> None:
    proc = run(w)
    close_all(w, proc)
    assert terminate(w) == {"running": True}
    actions = w.exit(proc, -15)
    assert actions[-1] == Finalize(proc=proc, status="completed", exit_code=143, timed_out=False)
    w.advance(10)
    assert signals(w, proc) == ["TERM"]
