"""The managed network proxy's room, on a bare `Loop` of each adapter.

Real sockets on 127.0.0.1: origin servers started here, clients that are http.client, urllib or
raw sockets speaking HTTP and SOCKS5. The core is stood in for by `Policy`, which answers each
question from a table, as the room's contract says the core does; what the room does with the
answer is what is tested.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from execproto.adapters._proxy import Limits, ProxyRoom

from .proxy_loops import ADAPTERS, LoopThread, start, wait_for
from .proxy_peers import (
    REFUSAL_BODY,
    SOCKS_REFUSED,
    HttpOrigin,
    Policy,
    TcpOrigin,
    UdpEcho,
    echo,
    fds,
    pattern,
    recv_exactly,
    socks_address,
    socks_request,
    source,
    stall,
)

LIMITS = Limits(request_timeout=3.0, connect_timeout=2.0, lookup_timeout=2.0, linger=1.0)
MB = 1 << 20
SMALL_BUFFER = 64 << 10  # kernel buffers of the sockets a test controls, so the room's show


@pytest.fixture(params=ADAPTERS)
def runner(request: pytest.FixtureRequest) -> Iterator[LoopThread]:
    running = start(request.param)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def origin() -> Iterator[HttpOrigin]:
    server = HttpOrigin()
    yield server
    server.close()


@pytest.fixture(scope="module")
def echo_origin() -> Iterator[TcpOrigin]:
    server = TcpOrigin(echo)
    yield server
    server.close()


class Proxy:
    """A room on ``runner``, and a way to give a process its listeners."""

    def __init__(self, runner: LoopThread, limits: Limits = LIMITS) -> None:
        self.runner = runner
        self.policy = Policy(runner.loop.post)
        self.policy.rules.update({"127.0.0.1": "allow", "localhost": "allow", "::1": "allow",
                                  "blocked.test": "deny", "held.test": "hold"})
        self.room: ProxyRoom = runner.call(
            lambda: ProxyRoom(runner.loop, self.policy.ask, limits))
        self.policy.room = self.room

    def listen(self, proc: int, udp: bool = True, small: bool = False,
               ) -> tuple[tuple[str, int], tuple[str, int]]:
        made = []
        for _ in range(2):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if small:  # inherited by every accepted connection
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUFFER)
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)
            made.append(sock)
        http, socks = made
        self.runner.call(lambda: self.room.listen(proc, http, socks, udp))
        return http.getsockname(), socks.getsockname()

    def read(self, what: Callable[[ProxyRoom], Any]) -> Any:
        return self.runner.call(lambda: what(self.room))


def connect_tunnel(proxy: tuple[str, int], target: str, small: bool = False,
                   ) -> tuple[socket.socket, bytes]:
    """A CONNECT through the HTTP listener; the socket and the answer's head."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if small:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUFFER)
    sock.settimeout(10)
    sock.connect(proxy)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        piece = sock.recv(1)
        if not piece:
            break
        head += piece
    return sock, head


def read_all(sock: socket.socket) -> bytes:
    out = bytearray()
    while piece := sock.recv(65536):
        out += piece
    return bytes(out)


# -- HTTP ------------------------------------------------------------------------------------------


def test_get_forwarded_in_origin_form_with_keep_alive(runner: LoopThread,
                                                      origin: HttpOrigin) -> None:
    proxy = Proxy(runner)
    http_address, _ = proxy.listen(1)
    conn = http.client.HTTPConnection(*http_address, timeout=10)
    url = f"http://127.0.0.1:{origin.port}/hello?x=1"
    for _ in range(2):  # the second on the same connection
        conn.request("GET", url, headers={"Proxy-Authorization": "Basic eDp5",
                                          "Proxy-Connection": "keep-alive",
                                          "Connection": "keep-alive, X-Hop", "X-Hop": "1",
                                          "X-End": "2"})
        response = conn.getresponse()
        assert response.status == 200
        assert response.read() == b"hello from origin"
        assert response.getheader("Keep-Alive") is None  # hop-by-hop, not passed back
    assert proxy.read(lambda room: room.connections(1)) == 1  # one client connection, kept
    method, path, headers = origin.seen[-1]
    assert (method, path) == ("GET", "/hello?x=1")
    assert headers["host"] == f"127.0.0.1:{origin.port}"
    assert headers["x-end"] == "2"
    assert headers["connection"] == "close"
    assert not {"proxy-authorization", "proxy-connection", "x-hop"} & set(headers)
    asked = proxy.policy.asked[-1]
    assert (asked.protocol, asked.host, asked.port, asked.method) == (
        "http", "127.0.0.1", origin.port, "GET")
    assert asked.client == f"127.0.0.1:{conn.sock.getsockname()[1]}"
    assert asked.addresses == ("127.0.0.1",)
    # A body goes up, and a real client's proxy support works the same way.
    conn.request("POST", f"http://127.0.0.1:{origin.port}/echo", body=pattern(300_000))
    assert conn.getresponse().read() == pattern(300_000)
    conn.close()
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": "http://{}:{}".format(*http_address)}))
    with opener.open(f"http://localhost:{origin.port}/hello", timeout=10) as answer:
        assert answer.read() == b"hello from origin"
    assert proxy.policy.asked[-1].host == "localhost"
    assert "127.0.0.1" in proxy.policy.asked[-1].addresses


