"""Shares of the server-wide caps per address (and token identity): one client cannot hold the
connections, processes or detached sessions the others need, and a single client sees the
caps it saw before."""

from __future__ import annotations

from execproto import CloseConnection, Config, Finalize, ProcessSpawned, Signal, Spawn

from .harness import CWD, Harness

ATTACKER, OTHER, HONEST = "127.0.0.2", "127.0.0.3", "127.0.0.1"


def closed(h: Harness) -> dict[int, CloseConnection]:
    return {a.conn: a for a in h.of_type(CloseConnection)}


def join(h: Harness, conn: int, peer: str, identity: str = "") -> None:
    h.connect(conn, peer, identity)
    h.handshake(conn)


def start(h: Harness, conn: int, process_id: str) -> dict[str, object]:
    """A `process/start`, spawned at once if it was not refused; returns its answer."""
    params = {"processId": process_id, "argv": ["sleep", "60"], "cwd": CWD, "env": {},
              "tty": False}
    spawns = len(h.of_type(Spawn))
    msg_id = h.request(conn, "process/start", params)
    if len(h.of_type(Spawn)) > spawns:
        proc = h.of_type(Spawn)[-1].proc
        h.feed(ProcessSpawned(proc=proc, pid=1000 + proc))
    response = h.response(conn, msg_id)
    assert response is not None
    return response


def error(response: dict[str, object]) -> str:
    assert "error" in response, response
    return str(response["error"]["message"])  # type: ignore[index]


# -- connections -------------------------------------------------------------------------------


def test_a_newcomer_from_another_address_takes_the_oldest_initialized_place_of_the_most() -> None:
    h = Harness(Config(max_connections=4))
    h.connect(1, ATTACKER)  # the oldest, but it has not initialized: not taken by this rule
    for conn in (2, 3, 4):
        join(h, conn, ATTACKER)
    h.advance(0.1)  # younger than MAKE_ROOM_AFTER: the first rule takes none
    h.connect(5, HONEST)
    assert list(closed(h)) == [2]
    assert closed(h)[2].code == 1013
    assert closed(h)[2].reason == ("too many connections from address 127.0.0.2: this one "
                                   "makes room for another client")
    h.handshake(5)
    assert "result" in start(h, 5, "p")
    h.disconnect(2)
    h.connect(6, ATTACKER)  # back for its place: the attacker's own address never yields to it
    assert list(closed(h)) == [2, 6]
    h.assert_replays()


def test_no_place_is_taken_from_an_address_within_its_half() -> None:
    h = Harness(Config(max_connections=4))
    for conn, peer in ((1, ATTACKER), (2, ATTACKER), (3, OTHER), (4, OTHER)):
        join(h, conn, peer)
    h.connect(5, HONEST)
    assert list(closed(h)) == [5]
    assert closed(h)[5].reason == "too many connections: at most 4"


def test_a_single_address_is_refused_past_the_cap_as_before() -> None:
    h = Harness(Config(max_connections=2))
    join(h, 1, HONEST)
    join(h, 2, HONEST)
    h.connect(3, HONEST)
    assert list(closed(h)) == [3]
    assert closed(h)[3].reason == "too many connections: at most 2"


def test_the_token_identity_is_a_second_key() -> None:
    h = Harness(Config(max_connections=2))
    join(h, 1, HONEST, identity="ci")
    join(h, 2, HONEST, identity="ci")
    h.connect(3, HONEST, identity="laptop")  # the same address, another token: ci yields
    assert list(closed(h)) == [1]
    assert "from token ci" in closed(h)[1].reason


# -- processes ---------------------------------------------------------------------------------


