"""The managed network proxy, served: a sandboxed command reaches the network through it alone.

The server runs in a server host the test makes (`netns`), in a mount namespace of its own
where the test's hosts file names the test host (so names resolve without touching this
machine's /etc). A command started with Codex's `networkProxy` reaches an allowed name through
the proxy its environment names, gets the reference's 403 for a denied one, and the client
hears each decision; with `policyDecisionTimeoutMs` the client decides a miss. Every way
around the proxy fails: a direct connection, UDP (DNS to an outside server), IPv6, a raw
socket, a named unix socket on the host, the server's own port, and the host's addresses
through the proxy itself.
"""

from __future__ import annotations

import http.server
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from . import netns
from .conftest import ADAPTERS, STARVED, Server, eventually, start
from .namespaced import Namespace, pgrep
from .sandboxes import needs_bwrap, path_entry, profile
from .wsclient import Client, output_of

pytestmark = [needs_bwrap,
              pytest.mark.skipif(netns.problem() is not None, reason=netns.problem() or "")]

ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
TMP_WRITE = {"path": {"type": "special", "value": {"kind": "slash_tmp"}}, "access": "write"}
SANDBOX = profile("/tmp", [ROOT_READ, TMP_WRITE], network="enabled")
NAMES = ("allowed.test", "blocked.test", "other.test")
# The test host's address for the names: one the policy takes for public (198.51.100.0/24, a
# documentation range, is local to it). Traffic to it never leaves the namespaces the test
# made: the server host's only route out leads to the test host.
ORIGIN = "192.88.99.7"
PROXY: dict[str, Any] = {
    "enabled": True, "enableSocks5": True, "enableSocks5Udp": True, "allowUpstreamProxy": True,
    "dangerouslyAllowAllUnixSockets": False, "mode": "full", "allowLocalBinding": False,
    "domains": {"allowed.test": "allow", "blocked.test": "deny"}, "unixSockets": None,
}

# Each line: a request through the proxy its environment names, or an attempt around it.
SCRIPT = r"""
import json, os, socket, sys, urllib.request, urllib.error
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return "%d %s" % (answer.status, answer.read().decode())
    except urllib.error.HTTPError as exc:
        return "%d %s %s" % (exc.code, exc.headers.get("x-proxy-error"), exc.read().decode())
    except OSError as exc:
        return "failed %s" % exc
def attempt(make, *args):
    try:
        s = make()
        if args:
            s.settimeout(3)
            (s.connect if args[0] != "udp" else lambda a: s.sendto(b"q", a))(args[-1])
        return "OPEN"
    except OSError as exc:
        return "blocked %s" % exc.errno
for line in sys.argv[1:]:
    kind, _, what = line.partition(" ")
    if kind == "get":
        said = fetch(what)
    elif kind == "tcp":
        host, port = what.rsplit(":", 1)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        said = attempt(lambda: socket.socket(family), "tcp", (host.strip("[]"), int(port)))
    elif kind == "udp":
        host, port = what.rsplit(":", 1)
        said = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM), "udp",
                       (host, int(port)))
    elif kind == "raw":
        said = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1))
    elif kind == "unix":
        said = attempt(lambda: socket.socket(socket.AF_UNIX), "unix", what)
    elif kind == "env":
        said = os.environ.get(what, "")
    print(json.dumps([line, said]), flush=True)
"""


