"""Transparent TCP in the proxy room, on a bare `Loop` of each adapter: the DNS responder that
gives synthetic addresses, and the listener that takes redirected connections and asks about
them by name.

No nftables here: the room is given a stand-in for ``SO_ORIGINAL_DST`` that maps a client's
own address (bound before it connects) to the destination the test says it was going to. DNS
questions are written and read with this file's own bytes, not the room's encoder.
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from execproto.adapters._proxy import Limits, ProxyRoom
from execproto.adapters._proxy._dns import Names, respond

from .proxy_loops import ADAPTERS, LoopThread, start, wait_for
from .proxy_peers import Policy, TcpOrigin, echo, fds, pattern, recv_exactly, source

LIMITS = Limits(request_timeout=3.0, connect_timeout=2.0, lookup_timeout=2.0, linger=1.0)
MB = 1 << 20
A, AAAA, MX, OPT = 1, 28, 15, 41
NOERROR, FORMERR, NOTIMP, REFUSED = 0, 1, 4, 5
CLONE_NEWNET = 0x40000000


@pytest.fixture(params=ADAPTERS)
def runner(request: pytest.FixtureRequest) -> Iterator[LoopThread]:
    running = start(request.param)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def echo_origin() -> Iterator[TcpOrigin]:
    server = TcpOrigin(echo)
    yield server
    server.close()


# -- DNS's bytes, written and read here -----------------------------------------------------------


def dns_query(name: str, qtype: int = A, ident: int = 0x4242, flags: int = 0x0100,
              qclass: int = 1, edns: bool = False) -> bytes:
    qname = b"".join(bytes([len(label)]) + label.encode()
                     for label in name.rstrip(".").split(".") if label) + b"\0"
    opt = b"\0" + struct.pack("!HHIH", OPT, 1232, 0, 0) if edns else b""
    return (struct.pack("!HHHHHH", ident, flags, 1, 0, 0, 1 if edns else 0) + qname
            + struct.pack("!HH", qtype, qclass) + opt)


def dns_reply(data: bytes) -> tuple[int, int, bytes, list[tuple[int, int, int, bytes]]]:
    """(id, flags, the question's bytes, [(type, class, TTL, data)]) of an answer."""
    ident, flags, questions, answers, _, _ = struct.unpack_from("!HHHHHH", data)
    at = 12
    if questions:
        assert questions == 1
        while data[at]:
            at += 1 + data[at]
        at += 5
    question = data[12:at]
    records = []
    for _ in range(answers):
        assert data[at:at + 2] == b"\xc0\x0c"  # the question's name
        kind, klass, ttl, size = struct.unpack_from("!HHIH", data, at + 2)
        at += 12
        records.append((kind, klass, ttl, data[at:at + size]))
        at += size
    assert at == len(data)
    return ident, flags, question, records


class Room:
    """A room on ``runner`` whose transparent connections' destinations the test gives."""

    def __init__(self, runner: LoopThread, limits: Limits = LIMITS) -> None:
        self.runner = runner
        self.policy = Policy(runner.loop.post)
        self.policy.rules.update({"127.0.0.1": "allow", "localhost": "allow",
                                  "blocked.test": "deny", "held.test": "hold"})
        self.destinations: dict[tuple[str, int], tuple[str, int]] = {}
        self.room: ProxyRoom = runner.call(
            lambda: ProxyRoom(runner.loop, self.policy.ask, limits, self._destination))
        self.policy.room = self.room

    def _destination(self, sock: socket.socket) -> tuple[str, int]:
        try:
            return self.destinations[sock.getpeername()]
        except KeyError:
            raise OSError("no original destination") from None

    def listen(self, proc: int, dns: bool = True) -> tuple[tuple[str, int], tuple[str, int]]:
        """The process's transparent listener's address, and its DNS socket's."""
        http = socket.create_server(("127.0.0.1", 0))
        listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        resolver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        resolver.bind(("127.0.0.1", 0))
        listener_at, resolver_at = listener.getsockname(), resolver.getsockname()
        self.runner.call(lambda: self.room.listen(proc, http, None, False, transparent=listener,
                                                  dns=resolver if dns else None))
        if not dns:
            resolver.close()
        return listener_at, resolver_at

    def connect(self, listener: tuple[str, int], to: tuple[str, int]) -> socket.socket:
        """A connection to ``listener`` that the room will take as one going ``to``."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.bind(("127.0.0.1", 0))
        self.destinations[sock.getsockname()] = to
        try:
            sock.connect(listener)
        except OSError:
            sock.close()
            raise
        return sock

    def refused(self, listener: tuple[str, int], to: tuple[str, int] | None,
                send: bytes = b"") -> bool:
        """A connection going ``to`` (None: with no original destination) is ended by the
        room without a byte written on it; the end may come before ``connect`` is done."""
        try:
            if to is None:
                sock = socket.create_connection(listener, timeout=5)
            else:
                sock = self.connect(listener, to)
            sock.sendall(send)
        except (ConnectionResetError, BrokenPipeError):
            return True
        with sock:
            return closed_without_a_byte(sock)

    def read(self, what: Callable[[ProxyRoom], Any]) -> Any:
        return self.runner.call(lambda: what(self.room))


def ask(resolver: tuple[str, int], data: bytes, timeout: float = 5.0) -> bytes | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(data, resolver)
        try:
            reply, source_ = sock.recvfrom(65535)
        except (TimeoutError, ConnectionRefusedError):
            return None
        assert source_ == resolver  # from the socket asked
        return reply


def resolve(resolver: tuple[str, int], name: str) -> str:
    reply = ask(resolver, dns_query(name))
    assert reply is not None
    _, flags, _, records = dns_reply(reply)
    assert flags & 0xF == NOERROR and len(records) == 1, (flags, records)
    return socket.inet_ntoa(records[0][3])


def closed_without_a_byte(sock: socket.socket) -> bool:
    """The room ended ``sock``'s connection (a reset, or an end) and wrote nothing on it."""
    sock.settimeout(5)
    try:
        data = sock.recv(1)
    except ConnectionResetError:
        return True
    return data == b""


# -- DNS -------------------------------------------------------------------------------------------


def test_a_gets_a_synthetic_address_stable_per_name_others_empty(runner: LoopThread) -> None:
    room = Room(runner)
    _, resolver = room.listen(1)
    query = dns_query("WWW.Example.COM.", ident=0x1234, edns=True)
    reply = ask(resolver, query)
    assert reply is not None
    ident, flags, question, records = dns_reply(reply)
    assert ident == 0x1234
    assert flags & 0x8000 and flags & 0x0100 and flags & 0xF == NOERROR  # a response; RD back
    assert question == query[12:-11]  # as asked, letter case included; no OPT back
    ((kind, klass, ttl, data),) = records
    assert (kind, klass, ttl) == (A, 1, LIMITS.dns_ttl)
    first = socket.inet_ntoa(data)
    assert first.startswith("198.18.") or first.startswith("198.19."), first
    assert resolve(resolver, "www.example.com") == first  # the same name, normalized
    second = resolve(resolver, "other.example")
    assert second != first
    assert resolve(resolver, "www.example.com.") == first  # stable while the process runs
    for qtype in (AAAA, MX, 255):
        reply = ask(resolver, dns_query("www.example.com", qtype))
        assert reply is not None
        _, flags, _, records = dns_reply(reply)
        assert (flags & 0xF, records) == (NOERROR, [])
    assert room.read(lambda r: r.names(1)) == 2  # AAAA and the rest gave none
    for refused in (dns_query("www.example.com", qclass=3),  # CHAOS
                    dns_query("bad name.example"), dns_query(".")):
        reply = ask(resolver, refused)
        assert reply is not None
        assert dns_reply(reply)[1] & 0xF == REFUSED
    assert room.read(lambda r: r.names(1)) == 2


def test_malformed_questions_get_formerr_or_nothing(runner: LoopThread) -> None:
    room = Room(runner)
    _, resolver = room.listen(1)
    good = dns_query("example.test")
    header = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0)
    for data, code in [
        (struct.pack("!HHHHHH", 7, 0x0100, 2, 0, 0, 0) + good[12:], FORMERR),  # two questions
        (struct.pack("!HHHHHH", 7, 0x0100, 1, 1, 0, 0) + good[12:], FORMERR),  # an answer
        (header + b"\x07exam", FORMERR),  # the name cut short
        (header + b"\x07example\x04test\0\0", FORMERR),  # the type cut short
        (header + b"\xc0\x0c\0\x01\0\x01", FORMERR),  # a compression pointer
        (header + b"\x40" + b"a" * 64 + b"\0\0\x01\0\x01", FORMERR),  # a label over 63
        (header + b"\x3f" + b"a" * 63 + b"\x3f" + b"b" * 63 + b"\x3f" + b"c" * 63
         + b"\x3f" + b"d" * 63 + b"\0\0\x01\0\x01", FORMERR),  # a name over 255
        (header + good[12:] + b"\0" * 600, FORMERR),  # larger than a query may be
        (struct.pack("!HHHHHH", 7, 0x1100, 1, 0, 0, 0) + good[12:], NOTIMP),  # opcode 2
    ]:
        reply = ask(resolver, data)
        assert reply is not None, data
        ident, flags, question, records = dns_reply(reply)
        assert (ident, flags & 0x8000, flags & 0xF, question, records) == (
            7, 0x8000, code, b"", []), data
    for data in (b"", b"\x00\x07\x01", struct.pack("!HHHHHH", 7, 0x8100, 1, 0, 0, 0) + good[12:]):
        assert ask(resolver, data, timeout=0.3) is None  # too short, or itself a response
    assert resolve(resolver, "example.test").startswith("198.1")  # still answering
    assert room.read(lambda r: r.names(1)) == 1


