"""Codex connecting with a signed bearer token: an HS256 JWT in environments.toml's
``auth_bearer_token``, to a server that verifies it with a shared secret (execproto's
``serve --auth signed-bearer-token``, the reference's ``--ws-auth signed-bearer-token``, each
under its own flags). A valid token lets the command run; an expired one is refused."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt

from .fake_model import say, shell
from .proxy import Proxy
from .runner import Run, toml

SECRET = "codex-e2e-shared-secret-0123456789abcdef"
ISSUER, AUDIENCE = "e2e-control-plane", "e2e-sandbox"


def _flags(run: Run, secret: Path) -> list[str]:
    """The signed-bearer-token flags, in the server's own names."""
    if run.server == "reference":
        return ["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", str(secret),
                "--ws-issuer", ISSUER, "--ws-audience", AUDIENCE]
    return ["--auth", "signed-bearer-token", "--auth-shared-secret-file", str(secret),
            "--auth-issuer", ISSUER, "--auth-audience", AUDIENCE]


def _serve_signed(run: Run) -> Proxy:
    secret = run.root / "shared-secret"
    secret.write_text(SECRET + "\n")
    plain = run.server_command
    run.server_command = lambda listen, token_file=None, certs=None: [  # type: ignore[method-assign]
        *plain(listen, None, certs), *_flags(run, secret)]
    return run.serve()


def _token(expires_in: int) -> str:
    now = int(time.time())
    return jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "user-1", "iat": now,
                       "exp": now + expires_in}, SECRET, algorithm="HS256")


def signed_bearer_token(run: Run) -> dict[str, Any]:
    proxy = _serve_signed(run)
    run.environments(f"url = {toml(proxy.url)}\nauth_bearer_token = {toml(_token(300))}\n")
    model = run.codex([[shell("call", "echo signed; exit 3")], [say("done")]])
    return run.facts(model)


def expired_signed_bearer_token(run: Run) -> dict[str, Any]:
    proxy = _serve_signed(run)
    run.environments(f"url = {toml(proxy.url)}\nauth_bearer_token = {toml(_token(-600))}\n")
    model = run.codex([[shell("call", "echo hi > reached.txt")], [say("done")]])
    return {**run.facts(model), "reached": (run.workdir / "reached.txt").exists(),
            "answer": bytes(proxy.from_server).split(b"\r\n", 1)[0].decode("latin1")}


SCENARIOS = {
    "signed_bearer_token": signed_bearer_token,
    "expired_signed_bearer_token": expired_signed_bearer_token,
}
