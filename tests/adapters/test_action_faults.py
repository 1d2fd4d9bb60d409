"""An exception while an action is carried out, injected into each kind in turn on every
adapter: the request it served is answered (never a stuck id), and the server serves on."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import start, uri
from .wsclient import Client

HERE = Path(__file__).resolve().parent


class FaultyServer:
    def __init__(self, adapter: str, handler: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "faulty_server.py"), handler, "serve",
             "--listen", "ws://127.0.0.1:0", "--adapter", adapter, "--kill-grace", "0.3"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()

    def stop(self) -> str:
        self.process.terminate()
        _, err = self.process.communicate(timeout=15)
        return err


def _spawn(client: Client) -> None:
    reply = start(client, "p", ["true"])
    assert reply["error"]["code"] == -32603, reply  # type: ignore[index]
    assert "RuntimeError: injected" in reply["error"]["message"]  # type: ignore[index]


def _run_fs(client: Client) -> None:
    reply = client.call("fs/getMetadata", {"path": uri("/")})
    assert reply["error"] == {"code": -32603, "message": "failed: RuntimeError: injected"}


def _run_http(client: Client) -> None:
    with socket.socket() as refuser:
        refuser.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{refuser.getsockname()[1]}/"
        reply = client.call("http/request", {"method": "GET", "url": url, "requestId": "r"})
    assert reply["error"]["message"] == "http/request failed: RuntimeError: injected", reply


def _signal(client: Client) -> None:
    start(client, "p", ["sleep", "0.3"])
    assert client.result("process/signal", {"processId": "p", "signal": "interrupt"}) == {}
    client.events_until_closed("p")  # the signal was lost, the process ends on its own


def _stdin(client: Client) -> None:
    start(client, "p", ["sh", "-c", "sleep 0.3"], pipeStdin=True)
    reply = client.result("process/write", {"processId": "p", "chunk": "aGk=", "writeId": "w",
                                            "closeStdin": True})
    assert reply["status"] in ("accepted", "starting")
    client.events_until_closed("p")


def _finalize(client: Client) -> None:
    start(client, "p", ["true"])
    client.events_until_closed("p")  # closed is sent before the finalize that fails


# Each room's handler (see faulty_server.py), and what its client checks.
CASES: dict[str, Callable[[Client], None]] = {
    "_processes._children:Children._spawn": _spawn,
    "_processes._children:Children._signal": _signal,
    "_processes._children:Children._write_stdin": _stdin,
    "_processes._children:Children._close_stdin": _stdin,
    "_processes._children:Children._finalize": _finalize,
    "_files._fs_calls:FsCalls._run": _run_fs,
    "_http._http_calls:HttpCalls._run": _run_http,
}


@pytest.fixture(params=sorted(CASES))
def handler(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def faulty(adapter: str, handler: str) -> Iterator[FaultyServer]:
    server = FaultyServer(adapter, handler)
    assert server.url.startswith("ws://127.0.0.1:"), server.stop()
    yield server
    server.stop()


def test_an_action_that_raises_is_answered_and_the_server_serves_on(
        faulty: FaultyServer, handler: str) -> None:
    client = Client(faulty.url)
    assert "result" in client.handshake()
    CASES[handler](client)
    info = client.result("environment/info")
    assert info["platformOs"] == "linux"
    other = Client(faulty.url)  # and a new client is served as well
    assert "result" in other.handshake()
    assert faulty.process.poll() is None
