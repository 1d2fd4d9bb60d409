"""Real servers for the end-to-end tests: ``execproto serve`` in a subprocess, on loopback."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .wsclient import Client

ADAPTERS = ["asyncio", "trio", "threads"]


@functools.cache
def _host_warnings() -> tuple[str, ...]:
    from execproto.adapters.backends import LocalBackend

    return tuple(LocalBackend().warnings())


def about_the_host(line: str) -> bool:
    """Whether a server's log line is one of its start-up warnings about this machine (no
    bubblewrap, no pasta, no route out): a test that counts warnings leaves them out, so it
    means the same on a machine that lacks a part."""
    return any(warning in line for warning in _host_warnings())


class Server:
    def __init__(self, adapter: str, *args: str, env: dict[str, str] | None = None,
                 prefix: tuple[str, ...] = (), drain_grace: str | None = "0") -> None:
        """``prefix``: a command the server runs under (to run it as another user, say).
        ``drain_grace``: the ``--drain-grace`` (None: the server's default). 0, so that a stop
        with processes still running does not wait out a drain: the tests here are about
        other things (test_drain.py is about the drain, and gives its own, which comes later
        in ``args`` and so wins)."""
        grace = () if drain_grace is None else ("--drain-grace", drain_grace)
        command = [*prefix, sys.executable, "-m", "execproto.adapters", "serve",
                   "--listen", "ws://127.0.0.1:0", "--adapter", adapter, *grace, *args]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("ws://127.0.0.1:"), self.stop()

    def client(self, handshake: bool = True, **options: object) -> Client:
        client = Client(self.url, **options)  # type: ignore[arg-type]
        if handshake:
            reply = client.handshake()
            assert "result" in reply, reply
        return client

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 15) -> str:
        """Stop the server; return what it logged."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            _, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
            raise AssertionError(f"server did not stop in {timeout}s:\n{err}") from None
        return err


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(adapter: str) -> Iterator[Server]:
    running = Server(adapter, "--kill-grace", "0.5", "--session-ttl", "3")
    yield running
    log = running.stop()
    assert running.process.returncode == 0, log
    assert "Traceback" not in log, log


@pytest.fixture(scope="module")
def shared_server() -> Iterator[Server]:
    """One asyncio server for a whole module whose tests are about the client, not the server."""
    running = Server("asyncio", "--log-level", "warning")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    c = server.client()
    yield c
    c.close()


def uri(path: str | Path) -> str:
    from execproto import uri_from_path

    return uri_from_path(str(path))


def start(client: Client, process_id: str, argv: list[str], **extra: object) -> dict[str, object]:
    params = {"processId": process_id, "argv": argv, "cwd": uri("/tmp"),
              "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, "tty": False}
    params.update(extra)
    return client.call("process/start", params)


# What a probe client's start-to-closed may take while an attack runs. The target is 1 s, and
# bench/attack.py measures it; a test only tells served from starved, so it allows for a loaded
# machine.
STARVED = 3.0


def served(server: Server, name: str) -> float:
    """Seconds a fresh client takes to run `true` to its close: is the server serving others?"""
    began = time.monotonic()
    client = server.client()
    start(client, name, ["true"])
    client.events_until_closed(name)
    client.close()
    return time.monotonic() - began


def alive(pid: int) -> bool:
    """Whether ``pid`` names a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or before the read
        return False


def eventually(check: Callable[[], bool], wait: float = 5) -> bool:
    """Whether ``check()`` holds within ``wait`` seconds (polled every 20 ms)."""
    deadline = time.monotonic() + wait
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
