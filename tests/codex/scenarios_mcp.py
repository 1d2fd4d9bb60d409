"""An MCP server codex reaches through the executor (`http/request`), with a bearer token only
the executor holds: the `httpHeaderEnvVars` capability.

codex's `[mcp_servers.X]` with `environment_id = "remote"` and `bearer_token_env_var`: on an
executor that announces `httpHeaderEnvVars`, codex sends `authorization: "Bearer "` with
`valueEnvVar`, and the executor adds its own variable's value; on one that does not, codex reads
the variable itself and sends the token across. The two environments hold different tokens, so
the MCP server says which side's token it was given. (codex 0.171 defers MCP tools behind its
`tool_search`, so the model's first request does not name the tool; its `tools/list` is the
proof the server was used.)
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

from .fake_model import say
from .runner import Run, toml

EXECUTOR_TOKEN, CLIENT_TOKEN = "executor-side-token-31", "client-side-token-47"
TOOL = "execproto_e2e_whoami"


class Mcp(http.server.BaseHTTPRequestHandler):
    """MCP over streamable HTTP, as little as codex needs: initialize, tools/list, and
    notifications (202); no server-sent stream (a GET is 405)."""

    tokens: list[str]
    methods: list[str]

    def do_POST(self) -> None:
        self.tokens.append(self.headers.get("authorization", ""))
        message = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        self.methods.append(message.get("method", ""))
        if "id" not in message:
            self._answer(202, b"")
            return
        params = message.get("params") or {}
        results = {
            "initialize": lambda: {"protocolVersion": params["protocolVersion"],
                                   "capabilities": {"tools": {}},
                                   "serverInfo": {"name": "execproto-e2e", "version": "1"}},
            "tools/list": lambda: {"tools": [{
                "name": TOOL, "description": "Says who is asking.",
                "inputSchema": {"type": "object", "properties": {}}}]},
        }
        answer = results.get(message["method"])
        result = answer() if answer else None
        reply = ({"jsonrpc": "2.0", "id": message["id"], "result": result} if result is not None
                 else {"jsonrpc": "2.0", "id": message["id"],
                       "error": {"code": -32601, "message": "method not found"}})
        self._answer(200, json.dumps(reply).encode(), "application/json")

    def do_GET(self) -> None:
        self._answer(405, b"")

    def do_DELETE(self) -> None:
        self._answer(405, b"")

    def _answer(self, status: int, body: bytes, kind: str | None = None) -> None:
        self.send_response(status)
        if kind:
            self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _mcp() -> tuple[http.server.ThreadingHTTPServer, type[Mcp]]:
    handler = type("Handler", (Mcp,), {"tokens": [], "methods": []})
    mcp = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=mcp.serve_forever, daemon=True).start()
    return mcp, handler


def _server_config(mcp: http.server.ThreadingHTTPServer, where: str) -> str:
    url = f"http://127.0.0.1:{mcp.server_port}/mcp"
    return f'\n[mcp_servers.tok]\nurl = {toml(url)}\nbearer_token_env_var = "MCP_TOK"\n{where}'


def executor_token(run: Run) -> dict[str, Any]:
    """The client's own `[mcp_servers.tok]`, to be reached from the executor."""
    mcp, handler = _mcp()
    own = run.server_env
    run.server_env = lambda: {**own(), "MCP_TOK": EXECUTOR_TOKEN}  # type: ignore[method-assign]
    try:
        config = _server_config(mcp, 'environment_id = "remote"\n')
        model = run.codex([[say("done")]], config=config, env={"MCP_TOK": CLIENT_TOKEN})
    finally:
        mcp.shutdown()
        mcp.server_close()
    return {**run.facts(model), "tokens": handler.tokens, "methods": handler.methods}


def executor_config(run: Run) -> dict[str, Any]:
    """An MCP server in the executor's own `$CODEX_HOME/config.toml`, which codex reads through
    `environmentConfig/read`: without `httpHeaderEnvVars` codex drops one with a token."""
    mcp, handler = _mcp()
    own = run.server_env

    def server_env() -> dict[str, str]:
        env = {**own(), "MCP_TOK": EXECUTOR_TOKEN}
        (run.root / "server-home" / "config.toml").write_text(_server_config(mcp, ""))
        return env

    run.server_env = server_env  # type: ignore[method-assign]
    try:
        model = run.codex([[say("done")]], env={"MCP_TOK": CLIENT_TOKEN})
    finally:
        mcp.shutdown()
        mcp.server_close()
    return {**run.facts(model), "tokens": handler.tokens, "methods": handler.methods}


SCENARIOS = {"mcp_executor_token": executor_token, "mcp_executor_config": executor_config}
