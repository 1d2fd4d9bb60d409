"""http/request headers taking their value from the server's environment (``valueEnvVar``), on
execproto and on the reference side by side: the same answers, the same headers at the origin,
and the value never on the connection or in the trace."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import REFERENCE

from .conftest import Server
from .test_reference import Reference

SECRET = "executor-side-secret-4711"
ENV = {"MCP_TOK": SECRET, "EMPTY_TOK": "", "BAD_TOK": "a\nb", "GITHUB_TOKEN": "gh-token"}
# (headers, what execproto and the reference both answer). The origin echoes the headers it
# got; a refusal is the error.
CASES: list[list[dict[str, Any]]] = [
    [{"name": "authorization", "value": "Bearer ", "valueEnvVar": "MCP_TOK"}],
    [{"name": "x-token", "value": "", "valueEnvVar": "MCP_TOK"}],
    [{"name": "x-token", "value": "pre-", "valueEnvVar": "GITHUB_TOKEN"}],
    [{"name": "x-token", "value": "plain", "valueEnvVar": None}],
    [{"name": "authorization", "value": "Bearer ", "valueEnvVar": "NOPE_UNSET"}],
    [{"name": "authorization", "value": "Bearer ", "valueEnvVar": "EMPTY_TOK"}],
    [{"name": "authorization", "value": "Bearer ", "valueEnvVar": "BAD_TOK"}],
    [{"name": "authorization", "value": "Bearer ", "valueEnvVar": "openai_api_key"}],
    [{"name": "authorization", "value": "Bearer ", "valueEnvVar": "AWS_SESSION_TOKEN"}],
    [{"name": "bad name", "value": "x", "valueEnvVar": "MCP_TOK"}],
    [{"name": "x-token", "value": "a\u00e9b"}],
    [{"name": "a", "value": "x", "valueEnvVar": "NOPE_UNSET"},
     {"name": "b", "value": "y", "valueEnvVar": "OPENAI_API_KEY"}],
]


class Echo(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        Echo.seen.append({k.lower(): v for k, v in self.headers.items()
                          if k.lower() in ("authorization", "x-token", "a", "b")})
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def origin() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


def play(client: Any, url: str) -> list[Any]:
    said = []
    for number, headers in enumerate(CASES):
        Echo.seen.clear()
        reply = client.call("http/request", {"method": "GET", "url": url, "requestId": f"r{number}",
                                             "headers": headers}, timeout=20)
        said.append(reply.get("error") or {"status": reply["result"]["status"],
                                           "origin saw": Echo.seen[:]})
    return said


def test_values_from_the_servers_environment_as_the_references(
        adapter: str, origin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    trace = tmp_path / "trace.jsonl"
    ours = Server(adapter, "--trace", str(trace), "--trace-redact")
    client = ours.client()
    try:
        said = play(client, origin)
    finally:
        client.close()
        ours.stop()
    assert said[0] == {"status": 200, "origin saw": [{"authorization": f"Bearer {SECRET}"}]}
    assert said[1] == {"status": 200, "origin saw": [{"x-token": SECRET}]}
    assert said[4]["message"] == ("http/request header authorization requires executor "
                                  "environment variable NOPE_UNSET"), said[4]
    assert said[7]["message"] == ("http/request header authorization cannot use executor "
                                  "environment variable openai_api_key"), said[7]
    # The secret went to the origin only: not in a redacted trace (whose header records the
    # server's environment as filler), and not back to the client; and the trace replays.
    assert SECRET not in trace.read_text() and SECRET not in json.dumps(said[2:])
    replayed = subprocess.run([sys.executable, "-m", "execproto.adapters", "replay", str(trace)],
                              capture_output=True, text=True, timeout=60)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    if REFERENCE is None:
        return
    reference = Reference(REFERENCE)
    client = reference.client()
    try:
        expected = play(client, origin)
    finally:
        client.close()
        reference.stop()
    assert said == expected
