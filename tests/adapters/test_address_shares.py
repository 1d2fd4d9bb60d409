"""One client, attacking from 127.0.0.2 (and .3), cannot hold the server-wide caps that an
honest client on 127.0.0.1 needs: the connections, and the processes it leaves behind when it
goes (see `execproto._shares`). Linux routes all of 127.0.0.0/8 to loopback, so each source
address is a client of its own to the server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
from wsproto.events import CloseConnection

from . import wsclient
from .conftest import Server, start
from .wsclient import Client, Closed

HERE = Path(__file__).resolve().parent
CONNECTIONS, PROCESSES, PER_SESSION = 8, 8, 2  # one address: at most 4 processes


class CappedServer(Server):
    def __init__(self, adapter: str) -> None:  # noqa: D107 - Server's, with small caps
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "capped_server.py"), str(PROCESSES), str(PER_SESSION),
             "serve", "--listen", "ws://127.0.0.1:0", "--adapter", adapter, "--drain-grace",
             "0", "--max-connections", str(CONNECTIONS), "--kill-grace", "0.5",
             "--session-ttl", "60"],  # the attacker's sessions outlive the test
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("ws://127.0.0.1:"), self.stop()


def client_from(server: Server, source: str) -> Client:
    """A client, initialized, whose connection comes from ``source`` (a loopback address)."""
    connect = socket.create_connection

    def bound(address: tuple[str, int], timeout: float) -> socket.socket:
        return connect(address, timeout, source_address=(source, 0))

    with mock.patch.object(wsclient.socket, "create_connection", bound):
        return server.client()


def sleeps(clients: list[Client], prefix: str) -> int:
    """Start `sleep`s on every connection until the server refuses; how many run."""
    running = 0
    for n, client in enumerate(clients):
        for k in range(PER_SESSION if client.closed is None else 0):
            try:
                reply = start(client, f"{prefix}-{n}-{k}", ["sleep", "60"])
            except (Closed, OSError):  # its place was taken by a newcomer: as it should be
                break
            if "error" in reply:
                return running
            running += 1
    return running


def leave(client: Client) -> None:
    """Close, and wait for the server's answer: it has heard the client go."""
    if client.closed is not None:  # its place was taken
        client.sock.close()
        return
    try:
        client.sock.sendall(client.ws.send(CloseConnection(code=1000)))
        while True:
            client.recv(timeout=5)
    except (Closed, OSError):
        pass
    client.sock.close()


def started_soon(client: Client, process_id: str, within: float = 5.0) -> dict[str, object]:
    """A start, tried again while refused for ``within`` seconds: the server may hear of the
    attacker's going a moment after the attacker sees its close answered. Without the shares
    it is refused for the whole session TTL."""
    deadline = time.monotonic() + within
    while True:
        reply = start(client, process_id, ["true"])
        if "result" in reply or time.monotonic() > deadline:
            return reply
        time.sleep(0.05)


def test_an_attacker_holds_neither_the_connections_nor_the_processes(adapter: str) -> None:
    server = CappedServer(adapter)
    try:
        attacker = [client_from(server, "127.0.0.2") for _ in range(CONNECTIONS)]
        # Every place is the attacker's; the honest client gets one, and runs a process.
        honest = server.client()
        with pytest.raises(Closed) as taken:  # the attacker's oldest made room
            attacker[0].recv(timeout=5)
        assert taken.value.code == 1013
        assert "result" in start(honest, "first", ["true"])
        honest.events_until_closed("first")
        # The attacker fills the processes from two addresses, as far as it may, and goes.
        other = [client_from(server, "127.0.0.3") for _ in range(2)]
        assert sleeps(attacker, "a") + sleeps(other, "b") == PROCESSES
        for client in attacker + other:
            leave(client)
        reply = started_soon(honest, "second")
        assert "result" in reply, reply
        honest.events_until_closed("second")
        honest.close()
    finally:
        log = server.stop()
    assert server.process.returncode == 0, log
    assert "Traceback" not in log, log
