"""Credential masking end to end: `credentialMasking` (codex's `features.credential_masking`).

A test host in a network namespace of its own plays api.github.com over HTTPS, with a
certificate of a test CA the server's upstream trusts (``SSL_CERT_FILE`` in the server's
environment: what it verifies origins against); the server resolves the name to it through a
hosts file (as runner.Origin does). The executor's environment holds a real-looking
``GITHUB_TOKEN``; codex's holds another, which must never be the one used (codex sends an
``envPolicy``: the command's environment is the executor's). The command, under codex's
sandbox with a managed network that allows api.github.com, prints its ``$GITHUB_TOKEN`` and
calls the API with it through the proxy: it must see a dummy, and the origin the real token.

codex masks only with ``allow_login_shell = false`` (its default login shell is a startup
masking does not cover), set with ``-c`` as top-level keys cannot follow the runner's tables.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from adapters.masking_origin import make_ca_and_leaf

from .fake_model import say, shell
from .proxy import Proxy
from .runner import NetnsHost, Run

# Real-looking tokens: the shape GitHub's provider masks (ghp_ and 36 characters).
SERVER_TOKEN = "ghp_" + "ExecutorSide0123456789abcdefghijklmnop"[:36]
CLIENT_TOKEN = "ghp_" + "ClientSide0123456789abcdefghijklmnopqr"[:36]
API = "api.github.com"
ADDRESS, PEER = "140.82.112.6", "140.82.112.1"  # public-looking, on a veth only

MASKING_NETWORK = f"""
[sandbox_workspace_write]
network_access = true

[features.network_proxy]
enabled = true
domains = {{ "{API}" = "allow" }}
"""
OPTIONS = ("-c", "features.credential_masking=true", "-c", "allow_login_shell=false")
SCRIPT = ('echo "token=$GITHUB_TOKEN"; '
          f'curl -sS -m 10 -H "Authorization: token $GITHUB_TOKEN" https://{API}/user; '
          'echo " [$?]"')


def with_options(*options: str) -> tuple[str, ...]:
    """A command prefix that gives codex ``options`` before its subcommand."""
    return ("sh", "-c", f'exec "$0" {shlex.join(options)} "$@"')


class ApiOrigin(NetnsHost):
    """api.github.com on ADDRESS:443 (`NetnsHost`); each request's (host, path, authorization)
    is a JSON line in ``seen``."""

    def __init__(self, root: Path) -> None:
        self.ca, leaf = make_ca_and_leaf(root / "api-certs", [API])
        hosts = root / "hosts"
        hosts.write_text(f"127.0.0.1 localhost\n{ADDRESS} {API}\n")
        self.seen = root / "api-seen.jsonl"
        super().__init__("execproto-api", "api", ADDRESS, PEER, hosts,
                         [sys.executable, "-c", API_SERVER, ADDRESS, str(leaf), str(self.seen)])

    def requests(self) -> list[list[str]]:
        if not self.seen.exists():
            return []
        return [json.loads(line) for line in self.seen.read_text().splitlines()]


# The origin answers with a fixed body, never a header back: the command must not learn the
# real token from the answer.
API_SERVER = """
import http.server, json, ssl, sys
address, leaf, seen = sys.argv[1:4]
class Api(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        with open(seen, "a") as file:
            file.write(json.dumps([self.headers.get("host", ""), self.path,
                                   self.headers.get("authorization", "")]) + "\\n")
        body = b'{"login": "execproto-e2e"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer((address, 443), Api)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(leaf)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("up", flush=True)
server.serve_forever()
"""


def client_messages(stream: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages codex sent through a Proxy: each connection's HTTP upgrade, then
    websocket frames, masked as a client's are (RFC 6455 5.3), one message a text frame."""
    messages: list[dict[str, Any]] = []
    at = 0
    while at + 2 <= len(stream):
        if stream.startswith(b"GET ", at):
            at = stream.index(b"\r\n\r\n", at) + 4
            continue
        opcode, length, at = stream[at] & 0x0F, stream[at + 1] & 0x7F, at + 2
        if length >= 126:
            size = 2 if length == 126 else 8
            length, at = int.from_bytes(stream[at:at + size], "big"), at + size
        key, at = stream[at:at + 4], at + 4
        payload, at = stream[at:at + length], at + length
        if len(payload) < length:
            break  # cut off as the connection closed
        if opcode == 1:
            messages.append(json.loads(bytes(b ^ key[i % 4] for i, b in enumerate(payload))))
    return messages


def github_token(run: Run) -> dict[str, Any]:
    if shutil.which("ip") is None:
        return {"skipped": "iproute2 (ip) is not installed"}
    origin = ApiOrigin(run.root)
    try:
        run.server_prefix = origin.prefix()
        own = run.server_env
        run.server_env = lambda: {  # type: ignore[method-assign]
            **own(), "SSL_CERT_FILE": str(origin.ca), "GITHUB_TOKEN": SERVER_TOKEN}
        proxy: Proxy = run.serve()
        model = run.codex([[shell("masked", SCRIPT)], [say("done")]], url=proxy.url,
                          config=MASKING_NETWORK, prefix=with_options(*OPTIONS),
                          env={"GITHUB_TOKEN": CLIENT_TOKEN})
        starts = [m["params"] for m in client_messages(bytes(proxy.to_server))
                  if m.get("method") == "process/start"]
        return {**run.facts(model), "origin": origin.requests(),
                "network_proxies": [start.get("networkProxy") for start in starts]}
    finally:
        origin.close()


SCENARIOS = {"masking_github_token": github_token}
