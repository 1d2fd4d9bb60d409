"""Secrets stay secret: the token check, logs, traces and process environments."""

from __future__ import annotations

import base64
import hashlib
import hmac
import subprocess
import sys
from pathlib import Path

import pytest

from execproto.adapters._wire import _ws

from .conftest import Server, start
from .wsclient import Client, output_of

TOKEN = "tok-5f1c2e9a7b"
UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


def test_the_token_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)  # `_auth` imports hmac where it compares
    wrong = UPGRADE + b"Authorization: Bearer tok-5\r\n\r\n"
    refused = _ws.ServerSocket(token=TOKEN).receive(wrong)
    assert refused.send.startswith(b"HTTP/1.1 401")
    accepted = _ws.ServerSocket(token=TOKEN).receive(
        UPGRADE + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
    )
    assert accepted.send.startswith(b"HTTP/1.1 101")
    # Both answers came from the constant-time comparison of the tokens' digests, never from
    # ==, and never of the tokens themselves (whose lengths differ).
    expected = hashlib.sha256(TOKEN.encode()).digest()
    assert compared == [(hashlib.sha256(b"tok-5").digest(), expected), (expected, expected)]


def test_no_token_or_payload_reaches_the_logs_or_a_redacted_trace(
    adapter: str, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    trace = tmp_path / "trace.jsonl"
    server = Server(adapter, "--auth-token-file", str(token_file), "--trace", str(trace),
                    "--trace-redact", "--log-level", "DEBUG")
    secret_out, secret_in, secret_env = "out-7d3e1f0c", b"in-2b8a4c6e", "ghp-5f1a9d3b"
    try:
        assert Client(server.url, headers=[("Authorization", f"Bearer {TOKEN}x")]).rejected == 401
        client = Client(server.url, headers=[("Authorization", f"Bearer {TOKEN}")])
        assert "result" in client.handshake()
        # The output is made by the process, so the secret is not in its command line too.
        start(client, "p", ["sh", "-c", "printf '%s-%s\\n' out 7d3e1f0c; cat"], pipeStdin=True,
              env={"PATH": "/usr/bin:/bin", "GITHUB_PAT": secret_env})
        write = {"processId": "p", "chunk": base64.b64encode(secret_in).decode(),
                 "writeId": "w", "closeStdin": True}
        assert client.result("process/write", write) == {"status": "accepted"}
        got = output_of(client.events_until_closed("p"))
        assert got == {"stdout": f"{secret_out}\n".encode() + secret_in}  # the real bytes
        client.close()
    finally:
        log = server.stop()
    recorded = trace.read_text()
    for secret in (TOKEN, secret_out, secret_in.decode(), base64.b64encode(secret_in).decode(),
                   secret_env):
        assert secret not in log
        assert secret not in recorded
    replayed = subprocess.run([sys.executable, "-m", "execproto.adapters", "replay", str(trace)],
                              capture_output=True, text=True, timeout=60)
    assert replayed.returncode == 0 and replayed.stdout.startswith("ok:"), replayed.stdout


def test_trace_redact_needs_a_trace() -> None:
    done = subprocess.run([sys.executable, "-m", "execproto.adapters", "serve", "--trace-redact"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--trace-redact needs --trace" in done.stderr


def test_secrets_in_the_server_environment_stay_out_of_processes(tmp_path: Path) -> None:
    env = {"GITHUB_TOKEN": "t0", "DB_SECRET": "s0", "AWS_ACCESS_KEY_ID": "k0", "VISIBLE": "v0"}
    server = Server("asyncio", env=env)
    try:
        client = server.client()
        show = ["sh", "-c", "env | sort"]
        everything = {"inherit": "all", "ignoreDefaultExcludes": False, "exclude": [], "set": {},
                      "includeOnly": []}
        start(client, "all", show, envPolicy=everything)
        start(client, "none", show, env={"ONLY": "1"})  # no policy: exactly `env`
        inherited = output_of(client.events_until_closed("all"))["stdout"].decode()
        exact = output_of(client.events_until_closed("none"))["stdout"].decode()
        client.close()
    finally:
        server.stop()
    assert "VISIBLE=v0" in inherited
    for name in ("GITHUB_TOKEN", "DB_SECRET", "AWS_ACCESS_KEY_ID"):
        assert name not in inherited and name not in exact
    assert set(exact.split()) - {"PWD=/tmp"} == {"ONLY=1"}  # the shell adds PWD itself