def test_respond_raises_nothing_whatever_the_bytes() -> None:
    names = Names(64)
    rng = random.Random(1)
    seeds = [dns_query("a.example"), dns_query("b.example", AAAA, edns=True),
             dns_query("x" * 63 + ".y", MX)]
    for _ in range(20000):
        if rng.random() < 0.3:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(40)))
        else:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.getrandbits(8)
            data = bytes(data[:rng.randrange(len(data) + 1)])
        reply = respond(data, names, 1)
        assert reply is None or len(reply) >= 12


def test_names_are_bounded_per_process(runner: LoopThread) -> None:
    room = Room(runner, Limits(dns_names=3))
    _, first = room.listen(1)
    _, second = room.listen(2)
    given = [resolve(first, f"n{i}.test") for i in range(3)]
    assert len(set(given)) == 3
    reply = ask(first, dns_query("n3.test"))
    assert reply is not None and dns_reply(reply)[1] & 0xF == REFUSED  # full
    reply = ask(first, dns_query("n3.test", AAAA))
    assert reply is not None and dns_reply(reply)[1] & 0xF == NOERROR  # gives none: unbounded
    assert [resolve(first, f"n{i}.test") for i in range(3)] == given  # those kept theirs
    assert resolve(second, "n3.test").startswith("198.1")  # another process's own table
    assert room.read(lambda r: (r.names(1), r.names(2))) == (3, 1)


