"""Limits a deployment relies on: memory under a slow client, and refusals at start-up."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from .conftest import Server, alive, start
from .wsclient import Client


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_client_that_stops_reading_blocks_the_writer_not_the_memory(server: Server) -> None:
    c = server.client()
    # A small receive buffer, then no reads at all: the server's send buffer fills.
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    start(c, "flood", ["sh", "-c", "echo $$ >&2; exec cat /dev/zero"])
    time.sleep(3)
    assert rss_mib(server.process.pid) < 100
    # Paused, not dead: the writer is blocked on its full pipe.
    children = subprocess.run(
        ["pgrep", "-P", str(server.process.pid), "-f", "cat /dev/zero"],
        capture_output=True, text=True,
    )
    (pid,) = [int(p) for p in children.stdout.split()]
    assert alive(pid)
    with open(f"/proc/{pid}/wchan") as wchan:
        assert "pipe" in wchan.read()  # asleep writing its pipe (pipe_write, anon_pipe_write...)
    time.sleep(1)
    assert rss_mib(server.process.pid) < 100
    c.sock.close()


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "execproto.adapters", "serve", *args],
                          capture_output=True, text=True, timeout=30)


def test_a_hostname_in_listen_is_refused() -> None:
    refused = serve("--listen", "ws://localhost:0")
    assert refused.returncode == 2
    assert "numeric IP address, not a hostname" in refused.stderr


def test_a_non_loopback_address_without_a_token_is_refused() -> None:
    refused = serve("--listen", "ws://0.0.0.0:0")
    assert refused.returncode == 2
    assert "without --auth-token-file" in refused.stderr
