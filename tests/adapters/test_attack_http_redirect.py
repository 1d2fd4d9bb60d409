"""Attack: ``http/request`` with a header valued from the server's environment (``valueEnvVar``),
to an origin that redirects elsewhere. The origin a client names is the one the executor's
secret is meant for; a redirect it answers (an open redirect on it, a compromised endpoint)
must not carry the credential headers to another origin.

Measured on the reference (codex 0.171, reqwest's redirect policy): on a redirect to another
scheme, host or port, ``Authorization``, ``Cookie`` and ``Proxy-Authorization`` are dropped, and
kept toward the same origin; a header of any other name goes on (``x-token`` here, in both).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from reference import REFERENCE

from .conftest import Server
from .test_reference import Reference

SECRET = "executor-side-secret-0815"
SENSITIVE = ("authorization", "cookie", "proxy-authorization")
HEADERS = [{"name": "authorization", "value": "Bearer ", "valueEnvVar": "ATTACK_MCP_TOKEN"},
           {"name": "cookie", "value": "session=1"},
           {"name": "proxy-authorization", "value": "Basic ", "valueEnvVar": "ATTACK_MCP_TOKEN"},
           {"name": "x-token", "value": "", "valueEnvVar": "ATTACK_MCP_TOKEN"}]


class _Origin(http.server.BaseHTTPRequestHandler):
    """Answers ``/go?to=URL`` with a 302 to URL, anything else 200; records what each port got."""

    seen: list[tuple[int, str, dict[str, str]]] = []

    def do_GET(self) -> None:
        kept = {name.lower(): value for name, value in self.headers.items()
                if name.lower() in (*SENSITIVE, "x-token")}
        _Origin.seen.append((self.server.server_address[1], self.path, kept))
        if self.path.startswith("/go?to="):
            self.send_response(302)
            self.send_header("location", self.path.split("=", 1)[1])
        else:
            self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def origins() -> Iterator[tuple[int, int]]:
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield servers[0].server_address[1], servers[1].server_address[1]
    for server in servers:
        server.shutdown()
        server.server_close()


def _play(client: Any, first: int, second: int) -> dict[str, dict[str, str]]:
    """What the redirect's target got, by case."""
    targets = {"other port": f"http://127.0.0.1:{second}/landed",
               "other host": f"http://localhost:{first}/landed",
               "same origin": f"http://127.0.0.1:{first}/landed"}
    got = {}
    for case, target in targets.items():
        _Origin.seen.clear()
        reply = client.call("http/request", {
            "method": "GET", "url": f"http://127.0.0.1:{first}/go?to={target}",
            "requestId": "r", "headers": HEADERS}, timeout=20)
        assert reply.get("result", {}).get("status") == 200, reply
        landed = [headers for _, path, headers in _Origin.seen if path == "/landed"]
        assert len(landed) == 1, _Origin.seen
        got[case] = landed[0]
    return got


def test_a_redirect_to_another_origin_drops_the_credential_headers(
        origins: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTACK_MCP_TOKEN", SECRET)
    server = Server("asyncio")
    client = server.client()
    try:
        got = _play(client, *origins)
    finally:
        client.close()
        server.stop()
    for case in ("other port", "other host"):
        assert got[case] == {"x-token": SECRET}, (case, got[case])
    assert got["same origin"]["authorization"] == f"Bearer {SECRET}"
    assert got["same origin"]["cookie"] == "session=1"
    if REFERENCE is None:
        return
    reference = Reference(REFERENCE)
    client = reference.client()
    try:
        assert _play(client, *origins) == got
    finally:
        client.close()
        reference.stop()


def _other_schemes(client: Any, first: int, second: int) -> list[Any]:
    said = []
    for target in (f"ftp://127.0.0.1:{second}/landed", "file:///etc/hostname"):
        _Origin.seen.clear()
        reply = client.call("http/request", {
            "method": "GET", "url": f"http://127.0.0.1:{first}/go?to={target}",
            "requestId": "r", "headers": HEADERS}, timeout=20)
        said.append((reply.get("error") or reply["result"]["status"],
                     [path for _, path, _ in _Origin.seen]))
    return said


def test_a_redirect_to_another_scheme_is_refused(
        origins: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Followed as plain HTTP, ``ftp://host:port/`` took the executor's x-token there."""
    monkeypatch.setenv("ATTACK_MCP_TOKEN", SECRET)
    server = Server("asyncio")
    client = server.client()
    try:
        said = _other_schemes(client, *origins)
    finally:
        client.close()
        server.stop()
    refused = "http/request failed: redirect target uses unsupported URL scheme: {}"
    assert said == [
        ({"code": -32603, "message": refused.format("ftp")},
         [f"/go?to=ftp://127.0.0.1:{origins[1]}/landed"]),  # the redirect's origin only
        ({"code": -32603, "message": refused.format("file")}, ["/go?to=file:///etc/hostname"]),
    ], said
    if REFERENCE is None:
        return
    reference = Reference(REFERENCE)
    client = reference.client()
    try:
        assert _other_schemes(client, *origins) == said
    finally:
        client.close()
        reference.stop()
