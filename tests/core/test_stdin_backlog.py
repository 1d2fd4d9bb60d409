"""Stdin a process does not read: bounded, and paced as the reference paces it.

The adapter reports what reached the pipe (`StdinWritten`). Past ``max_stdin_backlog`` not yet
written, a write waits unanswered until the process reads, in order; as much again may wait;
past that, or past ``max_stdin_total`` for the server, a write is refused. A process that
never read its stdin took +1 GB before; a client that waits for each answer now goes at the
process's pace. At the exit, what waits is answered ``stdinClosed``.
"""

from __future__ import annotations

import pytest

from execproto import Config, LocalProtocolError, StdinWritten

from .harness import b64
from .lifecycle_world import World, error_of, finish, run, unchecked_world, write, written

CAP = 100


def world(**extra: int) -> World:
    return unchecked_world(Config(max_stdin_backlog=CAP, **extra))


def request_write(w: World, data: bytes, write_id: str, **extra: object) -> int:
    return w.request(1, "process/write", {"processId": "p", "chunk": b64(data),
                                          "writeId": write_id, **extra})


def test_writes_past_the_backlog_wait_for_the_process_to_read_in_order() -> None:
    w = world()
    proc = run(w, pipeStdin=True)
    assert write(w, "p", b"a" * CAP, "w1") == "accepted"  # up to the backlog, at once
    second = request_write(w, b"b" * 60, "w2")
    third = request_write(w, b"c" * 30, "w3", closeStdin=True)
    assert w.response(1, second) is None and w.response(1, third) is None
    assert len(written(w, proc)) == 1  # nothing more given to the adapter
    assert write(w, "p", b"d", "w4") == "stdinClosed"  # the close is promised
    assert write(w, "p", b"b" * 60, "w2") == "accepted"  # a retry of the one waiting
    w.feed(StdinWritten(proc=proc, size=50))  # 50 queued: 60 more would pass the backlog
    assert w.response(1, second) is None
    w.feed(StdinWritten(proc=proc, size=50))  # all read: both go, in order, close last
    assert w.response(1, second)["result"] == {"status": "accepted"}
    assert w.response(1, third)["result"] == {"status": "accepted"}
    assert [type(a).__name__ for a in written(w, proc)] == [
        "WriteStdin", "WriteStdin", "WriteStdin", "CloseStdin"]
    assert [a.data for a in written(w, proc)[1:3]] == [b"b" * 60, b"c" * 30]


def test_one_write_larger_than_the_backlog_goes_when_nothing_is_queued() -> None:
    w = world()
    run(w, pipeStdin=True)
    assert write(w, "p", b"x" * (3 * CAP), "big") == "accepted"


def test_past_what_may_wait_a_write_is_refused() -> None:
    w = world()
    proc = run(w, pipeStdin=True)
    write(w, "p", b"a" * CAP, "w1")
    request_write(w, b"b" * 80, "w2")  # waits
    refused = request_write(w, b"c" * 30, "w3")  # 110 would wait
    assert error_of(w, refused)["code"] == -32600
    assert "is not reading its stdin" in error_of(w, refused)["message"]
    w.feed(StdinWritten(proc=proc, size=CAP))
    assert write(w, "p", b"c" * 10, "w3") == "accepted"  # once it reads, the same id goes


def test_past_the_servers_total_a_write_is_refused() -> None:
    w = world(max_stdin_total=150)
    for name in ("p", "q"):
        run(w, name, pipeStdin=True)
        write(w, name, b"a" * CAP, f"{name}1")  # 200 queued in all
    refused = w.request(1, "process/write", {"processId": "q", "chunk": b64(b"b"),
                                             "writeId": "q2"})
    assert "on this server" in error_of(w, refused)["message"]


def test_when_the_process_closes_its_stdin_what_waits_is_answered_stdin_closed() -> None:
    w = world()
    proc = run(w, pipeStdin=True)
    write(w, "p", b"a" * CAP, "w1")
    waiting = request_write(w, b"b" * 50, "w2")
    w.feed(StdinWritten(proc=proc, size=CAP, closed=True))  # EPIPE: dropped, and no more
    assert w.response(1, waiting)["result"] == {"status": "stdinClosed"}
    assert write(w, "p", b"c", "w3") == "stdinClosed"


def test_at_the_exit_what_waits_is_answered_stdin_closed_and_counts_no_more() -> None:
    w = world(max_stdin_total=250)
    proc = run(w, pipeStdin=True)
    write(w, "p", b"a" * CAP, "w1")
    waiting = request_write(w, b"b" * 50, "w2")
    finish(w, proc)
    assert w.response(1, waiting)["result"] == {"status": "stdinClosed"}
    w.feed(StdinWritten(proc=proc, size=CAP))  # late, after the exit: ignored
    run(w, "q", pipeStdin=True)
    assert write(w, "q", b"c" * CAP, "q1") == "accepted"  # the server's total is free again
    w2 = world()
    proc2 = run(w2, pipeStdin=True)
    write(w2, "p", b"a" * 10, "w1")
    with pytest.raises(LocalProtocolError):
        w2.feed(StdinWritten(proc=proc2, size=11))  # more than was asked for: an adapter bug
