"""Connections that never finish their websocket upgrade cannot crowd out those that do."""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from execproto import Config
from execproto.adapters._peer import Gate

from .conftest import STARVED, Server, served, start

PARTIAL = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"


@pytest.fixture
def quick(adapter: str) -> Iterator[Server]:
    running = Server(adapter, "--handshake-timeout", "1", "--kill-grace", "0.5")
    yield running
    log = running.stop()
    assert running.process.returncode == 0, log
    assert "Traceback" not in log, log


def half_open(url: str, send: bytes = b"") -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    if send:
        sock.sendall(send)
    return sock


def closed_after(sock: socket.socket, began: float | None = None) -> float:
    """Seconds until the server closes ``sock``, counted from ``began`` (by default, now)."""
    began = time.monotonic() if began is None else began
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - began


@pytest.mark.parametrize("send", [b"", PARTIAL], ids=["silent", "partial"])
def test_an_unfinished_upgrade_is_closed_after_the_timeout(quick: Server, send: bytes) -> None:
    began = time.monotonic()  # before the connection: the server's clock starts later
    took = closed_after(half_open(quick.url, send), began)
    assert 0.8 < took < 5, took
    assert served(quick, "p") < STARVED


def test_a_finished_upgrade_is_not_timed_out(quick: Server) -> None:
    client = quick.client()
    time.sleep(1.5)  # past the 1 s handshake timeout
    start(client, "p", ["true"])
    client.events_until_closed("p")
    client.close()


def closed_within(socks: list[socket.socket], enough: int, limit: float) -> int:
    """How many of ``socks`` the server closes within ``limit`` seconds (counting stops at
    ``enough``), all watched together."""
    waiting = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        waiting.register(sock, selectors.EVENT_READ)
    deadline = time.monotonic() + limit
    closed = 0
    while closed < enough and (left := deadline - time.monotonic()) > 0:
        for key, _ in waiting.select(left):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                if sock.recv(4096):
                    continue
            except BlockingIOError:
                continue
            except ConnectionResetError:
                pass
            waiting.unregister(sock)
            closed += 1
    waiting.close()
    return closed


def test_many_half_open_connections_leave_room_for_a_client(server: Server) -> None:
    cap = Config().max_upgrading
    crowd = [half_open(server.url, PARTIAL if i % 2 else b"") for i in range(400)]
    # Past the cap they were turned away at once rather than held. Which ones is a matter of
    # timing (on a slow machine a late one may take the place of an oldest that has had its
    # spare second), but never more than the cap are held.
    enough = len(crowd) - cap
    assert closed_within(crowd, enough, Config().handshake_timeout / 2) == enough
    # Those held have had their spare second: a client that finishes its upgrade takes the
    # place of the oldest, and is served as if nobody else were there.
    time.sleep(Gate.SPARE * 1.5)
    times = [served(server, f"p{i}") for i in range(3)]
    assert max(times) < STARVED, times
    for sock in crowd:
        sock.close()
    assert served(server, "after") < STARVED


def test_a_fresh_flood_turns_away_newcomers_until_its_spare_second_passes(
    server: Server,
) -> None:
    # The default 10 s handshake timeout: a latecomer wrongly let in would stay open that long.
    cap = Config().max_upgrading
    for _ in range(3):
        began = time.monotonic()  # before the oldest of the crowd arrives
        crowd = [half_open(server.url) for _ in range(cap)]
        time.sleep(0.2)
        latecomer = half_open(server.url)
        if time.monotonic() - began < 0.8 * Gate.SPARE:
            break
        # The crowd took so long to gather that its oldest may have had its spare second, and
        # the latecomer rightly taken its place: gather it again.
        for sock in [*crowd, latecomer]:
            sock.close()
        time.sleep(0.5)  # the server lets go of them
    else:
        pytest.fail("a crowd of the cap's size never gathered within its spare second")
    assert closed_after(latecomer) < 5  # at once; generous for a loaded machine
    time.sleep(Gate.SPARE)
    assert served(server, "p") < STARVED
    for sock in crowd:
        sock.close()
