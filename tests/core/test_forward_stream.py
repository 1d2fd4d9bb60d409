"""`ForwardStream` alone, as h2's state machine tests do: every input in every phase either
moves the stream to a defined state or is refused (`LocalProtocolError`), and a drawn run of
inputs keeps its counts true to a plain model: the window, the writes answered once each and
in order, done only when both sides have ended and everything is written."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execproto import LocalProtocolError
from execproto._forward_stream import WINDOW_BYTES, WINDOW_CHUNKS, ForwardStream, Phase


def fresh() -> ForwardStream:
    return ForwardStream(1, 1, 1, "s", ("127.0.0.1", 80), "open")


def in_phase(phase: Phase) -> ForwardStream:
    stream = fresh()
    if phase is not Phase.CONNECTING:
        stream.connected()
    if phase is Phase.CLOSED:
        stream.close()
    return stream


INPUTS: dict[str, Any] = {
    "connected": lambda s: s.connected(),
    "rerouted": lambda s: s.rerouted("host"),
    "received": lambda s: s.received(3),
    "ended": lambda s: s.ended(),
    "written": lambda s: s.written(0),
    "write": lambda s: s.write("w", 3, False),
}
# Which inputs each phase takes.
ALLOWED = {
    Phase.CONNECTING: {"connected", "rerouted"},
    Phase.OPEN: {"received", "ended", "written", "write"},
    Phase.CLOSED: set(),
}


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("name", list(INPUTS))
def test_every_input_in_every_phase_is_taken_or_refused(phase: Phase, name: str) -> None:
    stream = in_phase(phase)
    if name in ALLOWED[phase]:
        INPUTS[name](stream)
        assert stream.phase in (Phase.OPEN, phase)
    else:
        with pytest.raises(LocalProtocolError):
            INPUTS[name](stream)
        assert stream.phase is phase


def test_more_written_than_asked_is_refused() -> None:
    stream = in_phase(Phase.OPEN)
    stream.write("a", 2, False)
    with pytest.raises(LocalProtocolError):
        stream.written(3)


def test_data_after_eof_and_eof_twice_are_refused() -> None:
    stream = in_phase(Phase.OPEN)
    stream.ended()
    with pytest.raises(LocalProtocolError):
        stream.received(1)
    with pytest.raises(LocalProtocolError):
        stream.ended()


def test_close_hands_back_the_open_call_or_the_writes() -> None:
    assert fresh().close() == ["open"]
    stream = in_phase(Phase.OPEN)
    stream.write("a", 2, False)
    stream.write("b", 0, True)
    assert stream.close() == ["a", "b"]
    assert stream.phase is Phase.CLOSED and stream.backlog == 0


step = st.one_of(
    st.tuples(st.just("receive"), st.integers(0, WINDOW_BYTES // 3)),
    st.tuples(st.just("ack"), st.integers(0, 40)),
    st.tuples(st.just("write"), st.integers(0, 10)),
    st.tuples(st.just("written"), st.integers(0, 15)),
    st.tuples(st.just("eof"), st.just(0)),
    st.tuples(st.just("their_eof"), st.just(0)),
    st.tuples(st.just("blocked"), st.booleans()),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=60))
def test_a_drawn_run_keeps_to_the_model(steps: list[tuple[str, Any]]) -> None:
    stream = in_phase(Phase.OPEN)
    sent: list[tuple[int, int]] = []  # (seq, size) unacknowledged, the model's
    writes: list[list[Any]] = []  # [id, remaining]
    answered: list[int] = []
    blocked = paused = False
    ids = 0
    for kind, value in steps:
        if kind == "receive" and not stream.their_eof:
            seq = stream.received(value)
            assert seq == (sent[-1][0] + 1 if sent else stream.seq)
            sent.append((seq, value))
        elif kind == "ack":
            stream.acked(value)
            sent = [(seq, size) for seq, size in sent if seq > value]
        elif kind == "write" and not stream.our_eof:
            ids += 1
            whole = stream.write(ids, value, False)
            if whole:
                answered.append(ids)
            else:
                writes.append([ids, value])
        elif kind == "written":
            size = min(value, stream.backlog)
            done = stream.written(size)
            while writes and size >= writes[0][1]:
                size -= writes[0][1]
                answered.append(writes.pop(0)[0])
            if writes:
                writes[0][1] -= size
            assert done == answered[len(answered) - len(done):]
        elif kind == "eof" and not stream.our_eof:
            ids += 1
            if stream.write(ids, 0, True):
                answered.append(ids)
            else:
                writes.append([ids, 0])
        elif kind == "their_eof" and not stream.their_eof:
            stream.ended()
        elif kind == "blocked":
            blocked = value
        change = stream.pause_change(blocked)
        if change is not None:
            assert change != paused
            paused = change
        assert stream.unacked_bytes == sum(size for _, size in sent)
        assert stream.backlog == sum(remaining for _, remaining in writes)
        full = stream.unacked_bytes >= WINDOW_BYTES or len(sent) >= WINDOW_CHUNKS
        if not stream.their_eof:
            assert paused == (blocked or full)
        assert stream.done == (stream.their_eof and stream.our_eof and not writes)
        assert answered == sorted(answered) and len(set(answered)) == len(answered)
