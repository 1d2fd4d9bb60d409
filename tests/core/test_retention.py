"""Retention: the output log's bounds, and a closed process readable until ``closed_ttl``.

The log keeps the newest bytes and chunks and reports what it dropped (``firstRetainedSeq``,
``droppedBytes``); the EVICT timer of `execproto._lifecycle` (*closed process evicted*) ends a
closed process's readability and frees its processId. Every world is checked when the test ends
(`lifecycle_world.World.check`).
"""

from __future__ import annotations

from collections.abc import Callable

from execproto import (
    Config,
    ConnectionOpened,
    MessageReceived,
    ProcessExited,
    ProcessSpawned,
    ServerCore,
    Spawn,
    StreamClosed,
    Tick,
)

from .harness import unb64
from .lifecycle_world import (
    EPS,
    INVALID_REQUEST,
    UNKNOWN_PROCESS,
    World,
    chunks,
    error_of,
    expected_read,
    finish,
    interrupt,
    read,
    run,
    terminate,
    unchecked_world,
    wire_chunk,
    write,
)

# =================================================================================================
# retention
# =================================================================================================


def test_retention_keeps_the_newest_bytes_and_reports_the_loss(
    make_world: Callable[..., World],
) -> None:
    w = make_world(Config(retention_bytes=10))
    proc = run(w)
    for i in range(1, 6):
        w.output(proc, "stdout", b"%d%d%d%d" % (i, i, i, i))
    # 20 bytes: only the newest 8 fit in 10.
    expected_chunks = [wire_chunk(4, "stdout", b"4444"), wire_chunk(5, "stdout", b"5555")]
    assert read(w) == expected_read(
        chunks=expected_chunks, nextSeq=6, firstRetainedSeq=4, droppedBytes=12
    )
    assert read(w, afterSeq=4)["chunks"] == expected_chunks[1:]
    assert read(w, afterSeq=1)["chunks"] == expected_chunks
    # Notifications carried everything.
    sent = [unb64(n["params"]["chunk"]) for n in w.notifications(1, "process/output")]
    assert sent == [b"1111", b"2222", b"3333", b"4444", b"5555"]
    finish(w, proc)
    assert read(w) == expected_read(
        chunks=expected_chunks,
        nextSeq=8,
        exited=True,
        exitCode=0,
        closed=True,
        firstRetainedSeq=4,
        droppedBytes=12,
    )


def test_retention_keeps_an_oversized_newest_chunk_whole(make_world: Callable[..., World]) -> None:
    w = make_world(Config(retention_bytes=4))
    proc = run(w)
    w.output(proc, "stdout", b"ab")
    w.output(proc, "stderr", b"0123456789")
    assert read(w) == expected_read(
        chunks=[wire_chunk(2, "stderr", b"0123456789")],
        nextSeq=3,
        firstRetainedSeq=2,
        droppedBytes=2,
    )
    w.output(proc, "stdout", b"c")
    assert read(w) == expected_read(
        chunks=[wire_chunk(3, "stdout", b"c")], nextSeq=4, firstRetainedSeq=3, droppedBytes=12
    )


def test_retention_bounds_the_chunk_count(make_world: Callable[..., World]) -> None:
    w = make_world(Config(retention_chunks=3))
    proc = run(w)
    for i in range(5):
        w.output(proc, "stdout", bytes([65 + i]))
    result = read(w)
    assert chunks(result) == [(3, "stdout", b"C"), (4, "stdout", b"D"), (5, "stdout", b"E")]
    assert (result["firstRetainedSeq"], result["droppedBytes"]) == (3, 2)


def test_retention_over_many_drops_stays_consistent(make_world: Callable[..., World]) -> None:
    w = make_world(Config(retention_chunks=8))
    proc = run(w)
    total = 2100  # well past the log's internal compaction point
    for i in range(1, total + 1):
        w.output(proc, "stdout", b"%c" % (48 + i % 10))
        if i in (1030, 1040):
            # Reads in between compactions see the same view.
            mid = read(w, afterSeq=i - 3)
            assert [c["seq"] for c in mid["chunks"]] == [i - 2, i - 1, i]
            assert (mid["firstRetainedSeq"], mid["droppedBytes"]) == (i - 7, i - 8)
    result = read(w)
    assert [c["seq"] for c in result["chunks"]] == list(range(total - 7, total + 1))
    assert (result["firstRetainedSeq"], result["droppedBytes"], result["nextSeq"]) == (
        total - 7,
        total - 8,
        total + 1,
    )
    tail = read(w, afterSeq=total - 3, maxBytes=2)
    assert [c["seq"] for c in tail["chunks"]] == [total - 2, total - 1]
    assert tail["nextSeq"] == total
    assert len(w.notifications(1, "process/output")) == total