# -- the transparent listener ----------------------------------------------------------------------


def test_a_connection_to_a_synthetic_address_is_asked_by_name_and_relayed(
        runner: LoopThread, echo_origin: TcpOrigin) -> None:
    room = Room(runner)
    listener, resolver = room.listen(1)
    address = resolve(resolver, "LocalHost")
    sock = room.connect(listener, (address, echo_origin.port))
    payload = pattern(2 * MB)
    sender = threading.Thread(target=sock.sendall, args=(payload,))  # before any verdict
    sender.start()
    assert recv_exactly(sock, len(payload)) == payload
    sender.join()
    asked = room.policy.asked[-1]
    assert (asked.protocol, asked.host, asked.port, asked.method) == (
        "socks5_tcp", "localhost", echo_origin.port, None)
    assert "127.0.0.1" in asked.addresses
    assert asked.client == "{}:{}".format(*sock.getsockname())
    sock.close()  # the client's end ends the upstream connection too
    assert wait_for(lambda: room.read(lambda r: r.connections()) == 0)

    closing = TcpOrigin(source(3 * MB + 7))  # an IP address is asked about as it is
    try:
        sock = room.connect(listener, ("127.0.0.1", closing.port))
        got = bytearray()
        while piece := sock.recv(1 << 20):
            got += piece
        assert bytes(got) == pattern(3 * MB + 7)  # then the origin's end ends the client's
        sock.close()
    finally:
        closing.close()
    assert room.policy.asked[-1].host == "127.0.0.1"
    assert 0 < room.read(lambda r: r.peak_buffered) <= LIMITS.buffer


