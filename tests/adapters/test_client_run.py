"""`execproto.adapters.client.run`: one command, for scripts that are not async."""

from __future__ import annotations

import time

import pytest

from execproto.adapters.client import RemoteError, run

from .conftest import Server


@pytest.fixture
def server(shared_server: Server) -> Server:
    return shared_server


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_run_returns_the_exit_code_and_both_outputs(server: Server, backend: str) -> None:
    script = "tr a-z A-Z; echo oops >&2; exit 3"
    result = run(server.url, ["sh", "-c", script], stdin=b"hello\n", backend=backend)
    assert result == (3, b"HELLO\n", b"oops\n")


def test_run_without_stdin_gives_the_process_an_empty_one(server: Server) -> None:
    assert run(server.url, ["wc", "-c"]) == (0, b"0\n", b"")


def test_run_gives_up_after_its_timeout_and_terminates_the_process(server: Server) -> None:
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="terminated"):
        run(server.url, ["sleep", "60"], timeout=0.5)
    assert time.monotonic() - began < 10


def test_run_raises_what_the_server_refused(server: Server) -> None:
    with pytest.raises(RemoteError):
        run(server.url, ["true"], cwd="/no/such/directory")
