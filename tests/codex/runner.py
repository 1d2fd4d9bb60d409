"""Runs the real `codex exec` against an exec-server with a scripted model, and says what happened.

    python -m codex CODEX SERVER BASE [SCENARIO...]      (from the tests directory)

SERVER is an execproto adapter (asyncio, trio, threads) or `reference` (`codex exec-server`
itself, to prove the scenarios right). BASE is a directory outside /tmp for CODEX_HOMEs and
workdirs (codex refuses a CODEX_HOME under /tmp). test_codex.py runs this inside `unshare -n`,
where only loopback exists, so codex, the model and the server cannot reach anything else.

Each scenario prints one JSON line: its name and its facts (the tool outputs the model received,
files, what the server answered), for test_codex.py to judge. A scenario that raises reports
the error instead, and the others still run. The scenarios are this module's and those of every
`scenarios_*.py` beside it (__main__.py gathers them), so each capability keeps its own file.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from certs import Certs, make_certs

from .fake_model import FakeModel, Item, Turn, function_call, patch, say, shell, verdict
from .proxy import Proxy

TOKEN = "codex-e2e-token-0123456789"
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # from <linux/sockios.h>, <net/if.h>

# gpt-5.5 is in codex's bundled catalogue: with an unknown model there is no apply_patch tool.
# The features are off because each would reach out to the internet at start-up.
CONFIG = """\
model = "gpt-5.5"
model_provider = "fake"
{approvals}
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.fake]
name = "fake"
base_url = "{base_url}"
wire_api = "responses"
env_key = "FAKE_MODEL_API_KEY"
request_max_retries = 0
stream_max_retries = 0
supports_websockets = false

[features]
plugins = false
remote_plugin = false
plugin_sharing = false
apps = false
tool_suggest = false
image_generation = false
browser_use = false
computer_use = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
trace_exporter = "none"
metrics_exporter = "none"
"""

# Codex's own description of a remote environment; `include_local = false` leaves it no other.
ENVIRONMENTS = """\
default = "remote"
include_local = false

