"""Connections that never finish their websocket upgrade cannot crowd out those that do."""

from __future__ import annotations

import collections
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from wsproto.utilities import LocalProtocolError

from execproto import Config
from execproto.adapters._wire._gate import Gate

from .conftest import STARVED, Server, served, start
from .wsclient import Closed

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
    # Past the cap, the oldest (or the newcomer) was closed at once rather than held: never
    # more than the cap are held.
    enough = len(crowd) - cap
    assert closed_within(crowd, enough, Config().handshake_timeout / 2) == enough
    # A client that finishes its upgrade takes the place of the oldest, and is served as if
    # nobody else were there.
    time.sleep(Gate.SPARE * 1.5)
    times = [served(server, f"p{i}") for i in range(3)]
    assert max(times) < STARVED, times
    for sock in crowd:
        sock.close()
    assert served(server, "after") < STARVED


def test_a_client_with_a_complete_upgrade_gets_in_during_a_half_open_flood(
    server: Server,
) -> None:
    """300 half-open connections a second from the same address, for 3 s: each takes the place
    of the oldest, so one that sends its whole upgrade at once is upgraded before 64 more can
    come. At least 9 of 10 honest clients, one every 0.1 s, are served."""
    stop = threading.Event()

    def flood() -> None:
        held: collections.deque[socket.socket] = collections.deque()
        for i in range(900):  # 3 s at 300/s
            if stop.is_set():
                break
            try:
                held.append(half_open(server.url, PARTIAL if i % 2 else b""))
            except OSError:
                pass
            if len(held) > 200:  # the server closed most of these long ago
                held.popleft().close()
            time.sleep(1 / 300)
        for sock in held:
            sock.close()

    flooder = threading.Thread(target=flood)
    flooder.start()
    try:
        time.sleep(0.5)  # the gate full of the flood's connections
        outcomes = []
        for i in range(10):
            try:
                outcomes.append(served(server, f"h{i}") < STARVED)
            except (OSError, AssertionError, Closed, LocalProtocolError):  # refused
                outcomes.append(False)
            time.sleep(0.1)
    finally:
        stop.set()
        flooder.join(10)
    assert sum(outcomes) >= 9, outcomes


def test_connections_that_never_initialize_give_way_to_one_that_does(adapter: str) -> None:
    """A client that holds every place with upgraded connections and never sends initialize:
    the next client takes the place of the oldest of them (1013) and is served."""
    running = Server(adapter, "--max-connections", "8")
    try:
        hogs = [running.client(handshake=False) for _ in range(8)]
        time.sleep(0.3)  # their places are no longer new
        assert served(running, "p") < STARVED
        with pytest.raises(Closed) as closed:
            hogs[0].recv(timeout=5)
        assert closed.value.code == 1013
        for hog in hogs[1:]:
            hog.close()
        running.client().close()  # and places come back as they go
    finally:
        log = running.stop()
    assert "Traceback" not in log, log
