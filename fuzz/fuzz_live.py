"""Fuzz a live server over a real websocket: random frames in, and the server must stay well.

Each example opens a connection, maybe completes the handshake, sends a few frames (the core
fuzzer's client frames: garbage, deep nesting, broken UTF-8, and well-formed calls with wrong
fields), reads a little, and drops the connection. After every example `GET /readyz` must
answer; every 25 a fresh client must get through a handshake and a call. At the end, once the
session TTL has passed, the server must have no process left (nothing leaked) and still serve.

Processes run under bubblewrap with a throwaway writable root, fs/* is confined to it, and no
frame carries `http/request`: whatever the fuzzer makes up cannot touch this machine or the
network. Budget: EXECPROTO_LIVE_FUZZ_EXAMPLES (60 in `make test`, the same 60 every time, and
10,000 fresh ones in `make fuzz-live`; see the root conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_core import client_frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Request, TextMessage

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from children import children  # noqa: E402

EXAMPLES = int(os.environ.get("EXECPROTO_LIVE_FUZZ_EXAMPLES", "60"))
TTL = 1.0
GRACE = 0.2


def _no_http(frame: bytes | str) -> bool:
    text = frame if isinstance(frame, str) else frame.decode("utf-8", "replace")
    return "http/request" not in text


live_frame = client_frame().filter(_no_http)


class Live:
    def __init__(self, root: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "execproto.adapters", "serve", "--listen", "ws://127.0.0.1:0",
             "--session-ttl", str(TTL), "--kill-grace", str(GRACE), "--sandbox", "bwrap",
             "--writable-root", root, "--fs-root", root],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("ws://"):
            _, err = self.process.communicate(timeout=10)
            pytest.skip(f"the bwrap sandbox cannot run here: {err.strip()[:200]}")
        self.port = int(self.url.rsplit(":", 1)[1])
        self.examples = 0

    def children(self) -> list[int]:
        return children(self.process.pid)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (the live fuzzer runs processes only inside it)")
    root = tempfile.mkdtemp(prefix="execproto-live-fuzz-")
    server = Live(root)
    yield server
    # Every session the fuzzer left expires after the TTL, and its processes are killed after a
    # grace: soon nothing may remain (the deadline allows for a loaded machine).
    deadline = time.monotonic() + 15
    while (leaked := server.children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.process.poll() is None, "the server died"
    assert healthy(server), "the server stopped answering"
    server.process.terminate()
    _, err = server.process.communicate(timeout=20)
    shutil.rmtree(root, ignore_errors=True)
    assert not leaked, f"processes left after the TTL: {leaked}"
    assert "Traceback" not in err, err


def connect(port: int, timeout: float = 5.0) -> tuple[socket.socket, WSConnection]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    ws = WSConnection(ConnectionType.CLIENT)
    sock.sendall(ws.send(Request(host="127.0.0.1", target="/")))
    while True:
        ws.receive_data(sock.recv(1 << 16))
        if any(isinstance(event, AcceptConnection) for event in ws.events()):
            return sock, ws


def send(sock: socket.socket, ws: WSConnection, message: Any) -> None:
    frame = message if isinstance(message, (bytes, str)) else json.dumps(message)
    if isinstance(frame, str):
        try:
            frame.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: only a binary frame can carry it
            frame = frame.encode("utf-8", "surrogatepass")
    event = TextMessage(data=frame) if isinstance(frame, str) else BytesMessage(data=frame)
    sock.sendall(ws.send(event))


def replies(sock: socket.socket, ws: WSConnection, until: float) -> list[Any]:
    """Whole text messages until ``until`` (monotonic) or the close."""
    out: list[Any] = []
    parts: list[str] = []
    while time.monotonic() < until:
        sock.settimeout(max(0.001, until - time.monotonic()))
        try:
            data = sock.recv(1 << 16)
        except TimeoutError:
            break
        if not data:
            break
        ws.receive_data(data)
        for event in ws.events():
            if isinstance(event, TextMessage):
                parts.append(event.data)
                if event.message_finished:
                    out.append(json.loads("".join(parts)))
                    parts = []
            elif isinstance(event, CloseConnection):
                return out
    return out


def healthy(server: Live) -> bool:
    """`GET /readyz` answers 200 within 5 s."""
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def serves(server: Live) -> bool:
    """A fresh client gets through the handshake and a call."""
    sock, ws = connect(server.port)
    try:
        send(sock, ws, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": {"clientName": "check"}})
        send(sock, ws, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
        send(sock, ws, {"jsonrpc": "2.0", "id": 2, "method": "environment/info"})
        got = replies(sock, ws, time.monotonic() + 5)
        while not any(m.get("id") == 2 for m in got):
            more = replies(sock, ws, time.monotonic() + 5)
            if not more:
                return False
            got += more
        return any(m.get("id") == 2 and "result" in m for m in got)
    finally:
        sock.close()


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(frames=st.lists(live_frame, min_size=1, max_size=6), handshake=st.booleans(),
       polite=st.booleans())
def test_random_frames_over_a_real_websocket(
    live: Live, frames: list[bytes | str], handshake: bool, polite: bool
) -> None:
    sock, ws = connect(live.port)
    try:
        if handshake:
            send(sock, ws, {"id": "h", "method": "initialize", "params": {"clientName": "fuzz"}})
            send(sock, ws, {"method": "initialized", "params": {}})
        for frame in frames:
            send(sock, ws, frame)
        replies(sock, ws, time.monotonic() + 0.02)
        if polite:
            sock.sendall(ws.send(CloseConnection(code=1000)))
    except OSError:
        pass  # the server closed this connection (a protocol error, say): that is allowed
    finally:
        sock.close()
    live.examples += 1
    assert healthy(live), "the server stopped answering /readyz"
    if live.examples % 25 == 0:
        assert serves(live), "a fresh client was not served"