def test_connect_tunnel_carries_bytes_both_ways_and_ends_with_either_side(
        runner: LoopThread, echo_origin: TcpOrigin) -> None:
    proxy = Proxy(runner)
    http_address, _ = proxy.listen(1)
    sock, head = connect_tunnel(http_address, f"127.0.0.1:{echo_origin.port}")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert proxy.policy.asked[-1].protocol == "https_connect"
    assert proxy.policy.asked[-1].method == "CONNECT"
    payload = pattern(2 * MB)
    sender = threading.Thread(target=sock.sendall, args=(payload,))
    sender.start()
    assert recv_exactly(sock, len(payload)) == payload
    sender.join()
    sock.close()  # the client's end ends the upstream connection too
    assert wait_for(lambda: proxy.read(lambda room: room.connections()) == 0)

    closing = TcpOrigin(source(10))  # the origin's end ends the client's connection
    try:
        sock, head = connect_tunnel(http_address, f"127.0.0.1:{closing.port}")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert read_all(sock) == pattern(10)
        sock.close()
    finally:
        closing.close()


def test_refusal_is_written_as_given_then_closed(runner: LoopThread) -> None:
    proxy = Proxy(runner)
    http_address, _ = proxy.listen(1)
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": "http://{}:{}".format(*http_address)}))
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open("http://blocked.test/path", timeout=10)
    assert refused.value.code == 403
    assert refused.value.headers["x-proxy-error"] == "blocked-by-denylist"
    assert refused.value.headers["Content-Type"] == "application/json"
    assert refused.value.read() == REFUSAL_BODY
    asked = proxy.policy.asked[-1]
    assert (asked.protocol, asked.host, asked.port, asked.addresses) == (
        "http", "blocked.test", 80, ())  # the name does not resolve: the core decides that too

    sock, head = connect_tunnel(http_address, "blocked.test:443")
    assert head.startswith(b"HTTP/1.1 403 ")
    assert read_all(sock) == REFUSAL_BODY  # then the connection closes
    sock.close()


def raw_exchange(address: tuple[str, int], data: bytes) -> bytes:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(data)
        return read_all(sock)