[[environments]]
id = "remote"
initialize_timeout_sec = 20
"""


def toml(value: object) -> str:
    return json.dumps(value)  # a JSON string or list of strings is valid TOML too


class Run:
    """One scenario's world: its CODEX_HOME, workdir, servers, proxies and model."""

    def __init__(self, codex: str, server: str, base: Path, name: str) -> None:
        self.codex_binary = codex
        self.server = server
        self.root = base / name
        self.home = self.root / "home"
        self.workdir = self.root / "work"
        for path in (self.home, self.workdir):
            path.mkdir(parents=True)
        self.logs: list[Path] = []
        self.proxies: list[Proxy] = []
        self._servers: list[subprocess.Popen[str]] = []

    def server_command(self, listen: str, token_file: Path | None = None,
                       certs: Certs | None = None) -> list[str]:
        return [*self.server_prefix, *self._server_command(listen, token_file, certs)]

    # What the server runs under (`managed_network`: a mount namespace with its hosts file).
    server_prefix: tuple[str, ...] = ()

    def _server_command(self, listen: str, token_file: Path | None = None,
                        certs: Certs | None = None) -> list[str]:
        if self.server == "reference":
            command = [self.codex_binary, "exec-server", "--listen", listen]
            if token_file:
                command += ["--ws-auth", "capability-token", "--ws-token-file", str(token_file)]
        else:
            # --drain-grace 0: `close` stops it at once, as the reference stops, whatever
            # codex left running.
            command = [sys.executable, "-m", "execproto.adapters", "serve", "--listen", listen,
                       "--adapter", self.server, "--drain-grace", "0"]
            if token_file:
                command += ["--auth-token-file", str(token_file)]
            if certs:
                command += ["--tls-cert", str(certs.cert), "--tls-key", str(certs.key)]
        return command

    def server_env(self) -> dict[str, str]:
        # The reference keeps state in its own CODEX_HOME, apart from the client's.
        home = self.root / "server-home"
        home.mkdir(exist_ok=True)
        return {"CODEX_HOME": str(home), "RUST_LOG": "warn"}

    def serve(self, token: str | None = None, cut_after: bytes | None = None,
              certs: Certs | None = None) -> Proxy:
        """A websocket server behind a proxy; returns the proxy (its `url` is the one to use;
        with ``certs`` the server speaks TLS, and the proxy relays its records)."""
        token_file = None
        if token:
            token_file = self.root / "token"
            token_file.write_text(token + "\n")
        log = self.root / f"server-{len(self._servers)}.log"
        self.logs.append(log)
        server = subprocess.Popen(
            self.server_command("wss://127.0.0.1:0" if certs else "ws://127.0.0.1:0",
                                token_file, certs), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=log.open("w"), text=True, cwd=self.root,
            env={**os.environ, **self.server_env()})
        self._servers.append(server)
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("wss://127.0.0.1:" if certs else "ws://127.0.0.1:"):
            raise RuntimeError(f"the server printed {url!r}, not its address: {log.read_text()}")
        proxy = Proxy(url, cut_after=cut_after)
        if certs:
            proxy.url = proxy.url.replace("ws://", "wss://", 1)
        self.proxies.append(proxy)
        return proxy

    def environments(self, lines: str) -> None:
        (self.home / "environments.toml").write_text(ENVIRONMENTS + lines)

    def codex(self, turns: list[Turn], sandbox: str = "workspace-write",
              url: str | None = None, env: dict[str, str] | None = None,
              config: str = "", prefix: tuple[str, ...] = (),
              approvals: str = 'approval_policy = "never"',
              reviews: list[list[Item]] | None = None) -> FakeModel:
        """`codex exec` with the scripted model; the exec-server is ``url`` (a fresh server when
        neither it nor an environments.toml is given). ``env``: more of codex's environment.
        ``approvals``: the top-level approval settings; ``reviews``: the Guardian's verdicts."""
        if url is None and not (self.home / "environments.toml").exists():
            url = self.serve().url
        extra = env or {}
        model = FakeModel(turns, reviews)
        (self.home / "config.toml").write_text(
            CONFIG.format(base_url=model.base_url, approvals=approvals) + config)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CODEX_", "OPENAI_", "RUST_LOG"))
               and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
        env.update(CODEX_HOME=str(self.home), FAKE_MODEL_API_KEY="sk-fake", NO_COLOR="1",
                   RUST_LOG="warn")
        if url:
            env["CODEX_EXEC_SERVER_URL"] = url
        env.update(extra)
        log = self.root / "codex.log"
        self.logs.append(log)
        try:
            # stdin is /dev/null: codex would otherwise wait to append it to the prompt.
            with log.open("w") as err:
                subprocess.run(
                    [*prefix, self.codex_binary, "exec", "--json", "--skip-git-repo-check",
                     "--ephemeral", "--sandbox", sandbox, "-C", str(self.workdir),
                     "do the scripted thing"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                    timeout=60)
        finally:
            model.close()
        return model

    def facts(self, model: FakeModel) -> dict[str, Any]:
        """What every scenario reports: the model's view, and the server's answers."""
        answers = b"".join(bytes(p.from_server) for p in self.proxies).decode("utf-8", "replace")
        return {
            "outputs": model.outputs(),
            "requests": len(model.requests),
            "strays": model.strays,
            "sandbox_types": re.findall(r'"sandboxType"\s*:\s*"(\w+)"', answers),
            "session_ids": re.findall(r'"sessionId"\s*:\s*"([^"]+)"', answers),
            "connections": sum(p.connections for p in self.proxies),
        }

    def close(self) -> dict[str, str]:
        """Stop everything; return the tail of each log, for failure messages."""
        for proxy in self.proxies:
            proxy.close()
        for server in self._servers:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        return {log.name: log.read_text()[-3000:] for log in self.logs if log.exists()}


def shell_exit_code(run: Run) -> dict[str, Any]:
    model = run.codex([[shell("call", "echo hi; exit 3")], [say("done")]])
    return run.facts(model)


def apply_patch(run: Run) -> dict[str, Any]:
    text = "*** Begin Patch\n*** Add File: hello.txt\n+hello from apply_patch\n*** End Patch\n"
    model = run.codex([[patch("call", text)], [say("done")]])
    created = run.workdir / "hello.txt"
    return {**run.facts(model), "file": created.read_text() if created.exists() else None}


def _write_to_the_session(body: dict[str, Any]) -> list[dict[str, Any]]:
    # The terminal's session id is only known from the output of the call that started it.
    for item in body["input"]:
        if item.get("call_id") == "start":
            found = re.search(r"session ID (\d+)", str(item.get("output")))
            if found:
                arguments = {"session_id": int(found[1]), "chars": "ping\n", "yield_time_ms": 5000}
                return [function_call("write", "write_stdin", arguments)]
    return [say("no session id in the output")]


def terminal_stdin(run: Run) -> dict[str, Any]:
    model = run.codex([[shell("start", "cat", tty=True, yield_time_ms=500)],
                       _write_to_the_session, [say("done")]])
    return run.facts(model)


SKILL = """\
---
name: demo-skill
description: Frobnicates the widgets of the e2e suite.
---

# Demo
Run `true` and report.
"""


def repository_skill(run: Run) -> dict[str, Any]:
    skill = run.workdir / ".agents" / "skills" / "demo" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text(SKILL)
    model = run.codex([[say("done")]])
    return {**run.facts(model), "first_request": json.dumps(model.requests[:1])}


def resumed_connection(run: Run) -> dict[str, Any]:
    # Cut the connection once, a moment after the server accepted the command (its answer to
    # process/start names the sandbox), while the command still sleeps.
    proxy = run.serve(cut_after=b"sandboxType")
    model = run.codex([[shell("call", "sleep 1.5; echo done", yield_time_ms=10000)],
                       [say("done")]], url=proxy.url)
    return {**run.facts(model), "cuts": proxy.cuts}


def stdio_transport(run: Run) -> dict[str, Any]:
    command = run.server_command("stdio")
    env = ", ".join(f"{k} = {toml(v)}" for k, v in run.server_env().items())
    run.environments(f"program = {toml(command[0])}\nargs = {toml(command[1:])}\n"
                     f"env = {{ {env} }}\n")
    model = run.codex([[shell("call", "echo hi; exit 3")], [say("done")]])
    return run.facts(model)


def bearer_token(run: Run) -> dict[str, Any]:
    proxy = run.serve(token=TOKEN)
    run.environments(f"url = {toml(proxy.url)}\nauth_bearer_token = {toml(TOKEN)}\n")
    model = run.codex([[shell("call", "echo hi; exit 3")], [say("done")]])
    return run.facts(model)


def tls_bearer_token(run: Run) -> dict[str, Any]:
    """wss:// with a token from environments.toml, the test's CA trusted through SSL_CERT_FILE
    (codex's websocket reads it; CODEX_CA_CERTIFICATE is only for its HTTP client)."""
    if run.server == "reference":
        return {"skipped": "the reference serves no TLS"}
    certs = make_certs(run.root / "certs")
    proxy = run.serve(token=TOKEN, certs=certs)
    run.environments(f"url = {toml(proxy.url)}\nauth_bearer_token = {toml(TOKEN)}\n")
    model = run.codex([[shell("call", "echo over tls; exit 3")], [say("done")]],
                      env={"SSL_CERT_FILE": str(certs.ca)})
    # What the server sent, as the proxy saw it: records, so no JSON in clear.
    return {**run.facts(model), "url": proxy.url,
            "in_clear": b"sessionId" in proxy.from_server}


def wrong_token(run: Run) -> dict[str, Any]:
    proxy = run.serve(token=TOKEN)
    run.environments(f"url = {toml(proxy.url)}\nauth_bearer_token = \"not-the-token\"\n")
    model = run.codex([[shell("call", "echo hi > reached.txt")], [say("done")]])
    return {**run.facts(model), "reached": (run.workdir / "reached.txt").exists(),
            "answer": bytes(proxy.from_server).split(b"\r\n", 1)[0].decode("latin1")}


def read_only(run: Run) -> dict[str, Any]:
    model = run.codex([[shell("call", "echo x > denied.txt")], [say("done")]], sandbox="read-only")
    return {**run.facts(model), "written": (run.workdir / "denied.txt").exists()}


def read_only_under_tmp(run: Run) -> dict[str, Any]:
    """Codex's default mode with the workspace under /tmp (a CI checkout, a throwaway clone)."""
    run.workdir = Path(tempfile.mkdtemp(prefix="execproto-codex-ro-", dir="/tmp"))
    try:
        (run.workdir / "notes.txt").write_text("hello from the workspace\n")
        model = run.codex([[shell("read", "cat notes.txt && ls /tmp > /dev/null && echo read")],
                           [shell("write", "echo x > denied.txt")], [say("done")]],
                          sandbox="read-only")
        return {**run.facts(model), "written": (run.workdir / "denied.txt").exists()}
    finally:
        shutil.rmtree(run.workdir, ignore_errors=True)


def workspace_write(run: Run) -> dict[str, Any]:
    outside = run.root / "outside"  # neither in the workdir nor under /tmp, both writable
    outside.mkdir()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    model = run.codex([[shell("inside", "echo x > inside.txt")],
                       [shell("outside", f"echo x > {outside}/outside.txt")],
                       [shell("network", connect)], [say("done")]])
    try:
        listener.accept()
        accepted = True
    except BlockingIOError:
        accepted = False
    listener.close()
    return {**run.facts(model), "inside": (run.workdir / "inside.txt").exists(),
            "outside": (outside / "outside.txt").exists(), "accepted": accepted}


# A managed network: the user's network proxy feature, with an allowed and a denied name.
MANAGED_NETWORK = """
[sandbox_workspace_write]
network_access = true

[features.network_proxy]
enabled = true
domains = { "allowed.test" = "allow", "blocked.test" = "deny" }
"""
ORIGIN, ORIGIN_PEER = "192.88.99.7", "192.88.99.1"  # a public-looking address, on a veth only


class NetnsHost:
    """A test host in a network namespace of its own, joined to this one by a veth (``veth``0
    here with ``peer``, ``veth``1 there with ``address``), serving with ``server`` (argv run
    inside it, which prints "up" once it listens); the server resolves the test's names to it
    through ``hosts``, bound over /etc/hosts in a mount namespace of its own (`prefix`)."""

    def __init__(self, name: str, veth: str, address: str, peer: str, hosts: Path,
                 server: list[str]) -> None:
        self.name, self.veth, self.hosts = f"{name}-{os.getpid()}", veth, hosts
        ip = ["ip", "netns", "exec", self.name, "ip"]
        commands = [["ip", "netns", "add", self.name],
                    ["ip", "link", "add", f"{veth}0", "type", "veth", "peer", "name",
                     f"{veth}1", "netns", self.name],
                    ["ip", "addr", "add", f"{peer}/24", "dev", f"{veth}0"],
                    ["ip", "link", "set", f"{veth}0", "up"],
                    [*ip, "addr", "add", f"{address}/24", "dev", f"{veth}1"],
                    [*ip, "link", "set", f"{veth}1", "up"], [*ip, "link", "set", "lo", "up"]]
        try:
            for command in commands:
                subprocess.run(command, check=True, capture_output=True, timeout=30)
            self.server = subprocess.Popen(
                ["ip", "netns", "exec", self.name, *server],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert self.server.stdout is not None and self.server.stdout.readline() == "up\n"
        except BaseException:
            self.close()
            raise

    def prefix(self) -> tuple[str, ...]:
        return ("unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"',
                str(self.hosts))

    def close(self) -> None:
        if getattr(self, "server", None) is not None:
            self.server.kill()
            self.server.wait()
        # The veth first, at once: a namespace's devices go some time after `netns del`, and
        # the next scenario's would find this one still there.
        for command in (["ip", "link", "del", f"{self.veth}0"],
                        ["ip", "netns", "del", self.name]):
            subprocess.run(command, capture_output=True, timeout=30)


class Origin(NetnsHost):
    """A test host serving "hello from NAME" over HTTP on ORIGIN:80 for the test's names."""

    def __init__(self, root: Path) -> None:
        hosts = root / "hosts"
        hosts.write_text(f"127.0.0.1 localhost\n{ORIGIN} allowed.test blocked.test "
                         "review.test\n")
        super().__init__("execproto-origin", "origin", ORIGIN, ORIGIN_PEER, hosts,
                         [sys.executable, "-c", ORIGIN_SERVER, ORIGIN])


ORIGIN_SERVER = """
import http.server, sys
class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello from " + self.headers.get("host", "")).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer((sys.argv[1], 80), Hello)
print("up", flush=True)
server.serve_forever()
"""


def with_origin(scenario: Callable[[Run, Origin, Proxy], dict[str, Any]]
                ) -> Callable[[Run], dict[str, Any]]:
    """A scenario with a test host (`Origin`) whose names the server resolves, and the server
    to run it against; skipped where iproute2 is missing."""
    @functools.wraps(scenario)
    def run_with(run: Run) -> dict[str, Any]:
        if shutil.which("ip") is None:
            return {"skipped": "iproute2 (ip) is not installed"}
        origin = Origin(run.root)
        try:
            run.server_prefix = origin.prefix()
            return scenario(run, origin, run.serve())
        finally:
            origin.close()
    return run_with


@with_origin
def managed_network(run: Run, origin: Origin, proxy: Proxy) -> dict[str, Any]:
    """The user's `[features.network_proxy]`: codex sends `networkProxy` with every start and
    runs nothing on an executor that does not announce `networkProxyLaunch`."""
    model = run.codex([[shell("allowed", "curl -s -m 10 http://allowed.test/")],
                       [shell("blocked", "curl -s -m 10 http://blocked.test/")],
                       [shell("direct", f"curl -s -m 5 --noproxy '*' http://{ORIGIN}/ "
                                        "|| echo unreachable")],
                       [say("done")]], url=proxy.url, config=MANAGED_NETWORK)
    told = bytes(proxy.from_server).decode("utf-8", "replace")
    return {**run.facts(model), "decisions": told.count('"network/policyDecision"')}


@with_origin
def transparent_tcp(run: Run, origin: Origin, proxy: Proxy) -> dict[str, Any]:
    """`transparent_tcp = true`: codex runs nothing on an executor that does not announce
    `networkProxyTransparentTcp`; a program that ignores the proxy's variables still goes
    through its policy (an address not allowlisted is refused)."""
    config = MANAGED_NETWORK + "transparent_tcp = true\n"
    model = run.codex([[shell("proxied", "curl -s -m 10 http://allowed.test/")],
                       [shell("direct", f"curl -s -m 5 --noproxy '*' http://{ORIGIN}/ "
                                        "|| echo refused")],
                       [say("done")]], url=proxy.url, config=config)
    told = bytes(proxy.from_server).decode("utf-8", "replace")
    return {**run.facts(model), "socks5_tcp": told.count('"socks5_tcp"'),
            "transparent": '"networkProxyTransparentTcp":true' in told}


# An administrator's managed network, on the client's host: it applies with the network off.
REQUIREMENTS = """
[experimental_network]
enabled = true
allowed_domains = ["allowed.test", "review.test"]
denied_domains = ["blocked.test"]
review_domains = ["review.test"]
"""


def with_requirements(root: Path, hosts: Path | None = None) -> tuple[str, ...]:
    """A command prefix that runs codex with REQUIREMENTS as /etc/codex/requirements.toml: an
    overlay on /etc, in a mount namespace of its own, so this machine's /etc is not touched.
    ``hosts``: an /etc/hosts for codex too (its own policy checks resolve the names)."""
    layer = root / "etc-layer"
    layer.mkdir()
    script = ('mount -t tmpfs tmpfs "$0" && mkdir "$0/up" "$0/work" && '
              'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$0/up,workdir=$0/work" /etc '
              '&& mkdir -p /etc/codex && cat "$1" > /etc/codex/requirements.toml && '
              '{ [ -z "$2" ] || cat "$2" > /etc/hosts; } && shift 2 && exec "$@"')
    (root / "requirements.toml").write_text(REQUIREMENTS)
    return ("unshare", "-m", "sh", "-c", script, str(layer), str(root / "requirements.toml"),
            str(hosts or ""))


@with_origin
def admin_network(run: Run, origin: Origin, proxy: Proxy) -> dict[str, Any]:
    """An administrator's `[experimental_network]` with review domains: codex sends the proxy
    with the network off, and runs nothing on an executor that does not announce
    `networkProxyReviewDomains`. With no decider, a review domain is refused."""
    model = run.codex([[shell("allowed", "curl -s -m 10 http://allowed.test/")],
                       [shell("blocked", "curl -s -m 10 http://blocked.test/")],
                       [shell("review", "curl -s -m 10 http://review.test/")],
                       [say("done")]], url=proxy.url, prefix=with_requirements(run.root))
    told = bytes(proxy.from_server).decode("utf-8", "replace")
    return {**run.facts(model), "decisions": told.count('"network/policyDecision"')}


def server_messages(stream: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages in what a server sent through a Proxy: each connection's HTTP
    answer, then websocket frames (a server's are not masked), one message a text frame."""
    messages: list[dict[str, Any]] = []
    at = 0
    while at + 2 <= len(stream):
        if stream.startswith(b"HTTP/", at):
            at = stream.index(b"\r\n\r\n", at) + 4
            continue
        opcode, length, at = stream[at] & 0x0F, stream[at + 1] & 0x7F, at + 2
        if length >= 126:
            size = 2 if length == 126 else 8
            length, at = int.from_bytes(stream[at:at + size], "big"), at + size
        payload, at = stream[at:at + length], at + length
        if len(payload) < length:
            break  # cut off as the connection closed
        if opcode == 1:
            messages.append(json.loads(payload))
    return messages


def reviewed_action(body: dict[str, Any]) -> Any:
    """The action a Guardian request asks about: the JSON after its last "Network access JSON:"
    (or "Planned action JSON:"), each a text of its own in the request's input."""
    texts = [part.get("text", "") for item in body.get("input", []) if item.get("role") == "user"
             and isinstance(item.get("content"), list) for part in item["content"]]
    heads = [i for i, text in enumerate(texts)
             if text in ("Network access JSON:\n", "Planned action JSON:\n")]
    return json.loads(texts[heads[-1] + 1]) if heads and heads[-1] + 1 < len(texts) else None


# Approvals that go to codex's Guardian reviewer (a model request of its own) rather than to a
# user, whom `codex exec` has not: with managed network requirements, this is what makes codex
# set `policyDecisionTimeoutMs` and answer the server's `network/policyRequest` (an allowlist
# miss, or a review domain) with the Guardian's verdict. `never` would deny without asking.
AUTO_REVIEW = 'approval_policy = "on-request"\napprovals_reviewer = "auto_review"'


@with_origin
def review_decider(run: Run, origin: Origin, proxy: Proxy) -> dict[str, Any]:
    """The administrator's review domain, decided by codex: the server asks the client
    (`network/policyRequest`), codex asks its Guardian, whose verdict is the answer. Allowed
    once, the request goes through; denied the second time, it is refused."""
    model = run.codex([[shell("allowed", "curl -s -m 20 http://review.test/")],
                       [shell("denied", "curl -s -m 20 http://review.test/")],
                       [say("done")]], url=proxy.url,
                      prefix=with_requirements(run.root, origin.hosts), approvals=AUTO_REVIEW,
                      reviews=[verdict("allow"), verdict("deny", "scripted denial")])
    sent = server_messages(bytes(proxy.from_server))
    return {**run.facts(model),
            "policy_requests": [m for m in sent if m.get("method") == "network/policyRequest"],
            "decisions": [m["params"] for m in sent
                          if m.get("method") == "network/policyDecision"],
            "reviewed": [reviewed_action(body) for body in model.reviews]}


SCENARIOS: dict[str, Callable[[Run], dict[str, Any]]] = {
    f.__name__: f for f in [shell_exit_code, apply_patch, terminal_stdin, repository_skill,
                            resumed_connection, stdio_transport, bearer_token, tls_bearer_token,
                            wrong_token, read_only, read_only_under_tmp, workspace_write,
                            managed_network, admin_network, transparent_tcp, review_decider]
}


def loopback_only() -> None:
    """Bring up `lo` (down in a new network namespace), after making sure it is all there is."""
    with open("/proc/self/net/dev") as table:
        interfaces = {line.split(":")[0].strip() for line in table.readlines()[2:]}
    if interfaces != {"lo"}:
        sys.exit(f"refusing to run: this network namespace has {sorted(interfaces)}, not just lo")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def main(scenarios: dict[str, Callable[[Run], dict[str, Any]]], codex: str, server: str,
         base: str, *names: str) -> None:
    loopback_only()
    for name in names or scenarios:
        started = time.monotonic()
        run = Run(codex, server, Path(base), name)
        report: dict[str, Any] = {"name": name}
        try:
            report["facts"] = scenarios[name](run)
        except Exception:
            report["error"] = traceback.format_exc()
        report["logs"] = run.close()
        report["seconds"] = round(time.monotonic() - started, 2)
        print(json.dumps(report), flush=True)