def test_refused_unknown_and_unredirected_connections_are_closed_without_a_byte(
        runner: LoopThread, echo_origin: TcpOrigin) -> None:
    room = Room(runner)
    listener, resolver = room.listen(1)
    _, other = room.listen(2)
    blocked = resolve(resolver, "blocked.test")
    assert room.refused(listener, (blocked, 443), b"GET / HTTP/1.1\r\n\r\n")
    room.policy.rules["localhost"] = "deny"  # a name that resolves, to where one could connect
    denied = resolve(resolver, "localhost")
    assert room.refused(listener, (denied, echo_origin.port), b"ping")
    assert [(q.host, q.port) for q in room.policy.asked] == [
        ("blocked.test", 443), ("localhost", echo_origin.port)]

    unreachable = socket.create_server(("127.0.0.1", 0))  # allowed, but nothing listens
    port = unreachable.getsockname()[1]
    unreachable.close()
    assert room.refused(listener, ("127.0.0.1", port))
    assert room.policy.asked[-1].port == port

    resolve(other, "one.test")
    resolve(other, "two.test")
    theirs = resolve(other, "three.test")  # given to process 2, never to 1 (which has two)
    assert room.read(lambda r: r.names(1)) == 2
    for to in [("198.18.200.1", 80), (theirs, echo_origin.port),
               listener,  # reached directly: not a redirected connection
               None]:  # no original destination at all
        assert room.refused(listener, to), to
    assert len(room.policy.asked) == 3  # none of those was asked about
    assert wait_for(lambda: room.read(lambda r: r.connections()) == 0)


def test_without_a_resolver_every_synthetic_address_is_refused(
        runner: LoopThread, echo_origin: TcpOrigin) -> None:
    room = Room(runner)
    listener, _ = room.listen(1, dns=False)
    assert room.refused(listener, ("198.18.0.1", echo_origin.port))
    sock = room.connect(listener, ("127.0.0.1", echo_origin.port))
    sock.sendall(b"still served")
    assert recv_exactly(sock, 12) == b"still served"
    sock.close()
    assert [q.host for q in room.policy.asked] == ["127.0.0.1"]


def test_the_real_original_destination_of_an_unredirected_connection_is_none(
        runner: LoopThread) -> None:
    """With netfilter's own record (no redirect here), a connection made straight to the
    listener is closed, and nothing asked."""
    policy = Policy(runner.loop.post)
    room = runner.call(lambda: ProxyRoom(runner.loop, policy.ask, LIMITS))
    policy.room = room
    listener = socket.create_server(("127.0.0.1", 0))
    at = listener.getsockname()
    runner.call(lambda: room.listen(1, socket.create_server(("127.0.0.1", 0)), None, False,
                                    transparent=listener))
    try:
        with socket.create_connection(at, timeout=5) as sock:
            assert closed_without_a_byte(sock)
    except ConnectionResetError:
        pass  # reset before the connect was done
    assert policy.asked == []
    runner.call(room.close_all)


def test_transparent_connections_count_against_the_process_caps(
        runner: LoopThread, echo_origin: TcpOrigin) -> None:
    room = Room(runner, Limits(per_process=2, request_timeout=5.0, linger=1.0))
    first, first_dns = room.listen(1)
    second, _ = room.listen(2)
    address = resolve(first_dns, "localhost")
    open_ = [room.connect(first, (address, echo_origin.port)) for _ in range(2)]
    for sock in open_:
        sock.sendall(b"ping")
        assert recv_exactly(sock, 4) == b"ping"
    extra = room.connect(first, (address, echo_origin.port))  # the kernel's backlog takes it
    extra.sendall(b"waiting")
    extra.settimeout(0.5)
    with pytest.raises(TimeoutError):
        extra.recv(1)  # waits behind its own process's two
    assert len(room.policy.asked) == 2  # not even asked about yet
    other = room.connect(second, ("127.0.0.1", echo_origin.port))  # another process's is served
    other.sendall(b"other")
    assert recv_exactly(other, 5) == b"other"
    other.close()
    assert room.read(lambda r: r.connections(1)) == 2
    open_.pop().close()  # room for one more of the first process's
    extra.settimeout(5)
    assert recv_exactly(extra, 7) == b"waiting"
    assert room.policy.procs == [1, 1, 2, 1]
    for sock in [*open_, extra]:
        sock.close()
    assert wait_for(lambda: room.read(lambda r: r.connections()) == 0)


@pytest.mark.parametrize("how", ["close", "close_all"])
def test_closing_leaves_no_descriptor_watch_or_name(runner: LoopThread, echo_origin: TcpOrigin,
                                                    how: str) -> None:
    room = Room(runner)
    fds_before, watches_before = fds(), runner.watches()
    listener, resolver = room.listen(7)
    relayed = room.connect(listener, (resolve(resolver, "localhost"), echo_origin.port))
    relayed.sendall(b"hi")
    assert recv_exactly(relayed, 2) == b"hi"
    held = room.connect(listener, (resolve(resolver, "held.test"), 80))  # never answered
    assert wait_for(lambda: room.read(lambda r: r.questions) == 1)
    assert room.read(lambda r: (r.connections(7), r.names(7))) == (2, 2)

    runner.call(lambda: room.room.close(7) if how == "close" else room.room.close_all())
    for sock in (relayed, held):
        assert closed_without_a_byte(sock)
        sock.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(listener, timeout=5)
    assert ask(resolver, dns_query("localhost"), timeout=0.3) is None  # nobody answers there
    assert room.read(lambda r: (r.connections(), r.questions, r.buffered, r.names(7))) == (
        0, 0, 0, 0)
    assert wait_for(lambda: fds() <= fds_before), (fds(), fds_before)
    assert runner.watches() == watches_before


