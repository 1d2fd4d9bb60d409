"""Attack: the websocket's authentication, by a client that sends what it likes and by a sandbox
that writes what it may.

- A token or a shared secret file the server re-reads when it changes must never become one a
  sandbox wrote: a workspace-write command that moves the file's directory (or one above it)
  aside and puts a tree of its own in its place must not choose the next token (or the secret
  that signs them). Held: the directories above a denied file are mount points in the
  sandbox, and cannot be moved (EBUSY).
- JWTs shaped to trip a verifier (huge, non-ASCII, ``b64: false``, an unknown ``crit``, an
  issuer that is a part of the server's, the secret's bytes as a key of another algorithm)
  are refused, each on one log line that holds neither the token nor the secret, and the
  server serves on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import time
from pathlib import Path
from typing import Any

from .conftest import Server, start, uri
from .sandboxes import needs_bwrap, workspace_write
from .test_auth_modes import ISSUER, SECRET, answer, ask, claims, port_of, sign, signed_server
from .wsclient import Client, output_of

TOKEN = "the-operators-token-0123456789"
PLANTED = "a-token-the-sandbox-chose-0123456789"


def _let_in(server: Server, token: str) -> bool:
    status, _ = answer(ask(port_of(server.url), token))
    return status == 101


def _swap(client: Client, workspace: Path, moved: str, planted: str) -> Any:
    """A workspace-write command that moves ``moved`` (a directory under the workspace, the
    file's or one above it) aside and makes its own tree in its place, with ``planted`` in
    every file the old one held."""
    script = (f'cd {workspace} && mv {moved} {moved}.moved && '
              f'(cd {moved}.moved && find . -type d) | (cd {workspace} && '
              f'while read d; do mkdir -p "{moved}/$d"; done) && '
              f'(cd {moved}.moved && find . ! -type d) | while read f; do '
              f'printf "%s\\n" "{planted}" > "{moved}/$f"; done; ls -laR {moved}')
    reply = start(client, f"swap-{moved}", ["bash", "-c", script], cwd=uri(str(workspace)),
                  env={"PATH": "/usr/bin:/bin"}, sandbox=workspace_write(str(workspace)))
    assert "result" in reply, reply
    return output_of(client.events_until_closed(f"swap-{moved}", 60))


@needs_bwrap
def test_a_sandbox_cannot_replace_the_token_file_by_moving_its_directory(
        tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    conf = workspace / "outer" / "conf"
    conf.mkdir(parents=True)
    (conf / "notes.txt").write_text("the directory is not the token's alone\n")
    token_file = conf / "token"
    token_file.write_text(TOKEN + "\n")
    server = Server("asyncio", "--auth-token-file", str(token_file))
    try:
        client = server.client(headers=[("Authorization", f"Bearer {TOKEN}")])
        said = [_swap(client, workspace, moved, PLANTED) for moved in ("outer/conf", "outer")]
        client.close()
        time.sleep(0.1)
        planted_works = _let_in(server, PLANTED)
        still = _let_in(server, TOKEN)
    finally:
        log = server.stop()
    assert not planted_works, (said, log[-2000:])
    assert still
    assert PLANTED not in log and TOKEN not in log


@needs_bwrap
def test_a_sandbox_cannot_replace_the_shared_secret_by_moving_its_directory(
        tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    conf = workspace / "outer" / "conf"
    conf.mkdir(parents=True)
    (conf / "notes.txt").write_text("the directory is not the secret's alone\n")
    secret = conf / "secret"
    secret.write_text(SECRET + "\n")
    planted_secret = "a-secret-the-sandbox-chose-0123456789-abcdef"
    server = signed_server("asyncio", secret)
    try:
        now = int(time.time())
        client = server.client(headers=[("Authorization", f"Bearer {sign(claims(now))}")])
        said = [_swap(client, workspace, moved, planted_secret)
                for moved in ("outer/conf", "outer")]
        client.close()
        time.sleep(0.1)
        now = int(time.time())
        planted_works = _let_in(server, sign(claims(now), secret=planted_secret))
        still = _let_in(server, sign(claims(now)))
    finally:
        log = server.stop()
    assert not planted_works, (said, log[-2000:])
    assert still
    assert planted_secret not in log and SECRET not in log


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hand_signed(header: bytes, payload: bytes, secret: str = SECRET) -> str:
    head, body = _b64(header), _b64(payload)
    mac = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(mac)}"


def test_odd_jwts_are_refused_and_the_server_serves_on(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    now = int(time.time())
    good = claims(now)
    body = json.dumps(good).encode()
    odd = {
        "huge": sign(claims(now, pad="x" * 200_000)),
        "b64 false": _hand_signed(b'{"alg":"HS256","b64":false,"crit":["b64"]}', body),
        "unknown crit": _hand_signed(b'{"alg":"HS256","crit":["exp-ext"],"exp-ext":1}', body),
        "exp infinite": _hand_signed(b'{"alg":"HS256"}', body[:-1] + b', "exp": Infinity}'),
        "exp 1e400": _hand_signed(b'{"alg":"HS256"}', b'{"exp": 1e400, "iss": "%s"}'
                                  % ISSUER.encode()),
        "issuer a part of ours": sign(claims(now, iss=ISSUER[:4])),
        "issuer a list holding ours": sign(claims(now, iss=[ISSUER])),
        "header a list": _hand_signed(b'[1]', body),
        "nested deep": _hand_signed(b'{"alg":"HS256","x":' + b"[" * 5000 + b"]" * 5000 + b"}",
                                    body),
    }
    server = signed_server("asyncio", path)
    try:
        let_in = {}
        for name, token in odd.items():
            sock = ask(port_of(server.url), token)
            status, _ = answer(sock)
            let_in[name] = status
        # Non-ASCII and control bytes where the token goes.
        for raw in (b"Bearer \xff\xfe" + sign(good).encode(), b"Bearer " + "é".encode() * 50):
            sock = socket.create_connection(("127.0.0.1", port_of(server.url)), timeout=20)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade"
                         b"\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                         b"Sec-WebSocket-Version: 13\r\nAuthorization: " + raw + b"\r\n\r\n")
            let_in[repr(raw[:12])] = answer(sock)[0]
        assert _let_in(server, sign(claims(int(time.time()))))  # it serves on
    finally:
        log = server.stop()
    assert all(status != 101 for status in let_in.values()), let_in
    assert server.process.returncode == 0 and "Traceback" not in log, log[-3000:]
    assert SECRET not in log
    for token in odd.values():
        for part in token.split("."):
            assert len(part) < 8 or part not in log, part
