"""A server with few descriptors (a low ``ulimit -n``): one client taking all it may still
leaves another room to connect, read files and, as soon as one closes, start a process."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest
from wsproto.utilities import LocalProtocolError

from execproto import Config
from execproto._descriptors import PER_PROCESS, budget

from .conftest import Server, start, uri
from .wsclient import Client, Closed

LIMIT = 256  # soft and hard: the server cannot raise it
CONNECTIONS = 16
ROOM = budget(Config(max_connections=CONNECTIONS), LIMIT) // PER_PROCESS


@pytest.fixture
def scarce(adapter: str) -> Server:
    return Server(adapter, "--max-connections", str(CONNECTIONS), "--kill-grace", "0.5",
                  prefix=("prlimit", f"--nofile={LIMIT}:{LIMIT}"))


def fill(client: Client) -> list[str]:
    """Start sleeps until the server refuses one; the ids started."""
    started: list[str] = []
    for n in range(LIMIT):  # more than the limit could ever hold
        answer = start(client, f"s{n}", ["sleep", "60"])
        if "error" in answer:
            assert "out of file descriptors" in str(answer["error"]), answer
            return started
        started.append(f"s{n}")
    raise AssertionError("never refused")


def test_processes_leave_descriptors_for_other_clients(scarce: Server, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"still readable")
    try:
        greedy = scarce.client()
        assert len(fill(greedy)) == ROOM
        other = scarce.client()  # connected, although processes hold all they may
        read = other.result("fs/readFile", {"path": uri(tmp_path / "f")})
        assert base64.b64decode(read["dataBase64"]) == b"still readable"
        assert "error" in start(other, "x", ["true"])
        greedy.result("process/terminate", {"processId": "s0"})
        greedy.events_until_closed("s0")
        assert "result" in start(other, "x", ["true"])  # its place taken at once
        other.events_until_closed("x")
    finally:
        log = scarce.stop()
    assert "Traceback" not in log, log
    # The operator was told at start-up what so low a limit allows.
    assert (f"the descriptor limit (ulimit -n) is {LIMIT}: room for {ROOM} processes at once "
            f"rather than {Config().max_processes}") in log


def admitted(server: Server, seconds: float = 10) -> Client:
    """A client let in within ``seconds``; turned away (1013) until then."""
    deadline = time.monotonic() + seconds
    while True:
        client = Client(server.url)
        try:
            assert "result" in client.handshake()
            return client
        except (Closed, LocalProtocolError):
            client.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_connections_past_the_cap_are_closed_and_their_places_reused(scarce: Server) -> None:
    try:
        crowd = [scarce.client() for _ in range(CONNECTIONS)]
        extra = Client(scarce.url)
        with pytest.raises(Closed) as closed:
            extra.recv()
        assert closed.value.code == 1013
        assert str(closed.value).endswith(f"too many connections: at most {CONNECTIONS}")
        crowd.pop().close()
        late = admitted(scarce)  # the place freed is taken, once the server has seen it free
        assert late.result("environment/status") == {"status": "ready"}
    finally:
        log = scarce.stop()
    assert "Traceback" not in log, log
