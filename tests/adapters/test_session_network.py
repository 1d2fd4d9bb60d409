"""A session's sandboxes with the network share one network, as commands on one machine do.

The server runs in a server host the test makes (`netns`), with a test host beside it and,
for the attacks, a second interface and a service of the server host's own listening on every
address. One command serves on 127.0.0.1; the session's next command reaches it, another
session's does not, and neither reaches the server host's own addresses (the second
interface, its link-local IPv6 address) nor its loopback. A server host with loopback only
still runs network-enabled commands. When the session ends, or the server stops or is
killed, nothing of its network is left.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from . import netns
from .conftest import ADAPTERS, Server
from .namespaced import Namespace, pgrep
from .sandboxes import needs_bwrap, profile, run, start, uri
from .wsclient import output_of

pytestmark = [needs_bwrap,
              pytest.mark.skipif(netns.problem() is not None, reason=netns.problem() or ""),
              pytest.mark.skipif(shutil.which("pasta") is None,
                                 reason="pasta (Debian's passt) is not installed")]

ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
NETWORK = profile("/tmp", [ROOT_READ], network="enabled")
SECOND = "203.0.113.7"  # TEST-NET-3, on a second interface of the server host
HOST_PORT = 7100  # the server host's own service, on every address

# A dev server: answers "dev:<tag>" to each connection on 127.0.0.1:PORT.
DEV_SERVER = """python3 -c '
import socket, sys
s = socket.create_server(("127.0.0.1", {port}))
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"dev:{tag}")
    c.close()
'"""

# Connects to each address given and says what happened.
PROBE = """python3 -c '
import socket, sys
for spec in sys.argv[1:]:
    host, port = spec.rsplit(":", 1)
    try:
        s = socket.create_connection((host.strip("[]"), int(port)), timeout=3)
    except OSError as exc:
        print(spec, "blocked", exc.errno)
        continue
    s.settimeout(1)
    try:
        said = s.recv(16).decode()
    except OSError:
        said = ""
    print(spec, "REACHED:" + said)
' {targets}"""


def _serve_everywhere(sock: socket.socket, stop: threading.Event) -> None:
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            continue
        with conn:
            conn.sendall(b"host")  # the server host's service, and the test host's


@pytest.fixture(scope="module")
def world() -> Iterator[netns.Namespaces]:
    spaces = netns.Namespaces()
    try:
        netns._ip("-n", spaces.server, "link", "add", "second", "type", "veth", "peer", "name",
                  "second-peer")
        netns._ip("-n", spaces.server, "addr", "add", f"{SECOND}/32", "dev", "second")
        for device in ("second", "second-peer"):
            netns._ip("-n", spaces.server, "link", "set", device, "up")
        v4 = spaces.inside(spaces.server, lambda: socket.create_server(("0.0.0.0", HOST_PORT)))
        v6 = spaces.inside(spaces.server, lambda: socket.create_server(
            ("::", HOST_PORT), family=socket.AF_INET6, dualstack_ipv6=False))
        outside = spaces.inside(spaces.host, lambda: socket.create_server(
            (netns.HOST_ADDRESS, HOST_PORT)))
    except BaseException:
        spaces.remove()
        raise
    stop = threading.Event()
    threads = [threading.Thread(target=_serve_everywhere, args=(s, stop), daemon=True)
               for s in (v4, v6, outside)]
    for thread in threads:
        thread.start()
    yield spaces
    stop.set()
    for thread in threads:
        thread.join(5)
    for sock in (v4, v6, outside):
        sock.close()
    spaces.remove()


def _link_local(spaces: netns.Namespaces) -> str | None:
    shown = subprocess.run(["ip", "-n", spaces.server, "-6", "-o", "addr", "show", "dev",
                            "veth0", "scope", "link"], capture_output=True, text=True,
                           timeout=10).stdout.split()
    for index, word in enumerate(shown):
        if word == "inet6":
            return shown[index + 1].split("/")[0]
    return None


def _dev_server(client: Any, process_id: str, port: int, tag: str) -> None:
    reply = start(client, process_id, ["sh", "-c", DEV_SERVER.format(port=port, tag=tag)],
                  cwd=uri("/tmp"), env={"PATH": "/usr/bin:/bin"}, sandbox=NETWORK)
    assert "result" in reply, reply
    event = client.notification(lambda m: m.get("method") == "process/output"
                                and m["params"]["processId"] == process_id, timeout=15)
    assert output_of([event]) == {"stdout": b"listening\n"}, event


def _probe(client: Any, *targets: str) -> dict[str, str]:
    ran = run(client, PROBE.format(targets=" ".join(targets)), NETWORK)
    seen = dict(line.split(" ", 1) for line in ran.stdout.splitlines())
    assert set(seen) == set(targets), ran
    return seen


