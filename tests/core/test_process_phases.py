"""The process phases after the spawn: RUNNING --exited--> EXITED --last stream at EOF--> CLOSED.

`execproto._lifecycle`'s `PROCESS_EVENTS` and its state-triggered CLOSE rule: every event
takes the next seq and ``process/closed`` is last, streams and exit in either order, exit code
mapping, and the (phase, input) pairs that are adapter bugs (`LocalProtocolError`) or are
ignored after Finalize. Every world is checked when the test ends (`lifecycle_world.World.check`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from execproto import (
    Event,
    Finalize,
    LocalProtocolError,
    OutputReceived,
    ProcessExited,
    ProcessSpawned,
    SpawnFailed,
    StreamClosed,
)

from .harness import b64
from .lifecycle_world import (
    SPAWN_ERROR,
    World,
    begin,
    events,
    expected_read,
    finalizes,
    finish,
    read,
    run,
    spawned,
)

# =================================================================================================
# events and seq
# =================================================================================================


def test_every_event_takes_the_next_seq_and_closed_is_last(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"out1")
    w.output(proc, "stderr", b"err1")
    w.output(proc, "stdout", b"\x00\xffbinary")
    w.eof(proc, "stderr")
    w.exit(proc, 3)
    w.output(proc, "stdout", b"late")
    assert finalizes(w, proc) == []
    w.eof(proc, "stdout")
    assert [n["params"] for n in w.notifications(1)] == [
        {"processId": "p", "stream": "stdout", "seq": 1, "chunk": b64(b"out1")},
        {"processId": "p", "stream": "stderr", "seq": 2, "chunk": b64(b"err1")},
        {"processId": "p", "stream": "stdout", "seq": 3, "chunk": b64(b"\x00\xffbinary")},
        {"processId": "p", "seq": 4, "exitCode": 3, "sandboxDenied": False},
        {"processId": "p", "stream": "stdout", "seq": 5, "chunk": b64(b"late")},
        {"processId": "p", "seq": 6},
    ]
    assert [n["method"] for n in w.notifications(1)] == ["process/output"] * 3 + [
        "process/exited",
        "process/output",
        "process/closed",
    ]
    assert all(n["jsonrpc"] == "2.0" and "id" not in n for n in w.notifications(1))
    assert w.actions[-1] == Finalize(proc=proc, status="completed", exit_code=3, timed_out=False)


def test_tty_uses_only_the_pty_stream(w: World) -> None:
    proc = run(w, "t", tty=True)
    w.output(proc, "pty", b"$ ")
    w.exit(proc, 0)
    assert finalizes(w, proc) == []
    w.eof(proc, "pty")
    assert events(w, "t") == [("output", 1), ("exited", 2), ("closed", 3)]
    assert w.notifications(1)[0]["params"]["stream"] == "pty"
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=0, timed_out=False)
    ]


@pytest.mark.parametrize(
    ("tty", "make_event"),
    [
        pytest.param(
            True, lambda p: OutputReceived(proc=p, stream="stdout", data=b"x"), id="stdout-on-tty"
        ),
        pytest.param(True, lambda p: StreamClosed(proc=p, stream="stderr"), id="stderr-eof-on-tty"),
        pytest.param(
            False, lambda p: OutputReceived(proc=p, stream="pty", data=b"x"), id="pty-on-pipes"
        ),
        pytest.param(
            False, lambda p: OutputReceived(proc=p, stream="bogus", data=b"x"), id="bogus-stream"
        ),
        pytest.param(False, lambda p: StreamClosed(proc=p, stream="pty"), id="pty-eof-on-pipes"),
    ],
)
def test_wrong_stream_is_a_local_protocol_error(
    w: World, tty: bool, make_event: Callable[[int], Event]
) -> None:
    proc = run(w, tty=tty)
    with pytest.raises(LocalProtocolError):
        w.feed(make_event(proc))


@pytest.mark.parametrize("exited_first", [False, True])
def test_output_after_the_streams_eof_is_a_local_protocol_error(
    w: World, exited_first: bool
) -> None:
    proc = run(w)
    if exited_first:
        w.exit(proc, 0)
    w.eof(proc, "stderr")
    w.output(proc, "stdout", b"still open")
    with pytest.raises(LocalProtocolError):
        w.output(proc, "stderr", b"after eof")


def test_an_empty_chunk_takes_no_seq_and_sends_nothing(w: World) -> None:
    proc = run(w)
    assert w.output(proc, "stdout", b"") == []
    w.output(proc, "stdout", b"x")
    finish(w, proc)
    assert events(w) == [("output", 1), ("exited", 2), ("closed", 3)]


def test_eof_twice_is_a_local_protocol_error(w: World) -> None:
    proc = run(w)
    w.eof(proc, "stdout")
    with pytest.raises(LocalProtocolError):
        w.eof(proc, "stdout")


def test_exit_twice_is_a_local_protocol_error(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    with pytest.raises(LocalProtocolError):
        w.exit(proc, 1)


@pytest.mark.parametrize(
    "make_event",
    [
        pytest.param(lambda p: OutputReceived(proc=p, stream="stdout", data=b"x"), id="output"),
        pytest.param(lambda p: StreamClosed(proc=p, stream="stdout"), id="eof"),
        pytest.param(lambda p: ProcessExited(proc=p, returncode=0), id="exit"),
    ],
)
def test_process_events_before_the_spawn_are_local_protocol_errors(
    w: World, make_event: Callable[[int], Event]
) -> None:
    _, spawn = begin(w)
    with pytest.raises(LocalProtocolError):
        w.feed(make_event(spawn.proc))


def test_spawned_after_exit_is_a_local_protocol_error(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    with pytest.raises(LocalProtocolError):
        spawned(w, proc)


def test_streams_closed_before_the_exit_close_right_after_it(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"bye")
    w.eof(proc, "stdout")
    w.eof(proc, "stderr")
    w.advance(100)  # it keeps running with both pipes closed
    assert finalizes(w, proc) == [] and events(w) == [("output", 1)]
    assert read(w, afterSeq=1, waitMs=0) == expected_read(nextSeq=2)
    actions = w.exit(proc, 0)
    assert events(w) == [("output", 1), ("exited", 2), ("closed", 3)]
    assert actions[-1] == Finalize(proc=proc, status="completed", exit_code=0, timed_out=False)
    assert read(w, afterSeq=1) == expected_read(
        nextSeq=4, exited=True, exitCode=0, closed=True, firstRetainedSeq=1
    )


@pytest.mark.parametrize(
    ("returncode", "exit_code"),
    [(0, 0), (1, 1), (7, 7), (255, 255), (-9, 137), (-15, 143), (-2, 130), (-1, 129)],
)
def test_exit_code_mapping(w: World, returncode: int, exit_code: int) -> None:
    proc = run(w)
    finish(w, proc, returncode)
    assert w.notifications(1, "process/exited")[0]["params"]["exitCode"] == exit_code
    assert read(w)["exitCode"] == exit_code
    assert finalizes(w, proc) == [
        Finalize(proc=proc, status="completed", exit_code=exit_code, timed_out=False)
    ]


def test_events_for_a_finalized_process_are_ignored(w: World) -> None:
    proc = run(w)
    finish(w, proc)
    _, failed = begin(w, "f")
    w.feed(SpawnFailed(proc=failed.proc, error=SPAWN_ERROR))
    for handle in (proc, failed.proc):
        for event in (
            OutputReceived(proc=handle, stream="stdout", data=b"queued"),
            StreamClosed(proc=handle, stream="stdout"),
            StreamClosed(proc=handle, stream="stdout"),
            ProcessExited(proc=handle, returncode=1),
            ProcessSpawned(proc=handle, pid=1),
            SpawnFailed(proc=handle, error="late"),
        ):
            assert w.feed(event) == []
    assert events(w) == [("exited", 1), ("closed", 2)]
    assert read(w)["exitCode"] == 0


@pytest.mark.parametrize(
    "make_event",
    [
        pytest.param(lambda p: ProcessSpawned(proc=p, pid=1), id="spawned"),
        pytest.param(lambda p: SpawnFailed(proc=p, error="x"), id="spawn-failed"),
        pytest.param(lambda p: OutputReceived(proc=p, stream="stdout", data=b"x"), id="output"),
        pytest.param(lambda p: StreamClosed(proc=p, stream="stdout"), id="eof"),
        pytest.param(lambda p: ProcessExited(proc=p, returncode=0), id="exit"),
    ],
)
@pytest.mark.parametrize("handle", [0, -1, 2, 10**9])
def test_events_for_a_handle_never_issued_are_local_protocol_errors(
    w: World, make_event: Callable[[int], Event], handle: int
) -> None:
    run(w)  # handle 1 is issued; 2 is not yet
    with pytest.raises(LocalProtocolError):
        w.feed(make_event(handle))
