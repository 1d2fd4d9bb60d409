"""The process lifecycle with sessions and flow control.

From `execproto._lifecycle`: *send blocked / drained* pause and resume every process of the
session (`pause_wanted`), including one spawned while blocked; *expired* terminates each live
process as ``timed_out`` and forgets the closed ones. The sessions themselves (attach, detach,
resume, held output) are in test_sessions.py and test_held_cap.py. Every world is checked when
the test ends (`lifecycle_world.World.check`).
"""

from __future__ import annotations

from collections.abc import Callable

from execproto import (
    Config,
    Finalize,
    PauseOutput,
    ResumeOutput,
    Send,
    SendBlocked,
    SendDrained,
    Signal,
)

from .lifecycle_world import (
    World,
    begin,
    close_all,
    finalizes,
    finish,
    result_of,
    run,
    signals,
    spawned,
    terminate,
    unchecked_world,
)

# =================================================================================================
# the lifecycle with sessions and flow control
# =================================================================================================


def test_process_spawned_while_blocked_starts_paused(w: World) -> None:
    done = run(w, "done")
    finish(w, done)
    live = run(w, "live")
    w.feed(SendBlocked(conn=1))
    assert w.of_type(PauseOutput) == [PauseOutput(proc=live)]  # the closed one is left alone
    _, spawn = begin(w, "new")
    actions = spawned(w, spawn.proc)
    assert PauseOutput(proc=spawn.proc) in actions
    w.feed(SendDrained(conn=1))
    assert w.of_type(ResumeOutput) == [ResumeOutput(proc=live), ResumeOutput(proc=spawn.proc)]


def test_terminated_while_starting_and_spawned_while_blocked(w: World) -> None:
    start_id, spawn = begin(w)
    terminate(w)
    w.feed(SendBlocked(conn=1))
    actions = spawned(w, spawn.proc)
    assert isinstance(actions[0], Send)  # the start answer first
    assert result_of(w, start_id) == {"processId": "p", "sandboxType": "none"}
    assert Signal(proc=spawn.proc, signal="TERM") in actions
    assert actions[-1] == PauseOutput(proc=spawn.proc)
    w.feed(SendDrained(conn=1))
    assert w.of_type(ResumeOutput) == [ResumeOutput(proc=spawn.proc)]


def test_expired_session_terminates_live_processes_and_frees_closed_ones(
    make_world: Callable[..., World],
) -> None:
    w = make_world(Config(session_ttl=5.0, closed_ttl=30.0, kill_grace=1.0))
    w.gapless = False
    closed = run(w, "closed")
    finish(w, closed)
    running = run(w, "running")
    exited = run(w, "exited")
    w.exit(exited, 0)
    _, starting = begin(w, "starting")
    w.disconnect(1)
    w.advance(5.0)
    # Only the running one can be signalled; the starting one gets its TERM when spawned.
    assert signals(w) == ["TERM"] and w.of_type(Signal)[0].proc == running
    spawned(w, starting.proc)
    assert signals(w) == ["TERM", "TERM"]
    w.exit(running, -15)
    close_all(w, running)
    w.advance(1.0)  # the exited one's held pipes are abandoned; the starting one is killed
    assert signals(w, starting.proc) == ["TERM", "KILL"]
    finish(w, starting.proc, -9)
    assert finalizes(w, running) == [
        Finalize(proc=running, status="completed", exit_code=143, timed_out=True)
    ]
    assert finalizes(w, exited) == [
        Finalize(proc=exited, status="completed", exit_code=0, timed_out=True)
    ]
    assert finalizes(w, starting.proc) == [
        Finalize(proc=starting.proc, status="completed", exit_code=137, timed_out=True)
    ]
    assert len(finalizes(w, closed)) == 1


def test_eviction_after_the_session_expired() -> None:
    w = unchecked_world(Config(session_ttl=5.0, closed_ttl=30.0))
    w.gapless = False
    proc = run(w)
    finish(w, proc)
    w.disconnect(1)
    w.advance(5.0)  # the session is gone, and the closed process with it
    w.advance(60)  # its eviction then finds nothing to do
    assert w.core.next_deadline() is None
    assert len(finalizes(w, proc)) == 1
    w.check()
