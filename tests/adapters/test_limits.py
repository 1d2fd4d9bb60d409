"""Limits a deployment relies on: memory under a slow client, and refusals at start-up."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from .conftest import Server, alive, start


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def flooder(server_pid: int, timeout: float = 15) -> list[int]:
    """The pids of the server's children that run `cat /dev/zero` (waiting for one)."""
    deadline = time.monotonic() + timeout
    while True:
        children = subprocess.run(
            ["pgrep", "-P", str(server_pid), "-f", "cat /dev/zero"],
            capture_output=True, text=True,
        )
        found = [int(p) for p in children.stdout.split()]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def blocked_writing(pid: int, quiet: float = 0.5) -> bool:
    """Whether ``pid`` wrote nothing for ``quiet`` seconds, asleep in a pipe write."""

    def written() -> int:
        with open(f"/proc/{pid}/io") as io:
            return int(next(line for line in io if line.startswith("wchar:")).split()[1])

    before = written()
    time.sleep(quiet)
    with open(f"/proc/{pid}/wchan") as wchan:
        return written() == before and "pipe" in wchan.read()


def test_a_client_that_stops_reading_blocks_the_writer_not_the_memory(server: Server) -> None:
    c = server.client()
    # A small receive buffer, then no reads at all: the server's send buffer fills.
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    start(c, "flood", ["sh", "-c", "echo $$ >&2; exec cat /dev/zero"])
    (pid,) = flooder(server.process.pid)
    # Paused, not dead: the writer comes to a stop, blocked on its full pipe.
    deadline = time.monotonic() + 15
    while not blocked_writing(pid):
        assert time.monotonic() < deadline, "the writer was never held back"
    assert rss_mib(server.process.pid) < 100
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