def test_closed_process_is_readable_until_closed_ttl(make_world: Callable[..., World]) -> None:
    w = make_world(Config(closed_ttl=10.0))
    proc = run(w)
    w.output(proc, "stdout", b"keep")
    finish(w, proc, 2)
    closed = read(w)
    w.advance(10.0 - EPS)
    assert read(w) == closed
    assert read(w, waitMs=5000) == closed
    assert write(w, "p", b"x", "w1") == "stdinClosed"
    assert terminate(w) == {"running": False}


def test_closed_process_is_unknown_after_closed_ttl() -> None:
    w = unchecked_world(Config(closed_ttl=10.0))
    proc = run(w)
    finish(w, proc, 2)
    w.advance(10.0)
    msg_id = w.request(1, "process/read", {"processId": "p"})
    assert error_of(w, msg_id) == {"code": INVALID_REQUEST, "message": UNKNOWN_PROCESS.format("p")}
    # Everything of it is gone: writes, signals and terminates see an unknown process.
    assert write(w, "p", b"x", "w1") == "unknownProcess"
    assert terminate(w) == {"running": False}
    assert interrupt(w) == {}
    # And the id is free.
    new_proc = run(w)
    assert read(w) == expected_read()
    assert new_proc != proc
    w.check()


def test_eviction_timer_of_each_process_runs_from_its_own_close() -> None:
    w = unchecked_world(Config(closed_ttl=4.0))
    a = run(w, "a")
    b = run(w, "b")
    finish(w, a)
    w.advance(2)
    finish(w, b)
    w.advance(2)
    assert error_of(w, w.request(1, "process/read", {"processId": "a"}))["code"] == INVALID_REQUEST
    assert read(w, "b")["closed"] is True
    w.advance(2)
    assert error_of(w, w.request(1, "process/read", {"processId": "b"}))["code"] == INVALID_REQUEST
    w.check()


def test_closed_output_past_its_bound_evicts_the_longest_closed_early() -> None:
    """A client that starts processes and never reads: closed logs kept 1.5 GB in 9 s. Past
    ``max_closed_bytes`` in all, those closed longest ago stop being readable at once."""
    w = unchecked_world(Config(closed_ttl=30.0, retention_bytes=64, max_closed_bytes=100))
    procs = {name: run(w, name) for name in "abc"}
    for name, proc in procs.items():
        w.output(proc, "stdout", name.encode() * 40)
    finish(w, procs["a"])
    finish(w, procs["b"])  # 80 bytes kept
    assert read(w, "a")["closed"] is True
    evicted = w.core.core._finalized[procs["a"]]  # its log, which a stale deadline holds
    finish(w, procs["c"])  # 120: past the bound, "a" goes, 80 stay
    assert evicted.log.retained_bytes == 0 and len(evicted.log) == 0
    assert error_of(w, w.request(1, "process/read", {"processId": "a"}))["code"] == INVALID_REQUEST
    assert read(w, "b")["closed"] is True and read(w, "c")["closed"] is True
    assert run(w, "a") != procs["a"]  # its id is free again
    w.advance(30)  # the others' own timers still evict them, once
    for name in "bc":
        assert error_of(w, w.request(1, "process/read", {"processId": name}))["code"] == (
            INVALID_REQUEST)
    w.check()


def test_eviction_tick_of_a_bare_core_frees_the_process_id() -> None:
    core = ServerCore(Config(closed_ttl=1.0))
    core.handle(ConnectionOpened(conn=1, session_id="s"), 0)
    core.handle(
        MessageReceived(conn=1, data='{"id":1,"method":"initialize","params":{"clientName":"c"}}'),
        0,
    )
    core.handle(MessageReceived(conn=1, data='{"method":"initialized"}'), 0)
    start = (
        '{"id":2,"method":"process/start",'
        '"params":{"processId":"p","argv":["true"],"cwd":"file:///","env":{},"tty":false}}'
    )
    (spawn,) = core.handle(MessageReceived(conn=1, data=start), 0)
    assert isinstance(spawn, Spawn)
    core.handle(ProcessSpawned(proc=spawn.proc, pid=1), 0)
    core.handle(ProcessExited(proc=spawn.proc, returncode=0), 0)
    core.handle(StreamClosed(proc=spawn.proc, stream="stdout"), 0)
    core.handle(StreamClosed(proc=spawn.proc, stream="stderr"), 0)
    assert core.handle(Tick(), 1.0) == []  # evicted: nothing to say, nothing raised
    reuse = start.replace('"id":2', '"id":3')
    (again,) = core.handle(MessageReceived(conn=1, data=reuse), 1.0)
    assert isinstance(again, Spawn) and again.proc != spawn.proc