def test_one_address_runs_at_most_half_the_servers_processes() -> None:
    h = Harness(Config(max_processes=8, max_session_processes=2))
    for conn in (1, 2, 3):
        join(h, conn, ATTACKER)
    for n in range(4):
        assert "result" in start(h, 1 + n // 2, f"p{n}")
    assert error(start(h, 3, "p4")) == ("too many processes: one address runs at most 4 of the "
                                        "server's 8 at once; wait for some to close")
    join(h, 4, HONEST)
    assert "result" in start(h, 4, "q")
    h.assert_replays()


def test_a_single_session_may_still_take_what_a_session_may() -> None:
    # Half the server's would be 2: a session's own cap is never cut by the share.
    h = Harness(Config(max_processes=4, max_session_processes=4))
    join(h, 1, HONEST)
    for n in range(4):
        assert "result" in start(h, 1, f"p{n}")
    assert error(start(h, 1, "p4")).startswith("too many processes")


def full_of_detached(h: Harness) -> list[Spawn]:
    """Two addresses fill a server of 4 processes, 2 each, and leave."""
    for conn, peer in ((1, ATTACKER), (2, OTHER)):
        join(h, conn, peer)
        for n in range(2):
            assert "result" in start(h, conn, f"{peer}-{n}")
    spawns = h.of_type(Spawn)
    h.disconnect(1)
    h.disconnect(2)
    return spawns


def test_a_client_that_left_yields_its_oldest_process_to_another_address() -> None:
    h = Harness(Config(max_processes=4, max_session_processes=2))
    attacker, _, other, _ = full_of_detached(h)
    join(h, 3, HONEST)
    assert "result" in start(h, 3, "mine")  # at once: the terminated one no longer counts
    assert h.of_type(Signal) == [Signal(proc=attacker.proc, signal="TERM")]
    # The next takes from the address that now holds the most: the other one.
    assert "result" in start(h, 3, "mine too")
    assert h.of_type(Signal)[-1] == Signal(proc=other.proc, signal="TERM")
    # The reclaimed ends as a server deadline ends one, and its client can read why.
    h.exit(attacker.proc, -15)
    h.eof(attacker.proc, "stdout")
    h.eof(attacker.proc, "stderr")
    assert h.of_type(Finalize)[-1].timed_out
    h.connect(5, ATTACKER)
    h.handshake(5, resume=attacker.spec.session_id)
    read = h.call(5, "process/read", {"processId": attacker.spec.process_id})
    assert read["result"]["failure"].startswith("terminated while its session was detached")
    h.assert_replays()


def test_a_client_that_left_keeps_as_many_as_the_asker_holds() -> None:
    h = Harness(Config(max_processes=6, max_session_processes=2))  # 3 for an address
    for conn, peer in ((1, ATTACKER), (2, OTHER), (3, HONEST)):
        join(h, conn, peer)
        for n in range(2):
            assert "result" in start(h, conn, f"{n}")
    h.disconnect(1)
    join(h, 4, HONEST)
    assert error(start(h, 4, "more")).startswith("too many processes: this server runs at most")
    assert h.of_type(Signal) == []


def test_connected_clients_processes_are_never_taken() -> None:
    h = Harness(Config(max_processes=4, max_session_processes=2))
    for conn, peer in ((1, ATTACKER), (2, OTHER)):
        join(h, conn, peer)
        for n in range(2):
            assert "result" in start(h, conn, f"{n}")
    join(h, 3, HONEST)
    assert error(start(h, 3, "mine")).startswith("too many processes: this server runs at most")
    assert h.of_type(Signal) == []


# -- detached sessions -------------------------------------------------------------------------


def test_past_the_detached_sessions_cap_the_most_holding_address_loses_its_oldest() -> None:
    h = Harness(Config(max_detached_sessions=2))
    join(h, 1, ATTACKER)
    assert "result" in start(h, 1, "held")
    join(h, 2, ATTACKER)
    join(h, 3, HONEST)
    attacker_first = h.of_type(Spawn)[0]
    h.disconnect(1)
    h.advance(1)
    h.disconnect(2)
    h.disconnect(3)  # three detached: the attacker's oldest expires now, its process ended
    assert h.of_type(Signal) == [Signal(proc=attacker_first.proc, signal="TERM")]
    h.connect(4, ATTACKER)
    gone = h.call(4, "initialize", {"clientName": "t", "resumeSessionId": "session-1"})
    assert gone["error"]["message"] == "unknown session id session-1"
    for conn, session in ((5, "session-2"), (6, "session-3")):
        h.connect(conn, HONEST)
        assert "result" in h.handshake(conn, resume=session)
    h.assert_replays()


def test_a_single_address_past_the_detached_cap_loses_its_own_oldest() -> None:
    h = Harness(Config(max_detached_sessions=1))
    for conn in (1, 2):
        join(h, conn, HONEST)
        h.disconnect(conn)
    h.connect(3, HONEST)
    assert "error" in h.call(3, "initialize", {"clientName": "t", "resumeSessionId": "session-1"})
    h.connect(4, HONEST)
    assert "result" in h.handshake(4, resume="session-2")
