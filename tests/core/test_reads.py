"""Reads: ``process/read`` at once and as a long poll (`read_ready`, the READ timer).

`execproto._lifecycle`'s reads: ``afterSeq`` and ``maxBytes``, when a read is answered at once
and when it waits, what wakes a waiting read (output, the exit, the close, its deadline), and a
waiting read dropped with its connection. Every world is checked when the test ends
(`lifecycle_world.World.check`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .lifecycle_world import (
    EPS,
    INVALID_REQUEST,
    UNKNOWN_PROCESS,
    World,
    begin,
    chunks,
    close_all,
    error_of,
    expected_read,
    finish,
    park,
    read,
    result_of,
    run,
    spawned,
    wire_chunk,
)

# =================================================================================================
# process/read
# =================================================================================================


def _three_chunks(w: World) -> int:
    """seq 1: 3 bytes stdout, seq 2: 4 bytes stderr, seq 3: 5 bytes stdout."""
    proc = run(w)
    w.output(proc, "stdout", b"aaa")
    w.output(proc, "stderr", b"bbbb")
    w.output(proc, "stdout", b"ccccc")
    return proc


def test_read_after_seq_defaults_to_zero_and_returns_later_chunks(w: World) -> None:
    _three_chunks(w)
    everything = [
        wire_chunk(1, "stdout", b"aaa"),
        wire_chunk(2, "stderr", b"bbbb"),
        wire_chunk(3, "stdout", b"ccccc"),
    ]
    assert read(w) == expected_read(chunks=everything, nextSeq=4)
    assert read(w, afterSeq=0) == expected_read(chunks=everything, nextSeq=4)
    assert read(w, afterSeq=1)["chunks"] == everything[1:]
    assert read(w, afterSeq=2)["chunks"] == everything[2:]
    assert read(w, afterSeq=3) == expected_read(nextSeq=4)
    assert read(w, afterSeq=99) == expected_read(nextSeq=4)


@pytest.mark.parametrize(
    ("after_seq", "max_bytes", "seqs", "next_seq"),
    [
        (0, 0, [1], 2),  # at least one chunk, even over the limit
        (0, 1, [1], 2),
        (0, 3, [1], 2),
        (0, 6, [1], 2),  # 3 + 4 = 7 would exceed: stop before chunk 2
        (0, 7, [1, 2], 3),
        (0, 11, [1, 2], 3),
        (0, 12, [1, 2, 3], 4),  # exactly all: not cut short, the process's next seq
        (0, 10**6, [1, 2, 3], 4),
        (1, 4, [2], 3),
        (1, 8, [2], 3),
        (1, 9, [2, 3], 4),
        (2, 1, [3], 4),  # the last chunk, alone over the limit
        (3, 1, [], 4),
    ],
)
def test_read_max_bytes(
    w: World, after_seq: int, max_bytes: int, seqs: list[int], next_seq: int
) -> None:
    _three_chunks(w)
    result = read(w, afterSeq=after_seq, maxBytes=max_bytes)
    assert [c["seq"] for c in result["chunks"]] == seqs
    assert result["nextSeq"] == next_seq


def test_read_max_bytes_cut_short_before_the_exit(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"12345")
    w.output(proc, "stdout", b"67890")
    w.exit(proc, 0)
    cut = read(w, maxBytes=5)
    assert chunks(cut) == [(1, "stdout", b"12345")] and cut["nextSeq"] == 2
    rest = read(w, afterSeq=1, maxBytes=5)
    assert chunks(rest) == [(2, "stdout", b"67890")] and rest["nextSeq"] == 4
    assert rest["exited"] is True and rest["exitCode"] == 0


@pytest.mark.parametrize("wait", [{}, {"waitMs": 0}])
def test_read_without_wait_returns_at_once(w: World, wait: dict[str, Any]) -> None:
    run(w)
    assert read(w, **wait) == expected_read()
    assert read(w, afterSeq=5, **wait) == expected_read()


def test_read_returns_at_once_when_there_are_chunks(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"x")
    assert chunks(read(w, waitMs=60_000)) == [(1, "stdout", b"x")]


def test_read_returns_at_once_when_closed(w: World) -> None:
    proc = run(w)
    finish(w, proc, 1)
    assert read(w, afterSeq=2, waitMs=60_000) == expected_read(
        nextSeq=3, exited=True, exitCode=1, closed=True, firstRetainedSeq=3
    )
    assert read(w, afterSeq=50, waitMs=60_000)["closed"] is True


def test_read_returns_at_once_when_exited_and_behind_the_newest_event(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"x")
    w.exit(proc, 0)  # seq 2
    behind = read(w, afterSeq=1, waitMs=60_000)
    assert behind == expected_read(nextSeq=3, exited=True, exitCode=0, firstRetainedSeq=1)
    w.output(proc, "stderr", b"late")  # seq 3
    assert chunks(read(w, afterSeq=2, waitMs=60_000)) == [(3, "stderr", b"late")]


def test_read_waits_until_its_deadline_then_answers_empty(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"x")
    msg_id = park(w, afterSeq=1, waitMs=250)
    w.advance(0.25 - EPS)
    assert w.response(1, msg_id) is None
    w.advance(EPS)
    assert result_of(w, msg_id) == expected_read(nextSeq=2, firstRetainedSeq=1)
    w.output(proc, "stdout", b"y")  # answered once only (checked at teardown)


def test_read_on_a_starting_process_waits_and_times_out(w: World) -> None:
    _, spawn = begin(w)
    msg_id = park(w, waitMs=500)
    spawned(w, spawn.proc)  # the spawn alone is no event
    assert w.response(1, msg_id) is None
    w.advance(0.5)
    assert result_of(w, msg_id) == expected_read()


def test_waiting_read_is_answered_by_new_output(w: World) -> None:
    proc = run(w)
    w.output(proc, "stdout", b"old")
    msg_id = park(w, afterSeq=1, waitMs=5000)
    w.advance(1)
    w.output(proc, "stderr", b"new")
    assert result_of(w, msg_id) == expected_read(
        chunks=[wire_chunk(2, "stderr", b"new")], nextSeq=3, firstRetainedSeq=1
    )
    w.advance(10)


def test_waiting_read_is_answered_by_the_exit(w: World) -> None:
    proc = run(w)
    msg_id = park(w, waitMs=5000)
    w.exit(proc, 4)
    assert result_of(w, msg_id) == expected_read(
        nextSeq=2, exited=True, exitCode=4, firstRetainedSeq=2
    )


def test_waiting_read_at_the_exit_is_answered_by_the_close(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    msg_id = park(w, afterSeq=1, waitMs=5000)
    w.eof(proc, "stdout")
    assert w.response(1, msg_id) is None
    w.eof(proc, "stderr")
    assert result_of(w, msg_id) == expected_read(
        nextSeq=3, exited=True, exitCode=0, closed=True, firstRetainedSeq=3
    )


def test_waiting_read_with_closed_streams_is_answered_by_exit_and_close_together(w: World) -> None:
    proc = run(w)
    close_all(w, proc)
    msg_id = park(w, waitMs=5000)
    w.exit(proc, 0)
    assert result_of(w, msg_id) == expected_read(
        nextSeq=3, exited=True, exitCode=0, closed=True, firstRetainedSeq=3
    )


def test_reader_at_the_cursor_after_exit_waits_for_late_output(w: World) -> None:
    proc = run(w)
    w.exit(proc, 0)
    msg_id = park(w, afterSeq=1, waitMs=5000)
    w.advance(2)
    assert w.response(1, msg_id) is None
    w.output(proc, "stdout", b"late")
    assert result_of(w, msg_id) == expected_read(
        chunks=[wire_chunk(2, "stdout", b"late")],
        nextSeq=3,
        exited=True,
        exitCode=0,
        firstRetainedSeq=2,
    )
    again = park(w, afterSeq=2, waitMs=1000)
    w.advance(1)
    assert result_of(w, again) == expected_read(
        nextSeq=3, exited=True, exitCode=0, firstRetainedSeq=2
    )


def test_several_concurrent_readers_on_one_process(w: World) -> None:
    proc = run(w)
    a = park(w, waitMs=10_000)
    b = park(w, maxBytes=1, waitMs=10_000)
    ahead = park(w, afterSeq=5, waitMs=10_000)  # a cursor past anything yet
    short = park(w, waitMs=250)
    w.advance(0.25)
    assert result_of(w, short) == expected_read()
    assert all(w.response(1, r) is None for r in (a, b, ahead))
    w.output(proc, "stdout", b"xy")
    assert (
        result_of(w, a)
        == result_of(w, b)
        == expected_read(chunks=[wire_chunk(1, "stdout", b"xy")], nextSeq=2)
    )
    assert w.response(1, ahead) is None
    c = park(w, afterSeq=1, waitMs=10_000)
    w.output(proc, "stdout", b"z1")
    w.output(proc, "stdout", b"z2")
    assert chunks(result_of(w, c)) == [(2, "stdout", b"z1")]
    w.exit(proc, 0)  # seq 4: still not past the cursor at 5
    assert w.response(1, ahead) is None
    w.output(proc, "stdout", b"late")  # seq 5
    assert w.response(1, ahead) is None
    w.output(proc, "stdout", b"later")  # seq 6
    assert chunks(result_of(w, ahead)) == [(6, "stdout", b"later")]


def test_reader_ahead_of_everything_is_answered_by_the_close(w: World) -> None:
    proc = run(w)
    ahead = park(w, afterSeq=10, waitMs=10_000)
    finish(w, proc)
    assert result_of(w, ahead) == expected_read(
        nextSeq=3, exited=True, exitCode=0, closed=True, firstRetainedSeq=3
    )


@pytest.mark.parametrize("wait", [0, 1000])
def test_read_of_an_unknown_process(w: World, wait: int) -> None:
    run(w, "p")
    msg_id = w.request(1, "process/read", {"processId": "q", "waitMs": wait})
    assert error_of(w, msg_id) == {"code": INVALID_REQUEST, "message": UNKNOWN_PROCESS.format("q")}


def test_read_fields_through_the_lifecycle(w: World) -> None:
    proc = run(w)
    assert read(w) == expected_read()
    w.output(proc, "stdout", b"a")
    assert read(w) == expected_read(chunks=[wire_chunk(1, "stdout", b"a")], nextSeq=2)
    w.exit(proc, -9)
    assert read(w, afterSeq=1) == expected_read(
        nextSeq=3, exited=True, exitCode=137, firstRetainedSeq=1
    )
    close_all(w, proc)
    assert read(w) == expected_read(
        chunks=[wire_chunk(1, "stdout", b"a")],
        nextSeq=4,
        exited=True,
        exitCode=137,
        closed=True,
        firstRetainedSeq=1,
    )


def test_pending_read_is_dropped_with_its_connection(make_world: Callable[..., World]) -> None:
    w = make_world()
    w.gapless = False
    proc = run(w)
    park(w, waitMs=1000)
    w.disconnect(1)
    assert w.output(proc, "stdout", b"unseen") == []
    assert w.advance(2) == []
