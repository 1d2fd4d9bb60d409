"""Caps on processes not yet closed: per session and per server, freed as processes close."""

from __future__ import annotations

from execproto import Config, Spawn

from .harness import CWD, Harness


def refused(h: Harness, conn: int, process_id: str) -> str | None:
    params = {"processId": process_id, "argv": ["true"], "cwd": CWD, "env": {}, "tty": False}
    spawns = len(h.of_type(Spawn))
    msg_id = h.request(conn, "process/start", params)
    response = h.response(conn, msg_id)
    if response is None:
        return None
    assert len(h.of_type(Spawn)) == spawns, "refused, yet spawned"
    assert response["error"]["code"] == -32600
    return str(response["error"]["message"])


def finish(h: Harness, proc: int) -> None:
    h.eof(proc, "stdout")
    h.eof(proc, "stderr")
    h.exit(proc, 0)


def test_a_session_runs_at_most_its_cap_and_gets_room_as_processes_close() -> None:
    h = Harness(Config(max_session_processes=2))
    h.connect(1)
    h.handshake(1)
    first = h.start(1, "a")
    h.start(1, "b")
    message = refused(h, 1, "c")
    assert message == ("too many processes: a session runs at most 2 at once; "
                       "wait for some to close")
    h.connect(2)  # another session is not affected
    h.handshake(2)
    h.start(2, "x")
    finish(h, first)  # closed (though still readable) no longer counts
    h.start(1, "c")
    h.assert_replays()


def test_the_server_runs_at_most_its_cap_across_sessions() -> None:
    h = Harness(Config(max_processes=2))
    for conn in (1, 2):
        h.connect(conn)
        h.handshake(conn)
    h.start(1, "a")
    second = h.start(2, "b")
    assert refused(h, 1, "c") == ("too many processes: this server runs at most 2 at once; "
                                  "wait for some to close")
    finish(h, second)
    h.start(1, "c")