# -- with the namespace's real rules ---------------------------------------------------------------


def _tools() -> bool:
    return os.geteuid() == 0 and all(shutil.which(tool) for tool in ("nft", "nsenter", "ip"))


def _in_namespace(ns: int, make: Callable[[], Any]) -> Any:
    """``make()`` run by a thread that joined the network namespace ``ns`` (the sockets it makes
    are that namespace's)."""
    made: list[Any] = []

    def inside() -> None:
        if ctypes.CDLL(None, use_errno=True).setns(ns, CLONE_NEWNET) != 0:
            made.append(OSError(ctypes.get_errno(), "setns"))
            return
        made.append(make())

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join()
    if isinstance(made[0], OSError):
        raise made[0]
    return made[0]


@pytest.mark.skipif(not _tools(), reason="needs root, nftables, nsenter and ip")
def test_through_a_namespace_with_the_redirect_rules(echo_origin: TcpOrigin) -> None:
    """A private namespace with the backend's rules: a question to any nameserver is answered
    from it, and a connection to the address answered reaches the origin, asked about by name
    (netfilter's record of the destination, read by the room itself)."""
    from execproto.adapters._processes._netns import TRANSPARENT_RULES

    made: list[int] = []

    def unshare() -> None:  # the thread ends; the namespace lives on through the descriptor
        assert ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) == 0
        made.append(os.open("/proc/thread-self/ns/net", os.O_RDONLY))

    thread = threading.Thread(target=unshare)
    thread.start()
    thread.join()
    ns = made[0]
    runner = start("asyncio")
    room = Room(runner)
    try:
        listener = _in_namespace(ns, lambda: socket.create_server(("127.0.0.1", 0)))
        resolver = _in_namespace(ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        resolver.bind(("127.0.0.1", 0))
        rules = TRANSPARENT_RULES.format(tcp=listener.getsockname()[1],
                                         dns=resolver.getsockname()[1])
        for command, given in ((["ip", "link", "set", "lo", "up"], None),
                               (["ip", "route", "add", "default", "dev", "lo", "src",
                                 "127.0.0.1"], None),
                               (["nft", "-f", "-"], rules.encode())):
            subprocess.run(["nsenter", f"--net=/proc/self/fd/{ns}", "--", *command],
                           input=given, pass_fds=(ns,), check=True, capture_output=True)
        real = runner.call(lambda: ProxyRoom(runner.loop, room.policy.ask, LIMITS))
        room.policy.room = room.room = real
        runner.call(lambda: real.listen(1, socket.create_server(("127.0.0.1", 0)), None, False,
                                        transparent=listener, dns=resolver))

        client = _in_namespace(ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        with client:
            client.settimeout(5)
            client.sendto(dns_query("localhost"), ("192.0.2.53", 53))  # whatever resolv.conf says
            reply, answered_from = client.recvfrom(512)
        assert answered_from == ("192.0.2.53", 53)  # as a stub resolver checks
        address = socket.inet_ntoa(dns_reply(reply)[3][0][3])
        assert address.startswith("198.1")

        sock = _in_namespace(ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        with sock:
            sock.settimeout(5)
            sock.connect((address, echo_origin.port))
            sock.sendall(b"through the rules")
            assert recv_exactly(sock, 17) == b"through the rules"
        asked = room.policy.asked[-1]
        assert (asked.protocol, asked.host, asked.port) == (
            "socks5_tcp", "localhost", echo_origin.port)
        sock = _in_namespace(ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        with sock:
            sock.settimeout(5)
            try:
                sock.connect(("192.0.2.1", 443))  # an address asked as it is, and refused
                assert closed_without_a_byte(sock)
            except ConnectionResetError:
                pass
        assert (room.policy.asked[-1].host, room.policy.asked[-1].port) == ("192.0.2.1", 443)
    finally:
        runner.call(room.room.close_all)
        runner.stop()
        os.close(ns)
