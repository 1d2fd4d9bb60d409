"""The lifecycle tables of `execproto._lifecycle`, driven alone, without a `ServerCore`.

As h2's state-machine tests and h11's test_state.py do: each (state, input) pair is forced on a
fresh `ProcessLife` or `SessionLife` and fed, and either moves it to the state written here, with
the follow-ups written here, or is refused as the tables say, changing nothing. The expectations
are written out below, not read from the tables; the loops go over the enums and every grid is
looked up by enum member, so a phase, stop, input or session state added without its row here
fails.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from execproto import SESSION_ATTACHED, LocalProtocolError, RpcError
from execproto._lifecycle import (
    Do,
    Input,
    Phase,
    ProcessLife,
    SessionInput,
    SessionLife,
    SessionState,
    Stop,
    StopInput,
)
from execproto._processes import _FOLLOW_UPS

STARTING, RUNNING, EXITED, CLOSED, FAILED = (
    Phase.STARTING, Phase.RUNNING, Phase.EXITED, Phase.CLOSED, Phase.FAILED)
NONE, PENDING, TERM_SENT, KILL_SENT, DRAINING = (
    Stop.NONE, Stop.PENDING, Stop.TERM_SENT, Stop.KILL_SENT, Stop.DRAINING)
NEW, ATTACHED, DETACHED, EXPIRED = (
    SessionState.NEW, SessionState.ATTACHED, SessionState.DETACHED, SessionState.EXPIRED)
X = None  # refused (event-triggered) or nothing fires (stop, state-triggered)

STREAMS = ("stdout", "stderr")
CONN = 7


def life_in(phase: Phase, stop: Stop = NONE, streams: tuple[str, ...] = STREAMS) -> ProcessLife:
    """A process's life forced into a state, as h11's tests set ``states`` directly."""
    life = ProcessLife(1, STREAMS)
    life.phase, life.stop, life.open_streams = phase, stop, set(streams)
    return life


def state_of(life: ProcessLife) -> tuple[Phase, Stop, frozenset[str], bool, bool]:
    return life.phase, life.stop, frozenset(life.open_streams), life.held, life.paused


# =================================================================================================
# event-triggered: a process's phase
# =================================================================================================

# Phase -> the next phase for each input, in `Input`'s order; X: refused (LocalProtocolError).
PROCESS_GRID: dict[Phase, tuple[Phase | None, ...]] = {
    #          SPAWNED  SPAWN_FAILED  OUTPUT   STREAM_CLOSED  EXITED  ABANDONED
    STARTING: (RUNNING, FAILED,       X,       X,             X,      X),
    RUNNING:  (X,       X,            RUNNING, RUNNING,       EXITED, X),
    EXITED:   (X,       X,            EXITED,  EXITED,        X,      EXITED),
    CLOSED:   (X,       X,            X,       X,             X,      X),
    FAILED:   (X,       X,            X,       X,             X,      X),
}  # fmt: skip

# Input -> how it is fed, what it does to the open streams, and its follow-ups (None: output,
# whose path has none).
FEED: dict[Input, Callable[[ProcessLife], tuple[Do, ...] | None]] = {
    Input.SPAWNED: ProcessLife.spawned,
    Input.SPAWN_FAILED: ProcessLife.spawn_failed,
    Input.OUTPUT: lambda life: life.output("stdout"),
    Input.STREAM_CLOSED: lambda life: life.close_stream("stdout"),
    Input.EXITED: ProcessLife.exited,
    Input.ABANDONED: ProcessLife.abandon_streams,
}
STREAMS_AFTER: dict[Input, frozenset[str]] = {
    Input.SPAWNED: frozenset(STREAMS),
    Input.SPAWN_FAILED: frozenset(STREAMS),
    Input.OUTPUT: frozenset(STREAMS),
    Input.STREAM_CLOSED: frozenset({"stderr"}),
    Input.EXITED: frozenset(STREAMS),
    Input.ABANDONED: frozenset(),
}
FOLLOW_UPS: dict[Input, tuple[Do, ...] | None] = {
    Input.SPAWNED: (Do.SETTLE, Do.SYNC_PAUSED, Do.APPLY_SIZE),
    Input.SPAWN_FAILED: (Do.FORGET, Do.FAIL_READERS, Do.FINALIZE_FAILED),
    Input.OUTPUT: None,
    Input.STREAM_CLOSED: (Do.SETTLE,),
    Input.EXITED: (Do.CANCEL_KILL, Do.SETTLE, Do.WAKE_READERS),
    Input.ABANDONED: (Do.SETTLE,),
}


@pytest.mark.parametrize(
    ("phase", "event"),
    [pytest.param(p, e, id=f"{p.name}-{e.name}") for p, e in itertools.product(Phase, Input)],
)
def test_each_phase_and_input_moves_as_written_or_is_refused(phase: Phase, event: Input) -> None:
    expected = dict(zip(Input, PROCESS_GRID[phase], strict=True))[event]
    for stop, held, paused in itertools.product(Stop, (False, True), (False, True)):
        life = life_in(phase, stop)
        life.held, life.paused = held, paused
        before = state_of(life)
        if expected is None:
            with pytest.raises(LocalProtocolError, match=f"{event.value} is impossible while"):
                FEED[event](life)
            assert state_of(life) == before  # a refused input changes nothing
        else:
            assert FEED[event](life) == FOLLOW_UPS[event]
            # The phase moves and the streams as the input says; nothing else.
            assert state_of(life) == (expected, stop, STREAMS_AFTER[event], held, paused)


@pytest.mark.parametrize("phase", [RUNNING, EXITED])
def test_a_stream_that_is_not_open_refuses_output_and_its_close(phase: Phase) -> None:
    for streams in [("stderr",), ()]:
        life = life_in(phase, streams=streams)
        before = state_of(life)
        with pytest.raises(LocalProtocolError, match="'stdout', which is not open"):
            life.output("stdout")
        with pytest.raises(LocalProtocolError, match="'stdout' closed twice or unknown"):
            life.close_stream("stdout")
        assert state_of(life) == before


def test_a_life_starts_starting_with_every_stream_open_and_neither_flag() -> None:
    for streams in [("stdout", "stderr"), ("pty",)]:
        life = ProcessLife(3, streams)
        assert state_of(life) == (STARTING, NONE, frozenset(streams), False, False)


# =================================================================================================
# event-triggered: the terminate sequence
# =================================================================================================

# What a stop input may do: the new stop and the follow-ups.
PEND = (PENDING, (Do.RELEASE_HOLD,))
TERM = (TERM_SENT, (Do.RELEASE_HOLD, Do.SIGNAL_TERM, Do.SET_KILL))
DRAIN = (DRAINING, (Do.RELEASE_HOLD, Do.SET_ABANDON))
KILL = (KILL_SENT, (Do.SIGNAL_KILL,))

# (input, stop) -> what it does in each phase, in `Phase`'s order; X: nothing changes.
STOP_GRID: dict[tuple[StopInput, Stop], tuple[tuple[Stop, tuple[Do, ...]] | None, ...]] = {
    #                                 STARTING  RUNNING  EXITED  CLOSED  FAILED
    (StopInput.TERMINATE, NONE):      (PEND,    TERM,    DRAIN,  X,      X),
    (StopInput.TERMINATE, PENDING):   (X,       X,       X,      X,      X),
    (StopInput.TERMINATE, TERM_SENT): (X,       X,       X,      X,      X),
    (StopInput.TERMINATE, KILL_SENT): (X,       X,       X,      X,      X),
    (StopInput.TERMINATE, DRAINING):  (X,       X,       X,      X,      X),
    (StopInput.KILL_DUE, NONE):       (X,       X,       X,      X,      X),
    (StopInput.KILL_DUE, PENDING):    (X,       X,       X,      X,      X),
    (StopInput.KILL_DUE, TERM_SENT):  (X,       KILL,    X,      X,      X),
    (StopInput.KILL_DUE, KILL_SENT):  (X,       X,       X,      X,      X),
    (StopInput.KILL_DUE, DRAINING):   (X,       X,       X,      X,      X),
}  # fmt: skip


@pytest.mark.parametrize(
    ("event", "stop", "phase"),
    [
        pytest.param(e, s, p, id=f"{e.name}-{s.name}-{p.name}")
        for e, s, p in itertools.product(StopInput, Stop, Phase)
    ],
)
def test_each_stop_phase_and_stop_input_moves_as_written_or_changes_nothing(
    event: StopInput, stop: Stop, phase: Phase
) -> None:
    expected = dict(zip(Phase, STOP_GRID[event, stop], strict=True))[phase]
    life = life_in(phase, stop)
    before = state_of(life)
    todo = life.stop_event(event)
    if expected is None:
        assert todo == ()
        assert state_of(life) == before
    else:
        to_stop, follow_ups = expected
        assert todo == follow_ups
        assert state_of(life) == (phase, to_stop, *before[2:])  # only the stop moves


# =================================================================================================
# state-triggered: settle
# =================================================================================================

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
TERM_AT_SPAWN = (RUNNING, TERM_SENT, (Do.SIGNAL_TERM, Do.SET_KILL))
ABANDON_DUE = (EXITED, DRAINING, (Do.SET_ABANDON,))

# (phase, stop) -> where settle ends, and its follow-ups, with every stream at EOF and with some
# stream open; X: nothing fires.
SETTLE_GRID: dict[tuple[Phase, Stop], tuple[tuple[Phase, Stop, tuple[Do, ...]] | None, ...]] = {
    #                        every stream at EOF        some stream open
    (STARTING, NONE):       (X,                         X),
    (STARTING, PENDING):    (X,                         X),
    (STARTING, TERM_SENT):  (X,                         X),
    (STARTING, KILL_SENT):  (X,                         X),
    (STARTING, DRAINING):   (X,                         X),
    (RUNNING, NONE):        (X,                         X),
    (RUNNING, PENDING):     (TERM_AT_SPAWN,             TERM_AT_SPAWN),
    (RUNNING, TERM_SENT):   (X,                         X),
    (RUNNING, KILL_SENT):   (X,                         X),
    (RUNNING, DRAINING):    (X,                         X),
    (EXITED, NONE):         ((CLOSED, NONE, CLOSE),      X),
    (EXITED, PENDING):      ((CLOSED, PENDING, CLOSE),   X),
    (EXITED, TERM_SENT):    ((CLOSED, TERM_SENT, CLOSE), ABANDON_DUE),
    (EXITED, KILL_SENT):    ((CLOSED, KILL_SENT, CLOSE), ABANDON_DUE),
    (EXITED, DRAINING):     ((CLOSED, DRAINING, CLOSE),  X),
    (CLOSED, NONE):         (X,                         X),
    (CLOSED, PENDING):      (X,                         X),
    (CLOSED, TERM_SENT):    (X,                         X),
    (CLOSED, KILL_SENT):    (X,                         X),
    (CLOSED, DRAINING):     (X,                         X),
    (FAILED, NONE):         (X,                         X),
    (FAILED, PENDING):      (X,                         X),
    (FAILED, TERM_SENT):    (X,                         X),
    (FAILED, KILL_SENT):    (X,                         X),
    (FAILED, DRAINING):     (X,                         X),
}  # fmt: skip


@pytest.mark.parametrize(
    ("phase", "stop", "streams"),
    [
        pytest.param(p, s, streams, id=f"{p.name}-{s.name}-{'open' if streams else 'eof'}")
        for p, s, streams in itertools.product(Phase, Stop, [(), ("stdout",)])
    ],
)
def test_settle_reaches_the_written_fixed_point(
    phase: Phase, stop: Stop, streams: tuple[str, ...]
) -> None:
    expected = SETTLE_GRID[phase, stop][bool(streams)]
    life = life_in(phase, stop, streams)
    before = state_of(life)
    todo = life.settle()
    if expected is None:
        assert todo == []
        assert state_of(life) == before
    else:
        to_phase, to_stop, follow_ups = expected
        assert todo == list(follow_ups)
        assert state_of(life) == (to_phase, to_stop, *before[2:])
    assert life.settle() == []  # a fixed point: nothing fires again


# =================================================================================================
# the two flags
# =================================================================================================


@pytest.mark.parametrize("held", [False, True])
def test_hold_and_release_set_the_flag_from_either_state(held: bool) -> None:
    for act, to in [(ProcessLife.hold, True), (ProcessLife.release, False)]:
        life = life_in(RUNNING)
        life.held = held
        before = state_of(life)
        act(life)
        assert state_of(life) == (*before[:3], to, before[4])


@pytest.mark.parametrize(("paused", "wanted"), list(itertools.product([False, True], repeat=2)))
def test_set_paused_says_whether_it_changed(paused: bool, wanted: bool) -> None:
    life = life_in(RUNNING)
    life.paused = paused
    before = state_of(life)
    assert life.set_paused(wanted) is (paused != wanted)  # only then is an action due
    assert state_of(life) == (*before[:4], wanted)


# =================================================================================================
# a session's state
# =================================================================================================

REFUSED = "refused"  # the client's request fails with SESSION_ATTACHED; nothing changes
CREATE = (ATTACHED, (Do.HOLD_LIVE_IF_ACKS, Do.SYNC_PAUSED, Do.RECOUNT_HELD))
RESUME = (ATTACHED, (Do.CANCEL_EXPIRE, Do.HOLD_LIVE_IF_ACKS, Do.SYNC_PAUSED, Do.RECOUNT_HELD))
DETACH = (DETACHED, (Do.HOLD_LIVE, Do.SYNC_PAUSED, Do.RECOUNT_HELD, Do.SET_EXPIRE))
EXPIRE = (EXPIRED, (Do.STOP_ALL,))

# State -> the next state and follow-ups for each input, in `SessionInput`'s order; X:
# impossible (LocalProtocolError).
SESSION_GRID: dict[SessionState, tuple[tuple[SessionState, tuple[Do, ...]] | str | None, ...]] = {
    #          CREATED  RESUMED  DETACHED  EXPIRED
    NEW:      (CREATE,  X,       X,        X),
    ATTACHED: (X,       REFUSED, DETACH,   X),
    DETACHED: (X,       RESUME,  X,        EXPIRE),
    EXPIRED:  (X,       X,       X,        X),
}  # fmt: skip


@pytest.mark.parametrize(
    ("state", "event"),
    [
        pytest.param(s, e, id=f"{s.name}-{e.name}")
        for s, e in itertools.product(SessionState, SessionInput)
    ],
)
def test_each_session_state_and_input_moves_as_written_or_is_refused(
    state: SessionState, event: SessionInput
) -> None:
    expected = dict(zip(SessionInput, SESSION_GRID[state], strict=True))[event]
    life = SessionLife("s1")
    life.state = state
    life.conn = 5 if state is ATTACHED else None
    before = (life.state, life.conn)
    if expected is None:
        with pytest.raises(LocalProtocolError, match=f"{event.value} is impossible while"):
            life.event(event, CONN)
        assert (life.state, life.conn) == before
    elif expected == REFUSED:
        with pytest.raises(RpcError) as refused:
            life.event(event, CONN)
        assert refused.value.code == SESSION_ATTACHED
        assert refused.value.message == "session s1 is already attached to another connection"
        assert (life.state, life.conn) == before
    else:
        assert isinstance(expected, tuple)
        to_state, follow_ups = expected
        assert life.event(event, CONN) == follow_ups
        # Attached to the connection it was given; otherwise to none.
        assert (life.state, life.conn) == (to_state, CONN if to_state is ATTACHED else None)


# =================================================================================================
# every process follow-up the tables name has a way to be carried out
# =================================================================================================


def test_every_process_follow_up_written_here_is_carried_out_by_the_handlers() -> None:
    named = {do for todo in FOLLOW_UPS.values() if todo is not None for do in todo}
    for stops in STOP_GRID.values():
        named |= {do for cell in stops if cell is not None for do in cell[1]}
    for settled in SETTLE_GRID.values():
        named |= {do for end in settled if end is not None for do in end[2]}
    assert named == set(_FOLLOW_UPS)
