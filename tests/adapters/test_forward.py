"""``execproto forward`` end to end: a dev server in a session's network, reached from the
server host as a browser would.

The server runs in a server host the test makes (`netns`, as test_session_network does), and
so do the ``execproto forward`` commands and the test's local clients. A dev server started
with ``process/start`` in a network-enabled sandbox answers HTTP (``/n``: a few bytes;
``/big``: 100 MB) and echoes on a second port. Through the forward: 20 requests at once; the
download with the server's memory bounded; either side's close closes the other; another
session's dev server is not reached; a flood of streams from one session leaves another's
requests fast; and when the session ends, then the server stops, nothing is left.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import pytest

from . import netns
from .conftest import ADAPTERS, Server
from .sandboxes import needs_bwrap, profile, start, uri
from .test_session_network import _gone, _watch
from .wsclient import output_of

pytestmark = [needs_bwrap,
              pytest.mark.skipif(netns.problem() is not None, reason=netns.problem() or ""),
              pytest.mark.skipif(shutil.which("pasta") is None,
                                 reason="pasta (Debian's passt) is not installed")]

ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
NETWORK = profile("/tmp", [ROOT_READ], network="enabled")
BIG = 100 << 20

# An HTTP server on PORT (/n: "ok", /big: BIG bytes) and an echo server on PORT + 1 that says
# "eof" on its stdout when a client's EOF comes, then closes.
DEV_SERVER = r"""
import socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, big = int(sys.argv[1]), int(sys.argv[2])
block = b"x" * (1 << 20)
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args): pass
    def do_GET(self):
        size = big if self.path == "/big" else 2
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.send_header("Connection", "close")
        self.end_headers()
        if size == 2:
            self.wfile.write(b"ok")
            return
        for _ in range(size // len(block)):
            self.wfile.write(block)
http = ThreadingHTTPServer(("127.0.0.1", port), H)
http.daemon_threads = True
echo = socket.create_server(("127.0.0.1", port + 1))
def serve_echo():
    while True:
        c, _ = echo.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()
def one(c):
    while True:
        data = c.recv(65536)
        if not data:
            print("eof", flush=True)
            c.close()
            return
        if data == b"bye\n":
            c.close()
            return
        c.sendall(data)
threading.Thread(target=serve_echo, daemon=True).start()
print("listening", flush=True)
http.serve_forever()
"""


@pytest.fixture(scope="module")
def world() -> Iterator[netns.Namespaces]:
    spaces = netns.Namespaces()
    yield spaces
    spaces.remove()


def dev_server(client: Any, process_id: str, port: int) -> None:
    reply = start(client, process_id, ["python3", "-c", DEV_SERVER, str(port), str(BIG)],
                  cwd=uri("/tmp"), env={"PATH": "/usr/bin:/bin"}, sandbox=NETWORK)
    assert "result" in reply, reply
    event = client.notification(lambda m: m.get("method") == "process/output"
                                and m["params"]["processId"] == process_id, timeout=15)
    assert output_of([event]) == {"stdout": b"listening\n"}, event


class Forward:
    """``execproto forward`` in the server host; ``ports``: the local ports it bound."""

    def __init__(self, world: netns.Namespaces, url: str, session: str, *remote: int) -> None:
        pairs = [f"0:{port}" for port in remote]
        self.process = subprocess.Popen(
            [*world.prefix(), sys.executable, "-m", "execproto.adapters", "forward", url,
             "--session", session, *pairs], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        assert self.process.stdout is not None
        self.ports = [int(self.process.stdout.readline().rsplit(":", 1)[1]) for _ in remote]

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=10)
        assert self.process.returncode == 128 + signal.SIGTERM, err
        return err


def dial(world: netns.Namespaces, port: int) -> socket.socket:
    sock = world.inside(world.server, lambda: socket.create_connection(("127.0.0.1", port),
                                                                        timeout=10))
    sock.settimeout(20)
    return sock


def until_eof(sock: socket.socket, keep: bool = True) -> tuple[bytes, int]:
    """Everything until EOF (or only its size, unless ``keep``)."""
    parts, size = [], 0
    while data := sock.recv(1 << 20):
        size += len(data)
        if keep:
            parts.append(data)
    return b"".join(parts), size


def get(world: netns.Namespaces, port: int, path: str = "/n") -> bytes:
    with dial(world, port) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: dev\r\n\r\n".encode())
        return until_eof(sock)[0]


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(x for x in status if x.startswith("VmRSS:"))
    return int(line.split()[1]) << 10


def test_a_dev_server_through_execproto_forward(world: netns.Namespaces) -> None:
    """The whole story on asyncio; the other adapters run the shorter one below."""
    server = Server("asyncio", "--session-ttl", "1", prefix=world.prefix())
    watched = _watch(world, server)  # this server's holders and pastas, not the other shard's
    forward = flood = None
    try:
        url_port = int(server.url.rsplit(":", 1)[1])
        first = world.inside(world.server, server.client)
        other = world.inside(world.server, server.client)
        third = world.inside(world.server, server.client)
        first_id, other_id = first.session_id, other.session_id  # type: ignore[attr-defined]
        dev_server(first, "dev", 3000)
        dev_server(other, "dev", 4000)
        dev_server(third, "flood", 5000)
        forward = Forward(world, server.url, first_id, 3000, 3001, 4000, url_port)
        web, echo, others, own = forward.ports

        # 20 requests at once, as a browser opening a page.
        answers: list[bytes] = []
        threads = [threading.Thread(target=lambda: answers.append(get(world, web)))
                   for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(answers) == 20 and all(a.endswith(b"\r\n\r\nok") for a in answers), answers

        # 100 MB, the server's memory bounded meanwhile.
        pid = server.process.pid
        base, peak, done = rss(pid), 0, threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss(pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        began = time.monotonic()
        with dial(world, web) as sock:
            sock.sendall(b"GET /big HTTP/1.1\r\nHost: dev\r\n\r\n")
            size = until_eof(sock, keep=False)[1]
        took = time.monotonic() - began
        done.set()
        sampler.join()
        assert size > BIG, size
        assert peak - base < 64 << 20, (base, peak)
        print(f"100 MB in {took:.2f} s; server RSS {base >> 20} -> {peak >> 20} MiB")

        # Our side closes: the dev server hears EOF. Its side closes: we see EOF.
        with dial(world, echo) as sock:
            sock.sendall(b"hi\n")
            assert sock.recv(16) == b"hi\n"
        event = first.notification(lambda m: m.get("method") == "process/output", timeout=10)
        assert output_of([event]) == {"stdout": b"eof\n"}, event
        with dial(world, echo) as sock:
            sock.sendall(b"bye\n")
            assert until_eof(sock)[0] == b""

        # Another session's dev server, and the server's own port, are not reached.
        for port in (others, own):
            with dial(world, port) as sock:
                assert until_eof(sock)[0] == b""

        # A flood of streams from one session leaves another's requests fast.
        flood = Forward(world, server.url, third.session_id, 5000)  # type: ignore[attr-defined]
        stop = threading.Event()
        flooding: list[socket.socket] = []

        def drink(sock: socket.socket) -> None:
            # A stream past the session's bound, or cut when the flood's forward stops, is
            # reset under it: that ends it quietly, not as an unhandled thread exception.
            with sock, suppress(OSError):
                sock.sendall(b"GET /big HTTP/1.1\r\nHost: dev\r\n\r\n")
                while not stop.is_set() and sock.recv(1 << 20):
                    pass

        for _ in range(80):  # more than a session may hold: the rest are refused
            flooding.append(dial(world, flood.ports[0]))
        drinkers = [threading.Thread(target=drink, args=(s,), daemon=True) for s in flooding]
        for thread in drinkers:
            thread.start()
        time.sleep(0.5)
        latencies = []
        for _ in range(40):
            began = time.monotonic()
            assert get(world, web).endswith(b"ok")
            latencies.append(time.monotonic() - began)
        stop.set()
        latencies.sort()
        p99 = latencies[int(len(latencies) * 0.99) - 1]
        print(f"p99 of 40 requests beside a flood of 80 streams: {p99 * 1000:.0f} ms")
        assert p99 < 1.0, latencies
        flood_err = flood.stop()
        flood = None
        assert "too many forwards" in flood_err, flood_err

        # The session ends: a stream into it closes.
        held = dial(world, echo)
        held.sendall(b"x")
        assert held.recv(1) == b"x"
        first.close()
        data, _ = until_eof(held)  # within the TTL and a little
        held.close()
        err = forward.stop()
        forward = None
        assert "Connection refused" in err, err  # the other session's port, and our own
        assert f"session {first_id} has ended" in err, err
        other.close()
        third.close()
        assert other_id
    finally:
        for running in (forward, flood):
            if running is not None:
                running.process.kill()
        log = server.stop()
    assert "Traceback" not in log, log
    _gone(watched)


@pytest.mark.parametrize("adapter", [a for a in ADAPTERS if a != "asyncio"])
def test_requests_and_closes_through_a_forward(adapter: str, world: netns.Namespaces) -> None:
    server = Server(adapter, prefix=world.prefix())
    watched = _watch(world, server)
    forward = None
    try:
        client = world.inside(world.server, server.client)
        dev_server(client, "dev", 3000)
        forward = Forward(world, server.url, client.session_id, 3000, 3001)  # type: ignore[attr-defined]
        web, echo = forward.ports
        answers: list[bytes] = []
        threads = [threading.Thread(target=lambda: answers.append(get(world, web)))
                   for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(answers) == 20 and all(a.endswith(b"ok") for a in answers), answers
        with dial(world, web) as sock:
            sock.sendall(b"GET /big HTTP/1.1\r\nHost: dev\r\n\r\n")
            assert until_eof(sock, keep=False)[1] > BIG
        with dial(world, echo) as sock:
            sock.sendall(b"hi\n")
            assert sock.recv(16) == b"hi\n"
        event = client.notification(lambda m: m.get("method") == "process/output", timeout=10)
        assert output_of([event]) == {"stdout": b"eof\n"}, event
        with dial(world, echo) as sock:
            sock.sendall(b"bye\n")
            assert until_eof(sock)[0] == b""
        forward.stop()
        forward = None
        client.close()
    finally:
        if forward is not None:
            forward.process.kill()
        log = server.stop()
    assert "Traceback" not in log, log
    _gone(watched)


def test_the_host_loopback_only_when_allowed_and_never_the_servers_port(
        world: netns.Namespaces) -> None:
    """With --host-network, sandboxes have no network of their own: a forward reaches the
    server host's loopback only under --forward-loopback, and never the server's own port."""
    service = world.inside(world.server, lambda: socket.create_server(("127.0.0.1", 0)))
    port = service.getsockname()[1]

    def serve() -> None:
        with suppress(OSError):  # until the test closes the socket it accepts on
            while True:
                conn = service.accept()[0]
                conn.sendall(b"host")
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    for allowed in (False, True):
        flags = ("--host-network", *(("--forward-loopback",) if allowed else ()))
        server = Server("trio", *flags, prefix=world.prefix())
        try:
            own = int(server.url.rsplit(":", 1)[1])
            client = world.inside(world.server, server.client)
            forward = Forward(world, server.url, client.session_id, port, own)  # type: ignore[attr-defined]
            with dial(world, forward.ports[0]) as sock:
                try:
                    got = until_eof(sock)[0]
                except TimeoutError:
                    forward.process.kill()
                    raise AssertionError(forward.process.communicate()) from None
                assert got == (b"host" if allowed else b"")
            with dial(world, forward.ports[1]) as sock:
                assert until_eof(sock)[0] == b""
            err = forward.stop()
            if allowed:
                assert f"port {own} is the server's own" in err, err
            else:
                assert "not started with --forward-loopback" in err, err
            client.close()
        finally:
            log = server.stop()
        assert "Traceback" not in log, log
    service.close()
