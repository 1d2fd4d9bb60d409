"""The transport and the handshake, end to end against a real server."""

from __future__ import annotations

import socket

import pytest

from .conftest import Server
from .wsclient import Client, Closed


def http_get(url: str, path: str, headers: str = "") -> bytes:
    host, port = url.removeprefix("ws://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n".encode())
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    return data


def test_readyz_answers_200(server: Server) -> None:
    assert http_get(server.url, "/readyz").startswith(b"HTTP/1.1 200 ")


def test_a_browser_origin_is_refused_with_403(server: Server) -> None:
    client = Client(server.url, headers=[("Origin", "http://evil.example")])
    assert client.rejected == 403


def test_handshake_errors_and_a_bad_frame_keep_the_connection(server: Server) -> None:
    c = server.client(handshake=False)
    early = c.call("process/read", {"processId": "x"})
    assert early["error"] == {
        "code": -32600,
        "message": "client must call initialize before using exec methods",
    }
    c.send_raw("not json")
    bad = c.recv()
    assert bad["id"] == -1 and bad["error"]["code"] == -32600
    assert bad["error"]["message"].startswith(
        "failed to parse JSON-RPC message from exec-server websocket 127.0.0.1:")
    assert "result" in c.call("initialize", {"clientName": "t"})
    between = c.call("environment/info")
    assert between["error"]["message"] == (
        "client must send initialized before using environment info methods")
    c.send({"method": "initialized"})
    assert c.result("environment/info")["platformOs"] == "linux"
    second = c.call("initialize", {"clientName": "t"})
    assert second["error"] == {
        "code": -32600, "message": "initialize may only be sent once per connection"}
    unknown = c.call("no/such")
    assert unknown["error"] == {
        "code": -32601, "message": "exec-server stub does not implement `no/such` yet"}


def test_binary_frames_are_accepted_and_replies_are_text(server: Server) -> None:
    c = server.client(handshake=False)
    c.send_raw(b'{"id": 1, "method": "initialize", "params": {"clientName": "t"}}')
    reply = c.recv_raw()
    assert isinstance(reply, str) and '"sessionId"' in reply


def test_a_stray_notification_closes_the_connection_and_the_server_keeps_serving(
        server: Server) -> None:
    c = server.client()
    c.send({"method": "bogus/notification"})
    with pytest.raises(Closed) as closed:
        c.recv()
    assert closed.value.code == 1002
    assert "result" in server.client().call("environment/info")


def test_an_oversized_message_closes_with_1009_and_the_server_keeps_serving(server: Server) -> None:
    c = server.client()
    c.send_raw("x" * ((64 << 20) + 1))
    with pytest.raises(Closed) as closed:
        c.recv(timeout=30)
    assert closed.value.code == 1009
    assert "result" in server.client().call("environment/info")


@pytest.fixture
def token_server(adapter: str, tmp_path: object) -> Server:
    from pathlib import Path

    token_file = Path(str(tmp_path)) / "token"
    token_file.write_text("s3cret-token\n")
    running = Server(adapter, "--auth-token-file", str(token_file))
    yield running  # type: ignore[misc]
    running.stop()


def test_a_wrong_or_missing_token_is_refused_with_401(token_server: Server) -> None:
    assert Client(token_server.url).rejected == 401
    assert Client(token_server.url, headers=[("Authorization", "Bearer wrong")]).rejected == 401
    good = Client(token_server.url, headers=[("Authorization", "Bearer s3cret-token")])
    assert good.rejected is None and "result" in good.handshake()


def test_the_server_pings_at_its_interval(adapter: str) -> None:
    server = Server(adapter, "--ping-interval", "0.2")
    try:
        c = server.client()
        with pytest.raises(TimeoutError):
            c.recv(timeout=2.0)  # nothing to read but pings, which the client answers
        assert c.pings >= 3  # of about 10: the interval, not a timer that fires once or never
        assert "result" in c.call("environment/info")  # and the connection is still good
    finally:
        server.stop()