class Origin(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        body = f"hello from {self.headers.get('host')}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[netns.Namespaces, tuple[str, ...], str]]:
    spaces = netns.Namespaces()
    netns._ip("-n", spaces.host, "addr", "add", f"{ORIGIN}/32", "dev", "veth1")
    origin = spaces.inside(spaces.host, lambda: http.server.ThreadingHTTPServer(
        (ORIGIN, 80), Origin))
    thread = threading.Thread(target=origin.serve_forever, daemon=True)
    thread.start()
    folder = tempfile.mkdtemp(prefix="execproto-proxy-")
    hosts = os.path.join(folder, "hosts")
    with open(hosts, "w") as file:
        file.write(f"127.0.0.1 localhost\n{ORIGIN} {' '.join(NAMES)}\n")
    unix_path = os.path.join(folder, "host.sock")  # a host service on a named unix socket
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen()
    os.chmod(folder, 0o755)
    os.chmod(unix_path, 0o777)
    # The server's own mount namespace, with the test's hosts file in it.
    prefix = (*spaces.prefix(), "unshare", "-m", "sh", "-c",
              'mount --bind "$0" /etc/hosts && exec "$@"', hosts)
    try:
        yield spaces, prefix, unix_path
    finally:
        origin.shutdown()
        origin.server_close()
        unix.close()
        shutil.rmtree(folder, ignore_errors=True)
        spaces.remove()


def launch(client: Client, process_id: str, lines: list[str],
           timeout_ms: int | None = None) -> dict[str, Any]:
    proxy: dict[str, Any] = {"proxy": PROXY, "environmentId": "remote",
                             "executionId": process_id}
    if timeout_ms is not None:
        proxy["policyDecisionTimeoutMs"] = timeout_ms
    return start(client, process_id, ["python3", "-c", SCRIPT, *lines], sandbox=SANDBOX,
                 enforceManagedNetwork=True, managedNetwork=None, networkProxy=proxy,
                 env={"PATH": "/usr/bin:/bin"})


def said(client: Client, process_id: str,
         decisions: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """What the script printed, line by line; the decisions the client heard go to
    ``decisions``."""
    events = client.events_until_closed(process_id, timeout=60)
    if decisions is not None:
        decisions += [e["params"] for e in events if e["method"] == "network/policyDecision"]
    out = output_of(events)
    lines = out.get("stdout", b"").decode().splitlines()
    assert lines, out
    return dict(json.loads(line) for line in lines)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_proxy_is_the_sandboxs_only_way_out(
        adapter: str, world: tuple[netns.Namespaces, tuple[str, ...], str]) -> None:
    spaces, prefix, unix_path = world
    server = Server(adapter, prefix=prefix)
    try:
        port = int(server.url.rsplit(":", 1)[1])
        client = spaces.inside(spaces.server, server.client)
        lines = ["get http://allowed.test/", "get http://blocked.test/",
                 "get http://other.test/", f"get http://127.0.0.1:{port}/",
                 f"get http://{netns.SERVER_ADDRESS}:{port}/",
                 f"tcp {ORIGIN}:80", f"udp {ORIGIN}:53",
                 "tcp [2001:db8::2]:80", "raw", f"unix {unix_path}", f"tcp 127.0.0.1:{port}",
                 "env HTTP_PROXY", "env ALL_PROXY", "env CODEX_NETWORK_PROXY_ACTIVE"]
        reply = launch(client, "p", lines)
        assert reply.get("result", {}).get("sandboxType") == "linuxSeccomp", reply
        decisions: list[dict[str, Any]] = []
        seen = said(client, "p", decisions)
        client.close()
    finally:
        log = server.stop()
    assert "Traceback" not in log, log
    assert seen["get http://allowed.test/"] == "200 hello from allowed.test", seen
    blocked = seen["get http://blocked.test/"]
    assert blocked.startswith("403 blocked-by-denylist "), blocked
    assert json.loads(blocked.split(" ", 2)[2])["reason"] == "denied", blocked
    assert seen["get http://other.test/"].startswith("403 blocked-by-allowlist "), seen
    for local in (f"get http://127.0.0.1:{port}/", f"get http://{netns.SERVER_ADDRESS}:{port}/"):
        assert seen[local].startswith("403 "), seen  # the server, local: not through the proxy
    for around in (f"tcp {ORIGIN}:80", f"udp {ORIGIN}:53",
                   "tcp [2001:db8::2]:80", "raw", f"unix {unix_path}", f"tcp 127.0.0.1:{port}"):
        assert seen[around].startswith("blocked"), (around, seen)
    assert seen["env HTTP_PROXY"].startswith("http://127.0.0.1:"), seen
    assert seen["env ALL_PROXY"].startswith("socks5h://127.0.0.1:"), seen
    assert seen["env CODEX_NETWORK_PROXY_ACTIVE"] == "1", seen
    told = {(d["host"], d["decision"]) for d in decisions}
    assert {("allowed.test", "allow"), ("blocked.test", "deny"), ("other.test", "deny")} <= told


def test_the_client_decides_a_miss(
        world: tuple[netns.Namespaces, tuple[str, ...], str]) -> None:
    spaces, prefix, _ = world
    server = Server("asyncio", prefix=prefix)
    try:
        client = spaces.inside(spaces.server, server.client)
        launch(client, "d", ["get http://other.test/"], timeout_ms=10_000)
        request = client.notification(lambda m: m.get("method") == "network/policyRequest",
                                      timeout=20)
        assert request["params"] == {"processId": "d", "request": {
            "protocol": "http", "host": "other.test", "port": 80}}
        client.send({"jsonrpc": "2.0", "id": request["id"],
                     "result": {"decision": {"type": "allow"}}})
        seen = said(client, "d")
        client.close()
    finally:
        server.stop()
    assert seen["get http://other.test/"] == "200 hello from other.test", seen


def test_a_socks_client_goes_through_the_same_policy(
        world: tuple[netns.Namespaces, tuple[str, ...], str]) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    spaces, prefix, _ = world
    server = Server("trio", prefix=prefix)
    try:
        client = spaces.inside(spaces.server, server.client)
        script = ('curl -s --max-time 10 -x "$ALL_PROXY" http://allowed.test/; echo " $?"; '
                  'curl -s --max-time 10 -x "$ALL_PROXY" http://blocked.test/; echo " $?"')
        reply = start(client, "s", ["sh", "-c", script], sandbox=SANDBOX,
                      enforceManagedNetwork=True, networkProxy={"proxy": PROXY},
                      env={"PATH": "/usr/bin:/bin"})
        assert "result" in reply, reply
        out = output_of(client.events_until_closed("s", timeout=60))
        client.close()
    finally:
        server.stop()
    first, second = out.get("stdout", b"").decode().splitlines()
    assert first == "hello from allowed.test 0", out
    assert second.endswith(" 97"), out  # curl: the SOCKS5 proxy refused the connection


def test_without_a_sandbox_the_variables_are_advice(
        world: tuple[netns.Namespaces, tuple[str, ...], str]) -> None:
    spaces, prefix, _ = world
    server = Server("threads", prefix=prefix)
    try:
        client = spaces.inside(spaces.server, server.client)
        reply = start(client, "u", ["python3", "-c", SCRIPT, "get http://allowed.test/",
                                    f"tcp {ORIGIN}:80"],
                      enforceManagedNetwork=True, networkProxy={"proxy": PROXY},
                      env={"PATH": "/usr/bin:/bin"})
        assert reply.get("result", {}).get("sandboxType") == "none", reply
        seen = said(client, "u")
        client.close()
    finally:
        server.stop()
    assert seen == {"get http://allowed.test/": "200 hello from allowed.test",
                    f"tcp {ORIGIN}:80": "OPEN"}, seen


def _holders(server: Namespace) -> set[str]:
    """The holders (`_hold`) of the server whose mount namespace is ``server`` (each server
    here has its own, `world`'s ``unshare -m``; the other shard's servers start and end holders
    meanwhile), by their source's first line."""
    return pgrep("-I -S -c .*network namespace the server keeps", server)


def _running(command: str) -> bool:
    return subprocess.run(["pgrep", "-f", f"^{command}$"], capture_output=True,
                          timeout=10).returncode == 0


def test_nothing_is_left_of_the_proxy(
        world: tuple[netns.Namespaces, tuple[str, ...], str]) -> None:
    spaces, prefix, _ = world
    server = Server("asyncio", prefix=prefix)
    mounts = Namespace(f"/proc/{server.process.pid}/ns/mnt")
    try:
        client = spaces.inside(spaces.server, server.client)
        launch(client, "n", ["get http://allowed.test/"])
        assert said(client, "n") == {"get http://allowed.test/": "200 hello from allowed.test"}
        deadline = time.monotonic() + 10  # the finalize lets the process's network go
        while _holders(mounts) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _holders(mounts)
        client.close()
    finally:
        mounts.close()
        server.stop()


# Holds as many idle connections to its proxy as it is given (never sending a request), then
# sleeps: a sandbox trying to take the proxy from everyone else.
HOARD = r"""
import os, socket, sys, time
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
held = []
for _ in range(int(sys.argv[1])):
    try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=1))
    except OSError:
        break
print("holding", len(held), flush=True)
time.sleep(float(sys.argv[2]))
"""
# Times each of its GETs through the proxy, in turn.
TIMED = r"""
import time, urllib.request
took = []
for _ in range(10):
    began = time.monotonic()
    with urllib.request.urlopen("http://allowed.test/", timeout=20) as answer:
        answer.read()
    took.append(time.monotonic() - began)
print(max(took))
"""


def test_a_session_flooding_its_proxies_leaves_others_served(
        world: tuple[netns.Namespaces, tuple[str, ...], str]) -> None:
    """One session's ten processes each hold 100 idle connections to their proxies (more than
    the room's whole cap): another session's requests through its own proxy are still served,
    each well within STARVED (bench/ measures the 1 s target)."""
    spaces, prefix, _ = world
    server = Server("asyncio", prefix=prefix)
    try:
        attacker = spaces.inside(spaces.server, server.client)
        for index in range(10):
            reply = start(attacker, f"hoard-{index}", ["python3", "-c", HOARD, "100", "12"],
                          sandbox=SANDBOX, enforceManagedNetwork=True,
                          networkProxy={"proxy": PROXY}, env={"PATH": "/usr/bin:/bin"})
            assert "result" in reply, reply
        for index in range(10):  # every hoarder holds what it could get before the probe
            attacker.notification(lambda m, i=index: m.get("method") == "process/output"
                                  and m["params"]["processId"] == f"hoard-{i}", timeout=30)
        victim = spaces.inside(spaces.server, server.client)
        reply = start(victim, "timed", ["python3", "-c", TIMED], sandbox=SANDBOX,
                      enforceManagedNetwork=True, networkProxy={"proxy": PROXY},
                      env={"PATH": "/usr/bin:/bin"})
        assert "result" in reply, reply
        out = output_of(victim.events_until_closed("timed", timeout=120))
        attacker.close()
        victim.close()
    finally:
        server.stop()
    worst = float(out.get("stdout", b"nan").decode() or "nan")
    assert worst < STARVED, out


# A program that ignores proxy variables: resolves a name and connects to it directly.
DIRECT = r"""
import socket, sys
for name in sys.argv[1:]:
    try:
        address = socket.gethostbyname(name)
        with socket.create_connection((address, 80), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.0\r\nHost: " + name.encode() + b"\r\n\r\n")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        print(name, address.startswith("198.18.") or address.startswith("198.19."),
              answer.split(b"\r\n\r\n", 1)[-1].decode() or "closed")
    except OSError as exc:
        print(name, "failed", exc)
"""


def test_transparent_tcp_takes_programs_that_ignore_the_proxy(
        world: tuple[netns.Namespaces, tuple[str, ...], str]) -> None:
    spaces, prefix, _ = world
    server = Server("trio", prefix=prefix)
    try:
        client = spaces.inside(spaces.server, server.client)
        info = client.result("environment/info")
        if not info["capabilities"]["networkProxyTransparentTcp"]:
            pytest.skip("transparent TCP needs root, nftables (nft) and nsenter")
        # The sandbox asks DNS (the server's hosts file, which names the test host, is hidden
        # from it), as a program in a container would.
        hidden = profile("/tmp", [ROOT_READ, TMP_WRITE, path_entry("/etc/hosts", "none")],
                         network="enabled")
        reply = start(client, "t", ["python3", "-c", DIRECT, "allowed.test", "blocked.test"],
                      sandbox=hidden, enforceManagedNetwork=True,
                      networkProxy={"proxy": {**PROXY, "transparentTcp": True}},
                      env={"PATH": "/usr/bin:/bin", "NO_PROXY": "*"})
        assert "result" in reply, reply
        events = client.events_until_closed("t", timeout=60)
        client.close()
    finally:
        server.stop()
    lines = output_of(events).get("stdout", b"").decode().splitlines()
    # The name resolved to an address standing for it, and the connection went through the
    # policy by name: the allowed one answers, the denied one is reset before a byte.
    assert lines == ["allowed.test True hello from allowed.test",
                     "blocked.test failed [Errno 104] Connection reset by peer"], lines
    told = [(e["params"]["host"], e["params"]["protocol"], e["params"]["decision"])
            for e in events if e["method"] == "network/policyDecision"]
    assert told == [("allowed.test", "socks5_tcp", "allow"),
                    ("blocked.test", "socks5_tcp", "deny")], told


def test_the_capabilities_say_what_is_launched(
        world: tuple[netns.Namespaces, tuple[str, ...], str]) -> None:
    spaces, prefix, _ = world
    server = Server("asyncio", prefix=prefix)
    try:
        client = spaces.inside(spaces.server, server.client)
        capabilities = client.result("environment/info")["capabilities"]
        client.close()
    finally:
        server.stop()
    assert capabilities["networkProxyLaunch"] is True, capabilities
    assert capabilities["networkProxyReviewDomains"] is True, capabilities
    transparent = (os.geteuid() == 0 and shutil.which("nft", path="/usr/sbin:/usr/bin:/sbin:/bin")
                   is not None and shutil.which("nsenter") is not None)
    assert capabilities["networkProxyTransparentTcp"] is transparent, capabilities


def test_nothing_is_left_of_a_proxy_when_the_server_is_killed(
        world: tuple[netns.Namespaces, tuple[str, ...], str]) -> None:
    """A server SIGKILLed while a process behind its proxy runs: the process's private network
    (its holder) goes with it, and the process too."""
    spaces, prefix, _ = world
    sleep = f"sleep 60.{random.randrange(10**6, 10**7)}"  # this test's alone
    server = Server("threads", prefix=prefix)
    # Held open: a namespace made after the server's ends gets no holder of others counted.
    mounts = Namespace(f"/proc/{server.process.pid}/ns/mnt")
    try:
        try:
            client = spaces.inside(spaces.server, server.client)
            reply = start(client, "k", ["sh", "-c", f"echo up; exec {sleep}"], sandbox=SANDBOX,
                          enforceManagedNetwork=True, networkProxy={"proxy": PROXY},
                          env={"PATH": "/usr/bin:/bin"})
            assert "result" in reply, reply
            client.notification(lambda m: m.get("method") == "process/output", timeout=30)
            assert _holders(mounts), "no private network was made"
            assert eventually(lambda: _running(sleep)), "the process does not run"  # exec'd
        finally:
            server.stop(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (_holders(mounts) or _running(sleep)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _holders(mounts)
        assert not _running(sleep)
    finally:
        mounts.close()
