"""Handshakes cannot starve token holders (issue 32, item 7), on every adapter.

A flood of canned TLS ClientHellos, each costing the server an RSA-2048 signature, and a flood of
wrong tokens held open, while clients with the right token connect: nearly all of them get in.
The attackers come from 127.0.0.2 (Linux answers all of 127/8 on loopback), the honest clients
from 127.0.0.1, as two hosts would.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from certs import WHY_MISSING
from wsproto.utilities import ProtocolError

from execproto.adapters._wire._gate import HANDSHAKE_BURST, HANDSHAKES_PER_ADDRESS

from .conftest import Server
from .test_auth import UPGRADE
from .test_tls import SERVE
from .wsclient import Client, Closed

pytestmark = pytest.mark.skipif(bool(WHY_MISSING), reason=WHY_MISSING)

TOKEN = "tok-7f3a9c21"
ATTACKER = "127.0.0.2"
HONEST = 32
ENOUGH = 30  # of HONEST: a loaded machine may lose one or two to their own timeouts
FLOOD = 4.0  # seconds each flood lasts at most


@pytest.fixture(scope="module")
def rsa(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed RSA-2048 certificate for 127.0.0.1 (cert-manager's default key) and its
    key, made once: the client trusts the certificate itself."""
    where = tmp_path_factory.mktemp("rsa")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", "key.pem", "-out", "cert.pem", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        cwd=where, check=True, capture_output=True, timeout=60)
    return where / "cert.pem", where / "key.pem"


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN + "\n")
    return path


def client_hello() -> bytes:
    """The first flight of Python's own TLS client, captured once: replayed, it costs the server
    a key exchange and a signature each time, and the attacker nothing."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def from_attacker(port: int, timeout: float = 1) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.bind((ATTACKER, 0))
        sock.connect(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


def hellos(port: int, counts: list[int]) -> None:
    """Canned ClientHellos, one connection each: send, read a bit, close. Counts those sent,
    and those the server answered with its first flight: each cost it a signature."""
    hello = client_hello()
    deadline = time.monotonic() + FLOOD
    for _ in range(20_000):
        if time.monotonic() > deadline:
            return
        try:
            with from_attacker(port) as sock:
                sock.sendall(hello)
                if sock.recv(4096):
                    counts[1] += 1
        except OSError:  # refused (reset), or a SYN lost
            pass
        counts[0] += 1


def wrong_tokens(port: int, counts: list[int]) -> None:
    """Upgrades with a wrong token, each left open for its late answer; 200 held at most."""
    held: list[socket.socket] = []
    deadline = time.monotonic() + FLOOD
    try:
        for _ in range(20_000):
            if time.monotonic() > deadline:
                return
            try:
                sock = from_attacker(port)
                sock.sendall(UPGRADE + b"Authorization: Bearer nope\r\n\r\n")
                held.append(sock)
            except OSError:
                pass
            counts[0] += 1
            if len(held) > 200:
                held.pop(0).close()
    finally:
        for sock in held:
            sock.close()


def honest_ones(url: str, tls: ssl.SSLContext | None, within: float) -> list[bool]:
    """HONEST clients with the right token, all at once, each through the TLS handshake (if
    any), the upgrade and `initialize`: which got in within ``within`` seconds."""
    deadline = time.monotonic() + within
    got = [False] * HONEST

    def one(i: int) -> None:
        try:
            client = Client(url, headers=[("Authorization", f"Bearer {TOKEN}")],
                            timeout=within, tls=tls)
            if client.rejected is None:
                got[i] = "result" in client.handshake() and time.monotonic() < deadline
            client.sock.close()
        except (OSError, TimeoutError, AssertionError, ProtocolError, Closed):
            pass  # refused, reset or too slow: not in

    threads = [threading.Thread(target=one, args=(i,)) for i in range(HONEST)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(within + 10)
    return got


def under_attack(url: str, attack: Callable[[int, list[int]], None], attackers: int,
                 tls: ssl.SSLContext | None) -> tuple[list[bool], list[int]]:
    """Honest clients let in while ``attackers`` threads run ``attack`` for `FLOOD` seconds,
    and its counts."""
    port = urlsplit(url).port
    assert port is not None
    counts = [0, 0]
    threads = [threading.Thread(target=attack, args=(port, counts)) for _ in range(attackers)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)  # the flood under way
        got = honest_ones(url, tls, within=FLOOD)
    finally:
        for thread in threads:
            thread.join(FLOOD + 5)
    return got, counts


@pytest.fixture
def wss(adapter: str, rsa: tuple[Path, Path], token_file: Path) -> Iterator[str]:
    cert, key = rsa
    process = subprocess.Popen(
        [*SERVE, "--listen", "wss://127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key),
         "--auth-token-file", str(token_file), "--adapter", adapter, "--log-level", "error",
         "--drain-grace", "0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    try:
        assert url.startswith("wss://127.0.0.1:"), process.communicate(timeout=20)
        yield url
    finally:
        process.terminate()
        _, err = process.communicate(timeout=20)
    assert process.returncode == 0 and "Traceback" not in err, err


def test_a_client_hello_flood_leaves_token_holders_in(wss: str, rsa: tuple[Path, Path]) -> None:
    trusted = ssl.create_default_context(cafile=str(rsa[0]))
    got, (sent, answered) = under_attack(wss, hellos, 2, trusted)
    said = f"{sum(got)} of {HONEST} got in; {answered} of {sent} hellos answered"
    assert sum(got) >= ENOUGH, said
    # The attacker's address had its burst and its rate, no more: the owner's time went to
    # the others.
    assert answered <= HANDSHAKE_BURST + HANDSHAKES_PER_ADDRESS * (FLOOD + 1), said


@pytest.fixture
def guarded(adapter: str, token_file: Path) -> Iterator[str]:
    running = Server(adapter, "--auth-token-file", str(token_file), "--log-level", "error")
    yield running.url
    log = running.stop()
    assert running.process.returncode == 0 and "Traceback" not in log, log


def test_a_wrong_token_flood_leaves_token_holders_in(guarded: str) -> None:
    got, (sent, _) = under_attack(guarded, wrong_tokens, 2, None)
    assert sum(got) >= ENOUGH, f"{sum(got)} of {HONEST} got in, {sent} wrong tokens sent"
