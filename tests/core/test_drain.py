"""Drain: the server stops taking new work and goes on serving what it has."""

from __future__ import annotations

from execproto import CloseConnection, Drain, ProcessExited, StreamClosed

from .harness import Harness, unb64


def test_a_drain_refuses_new_processes_and_serves_the_running_ones_to_their_end() -> None:
    h = Harness()
    h.connect(1)
    h.handshake(1)
    proc = h.start(1, "running")
    h.feed(Drain())
    assert h.core.core.draining and not h.core.core.idle
    refused = h.call(1, "process/start", {"processId": "new", "argv": ["true"],
                                          "cwd": "file:///tmp", "env": {}, "tty": False})
    assert refused["error"]["code"] == -32600
    assert "draining" in refused["error"]["message"]
    # The running process's output is still read, and it is still stopped on request.
    h.output(proc, "stdout", b"late output")
    read = h.call(1, "process/read", {"processId": "running", "afterSeq": 0})
    assert [unb64(c["chunk"]) for c in read["result"]["chunks"]] == [b"late output"]
    assert "result" in h.call(1, "environment/info")
    h.feed(ProcessExited(proc=proc, returncode=0))
    h.feed(StreamClosed(proc=proc, stream="stdout"))
    h.feed(StreamClosed(proc=proc, stream="stderr"))
    assert h.core.core.idle  # what the adapter waits for before its Shutdown
    h.assert_replays()


def test_a_connection_that_arrives_during_a_drain_is_closed_going_away() -> None:
    h = Harness()
    h.connect(1)
    h.handshake(1)
    h.feed(Drain())
    h.connect(2)
    closes = [a for a in h.actions if isinstance(a, CloseConnection)]
    assert [(c.conn, c.code) for c in closes] == [(2, 1001)]
    assert "result" in h.call(1, "environment/info")  # the one it had goes on