def test_bad_request_400_large_head_431_unreachable_upstream_502(runner: LoopThread) -> None:
    proxy = Proxy(runner)
    http_address, _ = proxy.listen(1)
    assert raw_exchange(http_address, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
        b"HTTP/1.1 400 ")
    assert raw_exchange(http_address, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    huge = b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: a\r\nX: " + b"a" * LIMITS.header_bytes
    assert raw_exchange(http_address, huge + b"\r\n\r\n").startswith(b"HTTP/1.1 431 ")
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there
    assert raw_exchange(http_address, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n"
                        f"Host: 127.0.0.1\r\n\r\n".encode()).startswith(b"HTTP/1.1 502 ")
    assert proxy.policy.asked[-1].port == port  # asked, allowed, then failed to connect


# -- SOCKS5 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["name", "ipv4", "ipv6"])
def test_socks_connect(runner: LoopThread, echo_origin: TcpOrigin, kind: str) -> None:
    proxy = Proxy(runner)
    _, socks_address_ = proxy.listen(1)
    target = echo_origin
    host = {"name": "localhost", "ipv4": "127.0.0.1", "ipv6": "::1"}[kind]
    if kind == "ipv6":
        target = TcpOrigin(echo, host="::1")
    try:
        sock, reply = socks_request(socks_address_, 1, host, target.port, kind)
        assert reply[:2] == b"\x05\x00", reply
        sock.sendall(b"hello over socks")
        assert recv_exactly(sock, 16) == b"hello over socks"
        sock.close()
    finally:
        if target is not echo_origin:
            target.close()
    asked = proxy.policy.asked[-1]
    assert (asked.protocol, asked.host, asked.port, asked.method) == (
        "socks5_tcp", host, target.port, None)
    assert ("127.0.0.1" if kind == "name" else host) in asked.addresses


def test_socks_refusal_replies_the_code_given(runner: LoopThread) -> None:
    proxy = Proxy(runner)
    _, socks_at = proxy.listen(1)
    sock, reply = socks_request(socks_at, 1, "blocked.test", 443, "name")
    assert reply[:2] == bytes([5, SOCKS_REFUSED])
    assert read_all(sock) == b""  # and closed
    sock.close()
    sock, reply = socks_request(socks_at, 2, "127.0.0.1", 443, "ipv4")  # BIND
    assert reply[:2] == b"\x05\x07"
    sock.close()


def relay_of(reply: bytes) -> tuple[str, int]:
    """The address a UDP ASSOCIATE's reply names (IPv4)."""
    return socket.inet_ntop(socket.AF_INET, reply[4:8]), int.from_bytes(reply[8:10], "big")


def udp_associate(socks_at: tuple[str, int]) -> tuple[socket.socket, bytes]:
    return socks_request(socks_at, 3, "0.0.0.0", 0, "ipv4")


def test_udp_associate_relays_allowed_destinations_when_on(runner: LoopThread) -> None:
    proxy = Proxy(runner)
    _, socks_at = proxy.listen(1, udp=True)
    remote = UdpEcho()
    control, reply = udp_associate(socks_at)
    try:
        assert reply[:2] == b"\x05\x00"
        relay = relay_of(reply)
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.bind(("127.0.0.1", 0))
        client.settimeout(5)
        header = b"\0\0\0" + socks_address("127.0.0.1", remote.port, "ipv4")
        for word in (b"one", b"two"):
            client.sendto(header + word, relay)
            data, _ = client.recvfrom(65535)
            assert data == header + b"echo:" + word  # from the remote, its address in front
        denied = b"\0\0\0" + socks_address("blocked.test", 9, "name")
        client.sendto(denied + b"x", relay)
        client.sendto(header + b"three", relay)
        assert client.recvfrom(65535)[0] == header + b"echo:three"  # and nothing else came
        def udp_asked() -> list[tuple[str, int]]:
            return [(q.host, q.port) for q in proxy.policy.asked if q.protocol == "socks5_udp"]

        wait_for(lambda: len(udp_asked()) == 2)  # the name is looked up first
        assert udp_asked() == [("127.0.0.1", remote.port), ("blocked.test", 9)]  # each once
        client.close()
    finally:
        control.close()
        remote.close()
    assert wait_for(lambda: proxy.read(lambda room: room.connections()) == 0)


def test_udp_associate_is_not_supported_when_off(runner: LoopThread) -> None:
    proxy = Proxy(runner)
    _, socks_at = proxy.listen(1, udp=False)
    control, reply = udp_associate(socks_at)
    assert reply[:2] == b"\x05\x07"
    control.close()


# -- bounds ----------------------------------------------------------------------------------------


def test_50_mb_through_a_paused_reader_stays_within_the_buffer(runner: LoopThread) -> None:
    size = 50 * MB
    proxy = Proxy(runner)
    http_address, _ = proxy.listen(1, small=True)
    big = TcpOrigin(source(size))
    try:
        sock, head = connect_tunnel(http_address, f"127.0.0.1:{big.port}", small=True)
        assert head.startswith(b"HTTP/1.1 200 ")
        time.sleep(0.5)  # the client reads nothing yet: the room must stop reading the origin
        held_back = big.sent
        assert held_back < 8 * MB, held_back
        got = 0
        while piece := sock.recv(1 << 20):
            assert piece == pattern(len(piece), got)
            got += len(piece)
        sock.close()
    finally:
        big.close()
    assert got == size
    peak = proxy.read(lambda room: room.peak_buffered)
    assert 0 < peak <= LIMITS.buffer, peak


def test_a_reader_that_stops_pauses_the_writer(runner: LoopThread) -> None:
    """The origin reads nothing: the client's sends must block, not fill the room."""
    proxy = Proxy(runner)
    http_address, _ = proxy.listen(1, small=True)
    stuck = TcpOrigin(stall)
    try:
        sock, head = connect_tunnel(http_address, f"127.0.0.1:{stuck.port}", small=True)
        assert head.startswith(b"HTTP/1.1 200 ")
        sock.setblocking(False)
        sent, chunk, quiet_since = 0, b"u" * 65536, time.monotonic()
        while sent < 64 * MB and time.monotonic() - quiet_since < 0.5:
            try:
                sent += sock.send(chunk)
                quiet_since = time.monotonic()
            except BlockingIOError:
                time.sleep(0.01)
        assert sent < 8 * MB, sent  # it blocked, with the room holding at most its buffer
        assert proxy.read(lambda room: room.buffered) <= LIMITS.buffer
        assert proxy.read(lambda room: room.peak_buffered) <= LIMITS.buffer
        sock.close()
    finally:
        stuck.close()


def test_per_process_cap_makes_only_that_process_wait(runner: LoopThread,
                                                      echo_origin: TcpOrigin,
                                                      origin: HttpOrigin) -> None:
    proxy = Proxy(runner, Limits(per_process=3, request_timeout=5.0, linger=1.0))
    first, _ = proxy.listen(1)
    second, _ = proxy.listen(2)
    tunnels = [connect_tunnel(first, f"127.0.0.1:{echo_origin.port}")[0] for _ in range(3)]
    extra = socket.create_connection(first, timeout=0.5)  # the kernel's backlog takes it
    extra.sendall(f"GET http://127.0.0.1:{origin.port}/hello HTTP/1.1\r\n"
                  f"Host: x\r\nConnection: close\r\n\r\n".encode())
    with pytest.raises(socket.timeout):
        extra.recv(1)  # waits behind its own process's three
    conn = http.client.HTTPConnection(*second, timeout=5)  # another process's is served
    conn.request("GET", f"http://127.0.0.1:{origin.port}/hello")
    assert conn.getresponse().read() == b"hello from origin"
    conn.close()
    assert proxy.read(lambda room: room.connections(1)) == 3
    assert proxy.policy.procs == [1, 1, 1, 2]  # each question names its process
    tunnels.pop().close()  # room for one more of the first process's
    extra.settimeout(5)
    assert read_all(extra).startswith(b"HTTP/1.1 200 ")
    for sock in [*tunnels, extra]:
        sock.close()


@pytest.mark.parametrize("how", ["close", "close_all"])
def test_closing_leaves_no_descriptor_or_watch(runner: LoopThread, echo_origin: TcpOrigin,
                                               origin: HttpOrigin, how: str) -> None:
    proxy = Proxy(runner)
    fds_before, watches_before = fds(), runner.watches()
    http_address, socks_at = proxy.listen(7, udp=True)
    kept = http.client.HTTPConnection(*http_address, timeout=5)  # a kept-alive client
    kept.request("GET", f"http://127.0.0.1:{origin.port}/hello")
    assert kept.getresponse().read() == b"hello from origin"
    tunnel, head = connect_tunnel(http_address, f"127.0.0.1:{echo_origin.port}")
    assert head.startswith(b"HTTP/1.1 200 ")
    socks, reply = socks_request(socks_at, 1, "127.0.0.1", echo_origin.port, "ipv4")
    assert reply[1] == 0
    control, reply = udp_associate(socks_at)
    assert reply[1] == 0
    remote = UdpEcho()  # a datagram relayed, so the association has its outward socket too
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.settimeout(5)
    client.bind(("127.0.0.1", 0))
    client.sendto(b"\0\0\0" + socks_address("127.0.0.1", remote.port, "ipv4") + b"hi",
                  relay_of(reply))
    assert client.recvfrom(100)[0].endswith(b"echo:hi")
    client.close()
    remote.close()
    held = socket.create_connection(http_address, timeout=5)  # its question never answered
    held.sendall(b"GET http://held.test/ HTTP/1.1\r\nHost: held.test\r\n\r\n")
    half = socket.create_connection(http_address, timeout=5)
    half.sendall(b"GET http://127.0.0.1/ HTTP/1.1\r\n")
    assert wait_for(lambda: proxy.read(lambda room: room.questions) == 1)
    assert proxy.read(lambda room: room.connections(7)) == 6

    if how == "close":
        runner.call(lambda: proxy.room.close(7))
    else:
        runner.call(proxy.room.close_all)
    clients = [kept.sock, tunnel, socks, control, held, half]
    for sock in clients:
        sock.settimeout(5)
        assert read_all(sock) == b""  # each one closed by the room
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(http_address, timeout=5)
    assert proxy.read(lambda room: (room.connections(), room.questions, room.buffered)) == (
        0, 0, 0)
    for sock in clients:
        sock.close()
    kept.close()
    assert wait_for(lambda: fds() <= fds_before), (fds(), fds_before)
    assert runner.watches() == watches_before


def test_a_half_finished_request_times_out(runner: LoopThread, origin: HttpOrigin) -> None:
    proxy = Proxy(runner, Limits(request_timeout=0.5, linger=1.0))
    http_address, socks_at = proxy.listen(1)
    started = time.monotonic()
    answer = raw_exchange(http_address, b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0")
    took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert 0.4 < took < 3, took
    started = time.monotonic()  # a body that stops coming
    answer = raw_exchange(http_address, f"POST http://127.0.0.1:{origin.port}/echo HTTP/1.1\r\n"
                          "Host: x\r\nContent-Length: 100\r\n\r\nonly ten..".encode())
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert 0.4 < time.monotonic() - started < 3
    started = time.monotonic()
    with socket.create_connection(socks_at, timeout=5) as sock:
        sock.sendall(b"\x05\x01\x00")
        assert recv_exactly(sock, 2) == b"\x05\x00"
        assert read_all(sock) == b""  # no request came: closed
    assert 0.4 < time.monotonic() - started < 3
    assert proxy.read(lambda room: room.connections()) == 0
    assert [question.host for question in proxy.policy.asked] == ["127.0.0.1"]  # the POST
