"""A sandbox allowed the network gets a network of its own, never the host's loopback.

The server runs in a server host the test makes (see `netns`), with a test host beside it: a
sandbox with the network enabled reaches the test host through pasta, and neither the server's
websocket port on loopback nor any sign of it in /proc/net/tcp. `--host-network` is the
operator's opt-in to the host's network, the control that shows the probe can reach loopback.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from . import netns
from .conftest import Server
from .namespaced import Namespace, pgrep
from .sandboxes import needs_bwrap, profile, run, workspace_write

pytestmark = [needs_bwrap,
              pytest.mark.skipif(netns.problem() is not None, reason=netns.problem() or ""),
              pytest.mark.skipif(shutil.which("pasta") is None,
                                 reason="pasta (Debian's passt) is not installed")]

ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}


def _probe(port: int, outside_port: int) -> str:
    return f"""python3 -c '
import socket
for name, address in (("outside", ("{netns.HOST_ADDRESS}", {outside_port})),
                      ("server", ("127.0.0.1", {port}))):
    try:
        s = socket.create_connection(address, timeout=3)
    except OSError as exc:
        print(name, "blocked", exc.errno)
        continue
    s.settimeout(0.5)
    try:
        said = s.recv(5).decode()
    except OSError:
        said = ""
    print(name, "REACHED" + (":" + said if said else ""))
with open("/proc/net/tcp") as table:
    print("listed", table.read().upper().count(":%04X " % {port}))
'"""


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[netns.Namespaces, Any]]:
    spaces = netns.Namespaces()
    listener = spaces.listener()
    stop = threading.Event()

    def serve() -> None:  # the test host: says hello to whoever connects, until stopped
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield spaces, listener
    stop.set()
    thread.join(5)
    listener.close()
    spaces.remove()


def _ask(world: tuple[netns.Namespaces, Any], sandbox: Any, *flags: str) -> dict[str, str]:
    spaces, listener = world
    server = Server("asyncio", *flags, prefix=spaces.prefix())
    try:
        client = spaces.inside(spaces.server, server.client)
        port = int(server.url.rsplit(":", 1)[1])
        ran = run(client, _probe(port, listener.getsockname()[1]), sandbox)
        client.close()
    finally:
        log = server.stop()
    assert "Traceback" not in log, log
    seen = dict(line.split(" ", 1) for line in ran.stdout.splitlines())
    assert set(seen) == {"outside", "server", "listed"}, ran
    return seen


def test_a_sandbox_with_the_network_reaches_out_but_not_the_servers_loopback(
        world: tuple[netns.Namespaces, Any]) -> None:
    seen = _ask(world, profile("/tmp", [ROOT_READ], network="enabled"))
    assert seen == {"outside": "REACHED:hello", "server": "blocked 111", "listed": "0"}, seen


def test_without_the_network_nothing_is_reached(world: tuple[netns.Namespaces, Any]) -> None:
    seen = _ask(world, workspace_write("/tmp"))
    assert seen["outside"] == "blocked 1" and seen["server"] == "blocked 1", seen  # EPERM


def test_the_operators_host_network_is_the_control(world: tuple[netns.Namespaces, Any]) -> None:
    seen = _ask(world, profile("/tmp", [ROOT_READ], network="enabled"), "--host-network")
    assert seen["outside"] == "REACHED:hello", seen
    assert seen["server"] == "REACHED" and seen["listed"] != "0", seen


def test_pasta_ends_with_its_sandbox(world: tuple[netns.Namespaces, Any]) -> None:
    # Only pastas in the server host: the other shard's come and go meanwhile.
    host = Namespace(f"/run/netns/{world[0].server}")
    try:
        before = pgrep("pasta --foreground", host)
        _ask(world, profile("/tmp", [ROOT_READ], network="enabled"))
        deadline = time.monotonic() + 5
        while pgrep("pasta --foreground", host) - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pgrep("pasta --foreground", host) - before
    finally:
        host.close()
