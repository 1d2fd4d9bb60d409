"""The bearer token on every adapter: the scheme's case, and a wrong guess answered late."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from execproto.adapters._wire._peer import AUTH_DELAY

from .conftest import Server
from .wsclient import Client

TOKEN = "tok-9e4b1d7c"
UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


@pytest.fixture
def guarded(adapter: str, tmp_path: Path) -> Iterator[Server]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    running = Server(adapter, "--auth-token-file", str(token_file))
    yield running
    log = running.stop()
    assert running.process.returncode == 0, log
    assert "Traceback" not in log, log


def raw(url: str, request: bytes) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    sock.sendall(request)
    return sock


def answer(sock: socket.socket) -> bytes:
    got = b""
    while b"\r\n\r\n" not in got:
        more = sock.recv(4096)
        if not more:
            break
        got += more
    return got


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_scheme_is_case_insensitive(guarded: Server, scheme: str) -> None:
    client = Client(guarded.url, headers=[("Authorization", f"{scheme} {TOKEN}")])
    assert client.rejected is None
    assert "result" in client.handshake()
    client.close()


@pytest.mark.parametrize("header", [f"Basic {TOKEN}", f"Bearer{TOKEN}", f"Bearer {TOKEN}x", TOKEN])
def test_anything_else_is_refused(guarded: Server, header: str) -> None:
    assert Client(guarded.url, headers=[("Authorization", header)]).rejected == 401


def test_a_wrong_token_is_answered_late_and_only_that_connection_waits(guarded: Server) -> None:
    # A loaded machine may delay one right client by chance, but not every one of three: the
    # quickest must be let in well before the guess is answered.
    let_in = []
    for _ in range(3):
        began = time.monotonic()
        wrong = raw(guarded.url, UPGRADE + b"Authorization: Bearer nope\r\n\r\n")
        time.sleep(0.05)  # the guess is in first
        right = Client(guarded.url, headers=[("Authorization", f"Bearer {TOKEN}")])
        assert "result" in right.handshake()
        let_in.append(time.monotonic() - began)
        refused = answer(wrong)
        took = time.monotonic() - began
        assert refused.startswith(b"HTTP/1.1 401")
        assert took >= AUTH_DELAY * 0.9, took
        right.close()
        wrong.close()
        if let_in[-1] < AUTH_DELAY * 0.8:
            break
    assert min(let_in) < AUTH_DELAY * 0.8, let_in  # the right client did not wait behind the guess


def test_a_missing_token_is_answered_at_once(guarded: Server) -> None:
    took = []
    for _ in range(3):  # the quickest of three: one may be delayed by a loaded machine
        began = time.monotonic()
        sock = raw(guarded.url, UPGRADE + b"\r\n")
        assert answer(sock).startswith(b"HTTP/1.1 401")
        took.append(time.monotonic() - began)
        sock.close()
        if took[-1] < AUTH_DELAY * 0.8:
            break
    assert min(took) < AUTH_DELAY * 0.8, took


def test_a_guesser_that_leaves_before_the_answer_costs_nothing(guarded: Server) -> None:
    for _ in range(20):
        raw(guarded.url, UPGRADE + b"Authorization: Bearer nope\r\n\r\n").close()
    time.sleep(AUTH_DELAY * 2)
    client = Client(guarded.url, headers=[("Authorization", f"Bearer {TOKEN}")])
    assert "result" in client.handshake()
    client.close()