def _watch(world: netns.Namespaces, server: Server) -> tuple[Namespace, ...]:
    """Where the server's holders and pastas are: its own mount namespace (`ip netns exec`
    makes one) and the server host's network. The other shard's servers start and end theirs
    meanwhile, elsewhere."""
    return (Namespace(f"/proc/{server.process.pid}/ns/mnt"),
            Namespace(f"/run/netns/{world.server}"))


def _holders(watched: tuple[Namespace, ...]) -> set[str]:
    return pgrep("pasta --foreground|-I -S -c .*network namespace", *watched)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_next_command_reaches_a_dev_server_and_nothing_of_the_host(
        adapter: str, world: netns.Namespaces) -> None:
    server = Server(adapter, prefix=world.prefix())
    watched = _watch(world, server)
    try:
        port = int(server.url.rsplit(":", 1)[1])
        first = world.inside(world.server, server.client)
        other = world.inside(world.server, server.client)
        _dev_server(first, "dev", 3000, "first")
        _dev_server(other, "dev", 3001, "other")
        link_local = _link_local(world)
        targets = ["127.0.0.1:3000", "127.0.0.1:3001", f"{SECOND}:{HOST_PORT}",
                   f"{netns.SERVER_ADDRESS}:{HOST_PORT}", f"{netns.SERVER_ADDRESS}:{port}",
                   f"127.0.0.1:{port}", f"{netns.HOST_ADDRESS}:{HOST_PORT}"]
        if link_local is not None:
            targets.append(f"[{link_local}%veth0]:{HOST_PORT}")  # pasta names it so
        seen = _probe(first, *targets)
        assert seen.pop("127.0.0.1:3000") == "REACHED:dev:first", seen  # the session's own
        assert seen.pop("127.0.0.1:3001").startswith("blocked"), seen  # another session's
        # The outside world: the test host answers as the server host's services do.
        assert seen.pop(f"{netns.HOST_ADDRESS}:{HOST_PORT}") == "REACHED:host", seen
        # Nothing of the server host: its other interface, its own address, its link-local
        # address, its loopback, the server's port on any of them.
        assert all(not said.startswith("REACHED") for said in seen.values()), seen
        other_seen = _probe(other, "127.0.0.1:3001", "127.0.0.1:3000")
        assert other_seen == {"127.0.0.1:3001": "REACHED:dev:other",
                              "127.0.0.1:3000": "blocked 111"}, other_seen
        first.close()
        other.close()
    finally:
        log = server.stop()
    assert "Traceback" not in log, log
    _gone(watched)


def _gone(watched: tuple[Namespace, ...]) -> None:
    try:
        deadline = time.monotonic() + 10
        while _holders(watched) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _holders(watched)
    finally:
        for space in watched:
            space.close()


def test_the_network_ends_with_the_session(world: netns.Namespaces) -> None:
    server = Server("asyncio", "--session-ttl", "0.5", prefix=world.prefix())
    watched = _watch(world, server)
    try:
        client = world.inside(world.server, server.client)
        ran = run(client, "echo hi", NETWORK)
        assert ran.stdout == "hi\n", ran
        assert _holders(watched), "no session network was made"
        client.close()
        _gone(watched)  # detached, then expired: the holder and pasta are gone
    finally:
        server.stop()


def test_nothing_is_left_after_a_server_killed(world: netns.Namespaces) -> None:
    server = Server("threads", prefix=world.prefix())
    watched = _watch(world, server)
    try:
        client = world.inside(world.server, server.client)
        _dev_server(client, "dev", 3000, "kept")
        assert _holders(watched)
    finally:
        server.stop(signal.SIGKILL)  # a failure above must not leave the server running
    _gone(watched)


def test_a_loopback_only_host_runs_network_commands_in_one_network(
        world: netns.Namespaces) -> None:
    name = f"execproto-lo-{uuid.uuid4().hex[:6]}"
    netns._ip("netns", "add", name)
    try:
        netns._ip("-n", name, "link", "set", "lo", "up")
        server = Server("trio", prefix=("ip", "netns", "exec", name))
        try:
            client = world.inside(name, server.client)
            _dev_server(client, "dev", 3000, "alone")
            seen = _probe(client, "127.0.0.1:3000", f"{netns.HOST_ADDRESS}:80")
            assert seen["127.0.0.1:3000"] == "REACHED:dev:alone", seen
            assert seen[f"{netns.HOST_ADDRESS}:80"].startswith("blocked"), seen
            client.close()
        finally:
            log = server.stop()
        assert log.count("no routable interface") == 1, log
        assert "Traceback" not in log, log
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
