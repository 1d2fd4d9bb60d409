"""The other ends of a proxy room under test: origin servers on 127.0.0.1 (HTTP, TCP, UDP), a
raw SOCKS5 client, and `Policy`, the core's stand-in that answers each question from a table."""

from __future__ import annotations

import http.server
import json
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

REFUSAL_BODY = json.dumps({
    "status": "blocked", "host": "blocked.test", "reason": "denied", "decision": "deny",
    "source": "baseline_policy", "protocol": "http", "port": 80,
    "message": "Domain denied by the sandbox policy."}, separators=(",", ":")).encode()
REFUSAL = (403, [("Content-Type", "application/json"),
                 ("x-proxy-error", "blocked-by-denylist")], REFUSAL_BODY)
SOCKS_REFUSED = 2  # connection not allowed by ruleset


def pattern(size: int, offset: int = 0) -> bytes:
    """``size`` bytes of a repeating, position-dependent pattern (so a lost or reordered piece
    shows)."""
    block = bytes(range(251)) * 300
    start = offset % 251
    out = bytearray()
    while len(out) < size:
        out += block[start:start + size - len(out)]
        start = 0
    return bytes(out)


class Policy:
    """Answers the room's questions from ``rules`` (host -> "allow", "deny" or "hold": never
    answered), on the loop's owner, soon after being asked, as the core would."""

    def __init__(self, post: Callable[[Callable[[], None]], None]) -> None:
        self.rules: dict[str, str] = {}
        self.asked: list[Any] = []
        self.procs: list[int] = []  # whose connection each question was for
        self.room: Any = None
        self._post = post

    def ask(self, proc: int, question_id: int, question: Any) -> None:
        self.asked.append(question)
        self.procs.append(proc)
        rule = self.rules.get(question.host, "deny")
        if rule == "hold":
            return
        allow = rule == "allow"
        self._post(lambda: self.room.answer(question_id, allow, None if allow else REFUSAL,
                                            0 if allow else SOCKS_REFUSED))


class HttpOrigin:
    """An HTTP/1.1 origin: ``/hello``, ``/echo`` (POST), ``/big?n=N``; it records each request's
    path and headers."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                origin.seen.append((self.command, self.path,
                                    {k.lower(): v for k, v in self.headers.items()}))
                if self.path.startswith("/big?n="):
                    size = int(self.path.split("=", 1)[1])
                    self.send_response(200)
                    self.send_header("Content-Length", str(size))
                    self.end_headers()
                    step = 1 << 20
                    for at in range(0, size, step):
                        self.wfile.write(pattern(min(step, size - at), at))
                    return
                body = b"hello from origin"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Keep-Alive", "timeout=5")
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                origin.seen.append((self.command, self.path,
                                    {k.lower(): v for k, v in self.headers.items()}))
                body = self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class TcpOrigin:
    """A TCP server running ``serve(conn, origin)`` on a thread per connection."""

    def __init__(self, serve: Callable[[socket.socket, TcpOrigin], None],
                 host: str = "127.0.0.1") -> None:
        self.sent = 0
        self.received = 0
        self._serve = serve
        self._sock = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host
                                          else socket.AF_INET)
        self.port = self._sock.getsockname()[1]
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._open.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self._serve(conn, self)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._sock.close()
        for conn in self._open:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def echo(conn: socket.socket, origin: TcpOrigin) -> None:
    while data := conn.recv(65536):
        origin.received += len(data)
        conn.sendall(data)


def source(size: int) -> Callable[[socket.socket, TcpOrigin], None]:
    """Sends ``size`` pattern bytes, counting as it goes, then closes."""

    def serve(conn: socket.socket, origin: TcpOrigin) -> None:
        step = 256 << 10
        for at in range(0, size, step):
            piece = pattern(min(step, size - at), at)
            conn.sendall(piece)
            origin.sent += len(piece)

    return serve


def stall(conn: socket.socket, origin: TcpOrigin) -> None:
    """Reads nothing until its connection is shut down by `TcpOrigin.close`."""
    try:
        conn.recv(1, socket.MSG_PEEK)
        threading.Event().wait(30)
    except OSError:
        pass


class UdpEcho:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                data, source = self.sock.recvfrom(65535)
                self.sock.sendto(b"echo:" + data, source)
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        piece = sock.recv(size - len(out))
        if not piece:
            break
        out += piece
    return bytes(out)


def socks_address(host: str, port: int, kind: str) -> bytes:
    if kind == "ipv4":
        head = b"\x01" + socket.inet_pton(socket.AF_INET, host)
    elif kind == "ipv6":
        head = b"\x04" + socket.inet_pton(socket.AF_INET6, host)
    else:
        head = b"\x03" + bytes([len(host)]) + host.encode()
    return head + port.to_bytes(2, "big")


def socks_request(proxy: tuple[str, int], command: int, host: str, port: int,
                  kind: str) -> tuple[socket.socket, bytes]:
    """Greet (no auth), send one request, return the socket and the reply's bytes."""
    sock = socket.create_connection(proxy, timeout=10)
    sock.sendall(b"\x05\x01\x00")
    assert recv_exactly(sock, 2) == b"\x05\x00"
    sock.sendall(b"\x05" + bytes([command]) + b"\x00" + socks_address(host, port, kind))
    head = recv_exactly(sock, 4)
    if len(head) < 4:
        return sock, head
    rest = recv_exactly(sock, {1: 4, 4: 16}[head[3]] + 2)
    return sock, head + rest


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))
