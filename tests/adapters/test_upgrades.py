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

from .conftest import Server, start
from .wsclient import Client

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


def closed_after(sock: socket.socket) -> float:
    """Seconds until the server closes ``sock``."""
    began = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - began


def served(server: Server) -> float:
    """Seconds for a new client to connect, start a process and see it closed."""
    began = time.monotonic()
    client = server.client()
    start(client, "p", ["true"])
    client.events_until_closed("p")
    client.close()
    return time.monotonic() - began


@pytest.mark.parametrize("send", [b"", PARTIAL], ids=["silent", "partial"])
def test_an_unfinished_upgrade_is_closed_after_the_timeout(quick: Server, send: bytes) -> None:
    took = closed_after(half_open(quick.url, send))
    assert 0.8 < took < 5, took
    assert served(quick) < 5


def test_a_finished_upgrade_is_not_timed_out(quick: Server) -> None:
    client = quick.client()
    time.sleep(2)
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
    times = [served(server) for _ in range(3)]
    assert max(times) < 2, times
    for sock in crowd:
        sock.close()
    assert served(server) < 2


def test_a_fresh_flood_turns_away_newcomers_until_its_spare_second_passes(
    quick: Server,
) -> None:
    cap = Config().max_upgrading
    crowd = [half_open(quick.url) for _ in range(cap)]
    time.sleep(0.2)
    latecomer = half_open(quick.url)
    assert closed_after(latecomer) < 2  # at once; generous for a loaded machine
    time.sleep(Gate.SPARE)
    assert served(quick) < 2
    for sock in crowd:
        sock.close()
