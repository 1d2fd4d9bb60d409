"""http/request end to end, against a real HTTP server on loopback started by the test."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .wsclient import Client

BIG = bytes(range(256)) * (40 << 10)  # 10 MiB
ENDLESS_STOPPED = threading.Event()  # set when the endless stream's reader has gone away


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout test): nothing to tell it

    def do_GET(self) -> None:
        if self.path == "/hello":
            self._send(200, b"hello", (("X-Twice", "1"), ("X-Twice", "2")))
        elif self.path == "/redirect":
            self._send(302, b"", (("Location", "/hello"),))
        elif self.path == "/slow":
            time.sleep(10)  # far past the timeout test's 300 ms
            self._send(200, b"late")
        elif self.path == "/big":
            self._send(200, BIG)
        elif self.path == "/endless":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for _ in range(600):  # a minute at most, should nobody ever hang up
                    self.wfile.write(b"5\r\ntick \r\n")
                    self.wfile.flush()
                    time.sleep(0.1)
            except (BrokenPipeError, ConnectionResetError):
                ENDLESS_STOPPED.set()
        elif self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (b"one ", b"two ", b"three"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
        else:
            self._send(404, b"no")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self._send(200, b"got " + self.rfile.read(length))


@pytest.fixture(scope="module")
def web() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def request(client: Client, url: str, **extra: object) -> dict[str, object]:
    params = {"method": "GET", "url": url, "requestId": "r1", "headers": []}
    params.update(extra)
    return client.call("http/request", params, timeout=30)


def test_buffered_with_repeated_headers_kept(client: Client, web: str) -> None:
    result = request(client, f"{web}/hello")["result"]
    assert result["status"] == 200  # type: ignore[index]
    assert base64.b64decode(result["bodyBase64"]) == b"hello"  # type: ignore[index]
    twice = [h["value"] for h in result["headers"] if h["name"] == "x-twice"]  # type: ignore[index]
    assert twice == ["1", "2"]


def test_post_with_a_body(client: Client, web: str) -> None:
    body = base64.b64encode(b"payload").decode()
    result = request(client, f"{web}/echo", method="POST", bodyBase64=body)["result"]
    assert base64.b64decode(result["bodyBase64"]) == b"got payload"  # type: ignore[index]


def test_streamed_chunked_body(client: Client, web: str) -> None:
    reply = request(client, f"{web}/chunked", streamResponse=True, requestId="s1")
    assert reply["result"]["bodyBase64"] == ""  # type: ignore[index]
    deltas = []
    while True:
        n = client.notification(lambda m: m["method"] == "http/request/bodyDelta")
        deltas.append(n["params"])
        if n["params"]["done"]:
            break
    assert [d["seq"] for d in deltas] == list(range(1, len(deltas) + 1))
    assert b"".join(base64.b64decode(d["deltaBase64"]) for d in deltas) == b"one two three"
    assert deltas[-1]["error"] is None


def test_redirects_follow_or_stop(client: Client, web: str) -> None:
    followed = request(client, f"{web}/redirect")["result"]
    assert followed["status"] == 200  # type: ignore[index]
    stopped = request(client, f"{web}/redirect", redirectPolicy="stop")["result"]
    assert stopped["status"] == 302  # type: ignore[index]


def test_timeout(client: Client, web: str) -> None:
    began = time.monotonic()
    reply = request(client, f"{web}/slow", timeoutMs=300)
    assert reply["error"]["code"] == -32603  # type: ignore[index]
    assert reply["error"]["message"].startswith("http/request failed: ")  # type: ignore[index]
    assert time.monotonic() - began < 5  # not the 10 s the answer takes


def test_a_10_mib_body(client: Client, web: str) -> None:
    result = request(client, f"{web}/big")["result"]
    assert base64.b64decode(result["bodyBase64"]) == BIG  # type: ignore[index]


def test_connection_refused(client: Client) -> None:
    reply = request(client, "http://127.0.0.1:1/")
    assert reply["error"]["code"] == -32603  # type: ignore[index]
    assert "http/request failed: error sending request" in reply["error"]["message"]  # type: ignore[index]


def test_a_streamed_body_ends_when_the_client_goes_away(server: object, web: str) -> None:
    from .conftest import Server

    assert isinstance(server, Server)
    ENDLESS_STOPPED.clear()
    c = server.client()
    request(c, f"{web}/endless", streamResponse=True, requestId="e1")
    c.notification(lambda m: m["method"] == "http/request/bodyDelta")
    c.close()
    assert ENDLESS_STOPPED.wait(10), "the server kept reading the body after its client left"
