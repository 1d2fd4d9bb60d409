"""``execproto serve --listen wss://``: native TLS on every adapter, with a CA the test makes.

The execproto client runs commands over it (``exec --ca-file``, ``SSL_CERT_FILE``, the library's
``ca_file``), /readyz answers over https, and what cannot speak TLS to it (a plain ws:// client, a
TCP connection that never says hello, a client that does not trust the certificate) is closed
while the server goes on serving the next good client.
"""

from __future__ import annotations

import http.client
import os
import select
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from certs import WHY_MISSING, Certs, make_certs

from execproto.adapters import client

from .conftest import ADAPTERS, about_the_host

pytestmark = pytest.mark.skipif(bool(WHY_MISSING), reason=WHY_MISSING)

SERVE = [sys.executable, "-m", "execproto.adapters", "serve"]
EXEC = [sys.executable, "-m", "execproto.adapters", "exec"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


class TlsServer:
    """``execproto serve --listen wss://127.0.0.1:0`` with the test's certificate."""

    def __init__(self, adapter: str, certs: Certs, *args: str) -> None:
        self.process = subprocess.Popen(
            [*SERVE, "--listen", "wss://127.0.0.1:0", "--tls-cert", str(certs.cert),
             "--tls-key", str(certs.key), "--adapter", adapter, "--log-level", "info", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("wss://127.0.0.1:"):
            self.process.kill()
            raise AssertionError(f"printed {self.url!r}: {self.process.communicate()[1]}")
        self.port = int(self.url.rsplit(":", 1)[1])
        self._logged = b""  # what `wait_for_log` read of its stderr (ASCII: logging's lines)

    def wait_for_log(self, text: str, seconds: float = 30) -> None:
        """Read its stderr until ``text`` is in it: for what the server does on its own time,
        as a signal it was sent. The pipe's fd is read directly, so `stop` reads the rest."""
        assert self.process.stderr is not None
        fd, deadline = self.process.stderr.fileno(), time.monotonic() + seconds
        while text.encode() not in self._logged:
            left = deadline - time.monotonic()
            chunk = os.read(fd, 65536) if left > 0 and select.select([fd], [], [], left)[0] else b""
            if not chunk:
                raise AssertionError(f"not logged in {seconds} s: {text!r}\n"
                                     f"{self._logged.decode()}")
            self._logged += chunk

    def stop(self) -> str:
        """Stop it (SIGTERM) and return what it logged; it must stop cleanly."""
        self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
            raise AssertionError(f"the server did not stop:\n{err}") from None
        err = self._logged.decode() + err
        assert self.process.returncode == 0 and "Traceback" not in err, err
        return err


@pytest.fixture(params=ADAPTERS)
def server(request: pytest.FixtureRequest, certs: Certs) -> Iterator[TlsServer]:
    running = TlsServer(str(request.param), certs, "--handshake-timeout", "1")
    yield running
    if running.process.poll() is None:
        running.stop()


def run_exec(url: str, *args: str, env: dict[str, str] | None = None,
             command: str = "echo over tls; exit 4") -> subprocess.CompletedProcess[bytes]:
    clean = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    return subprocess.run([*EXEC, url, *args, "--", "sh", "-c", command], capture_output=True,
                          timeout=60, stdin=subprocess.DEVNULL, env={**clean, **(env or {})})


def test_exec_with_ca_file(server: TlsServer, certs: Certs) -> None:
    done = run_exec(server.url, "--ca-file", str(certs.ca))
    assert (done.returncode, done.stdout, done.stderr) == (4, b"over tls\n", b""), done


def test_exec_with_ssl_cert_file(server: TlsServer, certs: Certs) -> None:
    done = run_exec(server.url, env={"SSL_CERT_FILE": str(certs.ca)})
    assert (done.returncode, done.stdout, done.stderr) == (4, b"over tls\n", b""), done


def test_the_library_with_ca_file_streams_output(server: TlsServer, certs: Certs) -> None:
    # 8 MiB: many records each way, through the server's backpressure.
    code, out, err = client.run(server.url, ["head", "-c", str(8 << 20), "/dev/zero"],
                                ca_file=certs.ca, timeout=60)
    assert (code, len(out), out.count(0), err) == (0, 8 << 20, 8 << 20, b"")


def test_the_library_uploads_through_tls(server: TlsServer, certs: Certs) -> None:
    data = os.urandom(4 << 20)  # stdin in many records, decrypted on the server's loop
    code, out, _ = client.run(server.url, ["cat"], stdin=data, ca_file=certs.ca, timeout=60)
    assert code == 0 and out == data


def test_a_wrong_token_over_tls_is_refused(certs: Certs, tmp_path: Path) -> None:
    token, wrong = tmp_path / "token", tmp_path / "wrong"
    token.write_text("the-token\n")
    wrong.write_text("not-the-token\n")
    running = TlsServer("asyncio", certs, "--auth-token-file", str(token))
    refused = run_exec(running.url, "--ca-file", str(certs.ca), "--auth-token-file", str(wrong),
                       command="true")
    assert refused.returncode == 255 and b"HTTP 401 Unauthorized" in refused.stderr, refused
    done = run_exec(running.url, "--ca-file", str(certs.ca), "--auth-token-file", str(token))
    assert (done.returncode, done.stdout) == (4, b"over tls\n"), done
    running.stop()


def test_readyz_over_https(server: TlsServer, certs: Certs) -> None:
    context = ssl.create_default_context(cafile=certs.ca)
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    conn.request("GET", "/readyz")
    answer = conn.getresponse()
    assert (answer.status, answer.read()) == (200, b"ok\n")
    conn.close()


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (EOF or a reset) within ``seconds``."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def _closing(socks: list[socket.socket], count: int, seconds: float) -> list[socket.socket]:
    """The first ``count`` of ``socks`` the server closes (EOF or a reset), waiting up to
    ``seconds`` in all: fewer if the rest stay open that long."""
    closed: list[socket.socket] = []
    deadline = time.monotonic() + seconds
    while len(closed) < count and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([s for s in socks if s not in closed], [], [], left)
        for sock in readable:
            try:
                if sock.recv(4096, socket.MSG_DONTWAIT):
                    continue  # the server sends nothing before the client's hello
            except BlockingIOError:
                continue
            except ConnectionResetError:
                pass
            closed.append(sock)
    return closed


def test_what_cannot_speak_tls_is_closed_and_serving_goes_on(server: TlsServer,
                                                             certs: Certs) -> None:
    # A TCP connection that never sends its hello: closed after --handshake-timeout (1 s),
    # as a slow websocket upgrade is.
    silent = socket.create_connection(("127.0.0.1", server.port))
    # A plain ws:// client: told in clear, and closed.
    plain = run_exec(server.url.replace("wss://", "ws://"), command="true")
    assert plain.returncode == 255, plain
    assert b"HTTP 400 Bad Request: this server speaks TLS: use wss://" in plain.stderr, plain
    # A client that does not trust the certificate (no CA given): its handshake fails.
    untrusted = run_exec(server.url, command="true")
    assert untrusted.returncode == 255 and b"certificate was refused" in untrusted.stderr
    assert _closed_within(silent, 15), "a connection that never said hello was kept open"
    silent.close()
    # And a good client is served afterwards.
    done = run_exec(server.url, "--ca-file", str(certs.ca))
    assert (done.returncode, done.stdout) == (4, b"over tls\n"), done
    log = server.stop()
    # At most a line for each, at INFO: the plain client's. The untrusting one hung up without
    # a word (anyio does not send the alert OpenSSL made): a DEBUG line, not shown here.
    failures = [line for line in log.splitlines() if "TLS handshake failed" in line]
    assert len(failures) == 1 and " INFO execproto: " in failures[0], log
    assert "not a TLS client" in failures[0], log
    warnings = [line for line in log.splitlines()
                if " WARNING " in line and not about_the_host(line)]
    assert len(warnings) == 1 and "no upgrade in 1" in warnings[0], log  # as any slow upgrade


def test_the_bound_address_is_printed_as_wss(certs: Certs) -> None:
    running = TlsServer("asyncio", certs)
    log = running.stop()
    assert f"listening on {running.url}" in log, log


# (flags, what the one line says). The files are the module's certificates, or missing ones.
MISTAKES = [
    (["--listen", "wss://127.0.0.1:0"], "wss:// needs --tls-cert FILE and --tls-key FILE"),
    (["--listen", "wss://127.0.0.1:0", "--tls-cert", "{cert}"],
     "wss:// needs --tls-cert FILE and --tls-key FILE"),
    (["--tls-cert", "{cert}", "--tls-key", "{key}"],
     "--tls-cert and --tls-key need --listen wss://IP:PORT"),
    (["--listen", "wss://127.0.0.1:0", "--tls-cert", "{missing}", "--tls-key", "{key}"],
     "--tls-cert {missing}: No such file or directory"),
    (["--listen", "wss://127.0.0.1:0", "--tls-cert", "{cert}", "--tls-key", "{ca_key}"],
     "--tls-key {ca_key} is not the key of the certificate in --tls-cert {cert}"),
    (["--listen", "wss://127.0.0.1:0", "--tls-cert", "{key}", "--tls-key", "{key}"],
     "--tls-cert {key}: no PEM certificate in it"),
    (["--listen", "wss://127.0.0.1:0", "--tls-cert", "{cert}", "--tls-key", "{cert}"],
     "--tls-key {cert}: no PEM private key in it"),
]


@pytest.mark.parametrize(("flags", "said"), MISTAKES)
def test_a_tls_mistake_is_one_line_before_serving(certs: Certs, tmp_path: Path,
                                                  flags: list[str], said: str) -> None:
    names = {"cert": certs.cert, "key": certs.key, "ca_key": certs.ca_key,
             "missing": tmp_path / "missing.pem"}
    done = subprocess.run([*SERVE, *(flag.format(**names) for flag in flags)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stdout) == (2, ""), done
    assert done.stderr == f"execproto serve: {said.format(**names)}\n"


def test_an_encrypted_key_is_refused_without_a_prompt(certs: Certs, tmp_path: Path) -> None:
    locked = tmp_path / "locked.key"
    subprocess.run(["openssl", "pkey", "-in", str(certs.key), "-out", str(locked), "-aes256",
                    "-passout", "pass:secret"], check=True, capture_output=True, timeout=60)
    done = subprocess.run([*SERVE, "--listen", "wss://127.0.0.1:0", "--tls-cert",
                           str(certs.cert), "--tls-key", str(locked)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stdout) == (2, ""), done
    assert done.stderr.startswith(f"execproto serve: --tls-key {locked} is encrypted"), done


def test_exec_ca_file_mistakes(certs: Certs, tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    done = run_exec("wss://127.0.0.1:9", "--ca-file", str(missing), command="true")
    assert (done.returncode, done.stderr) == (
        2, f"execproto exec: --ca-file {missing}: No such file or directory\n".encode()), done
    done = run_exec("wss://127.0.0.1:9", "--ca-file", str(certs.key), command="true")
    assert (done.returncode, done.stderr) == (
        2, f"execproto exec: --ca-file {certs.key}: no PEM certificate in it\n".encode()), done
    done = run_exec("ws://127.0.0.1:9", "--ca-file", str(certs.ca), command="true")
    assert (done.returncode, done.stderr) == (
        2, b"execproto exec: --ca-file is for wss:// URLs\n"), done


def test_off_loopback_without_tls_warns(tmp_path: Path) -> None:
    """Said once listening: checked here on the parsed flags alone, so nothing is bound off
    loopback."""
    from execproto.adapters import cli
    from execproto.adapters._command import _serve

    token = tmp_path / "token"
    token.write_text("a-token\n")
    args = cli._parser().parse_args(["serve", "--listen", "ws://0.0.0.0:0",
                                     "--auth-token-file", str(token)])
    warnings = _serve.tls_warnings(_serve.check(args)[0], "ws://0.0.0.0:8765")
    assert warnings == ["listening on ws://0.0.0.0:8765 without TLS: the bearer token and every "
                        "byte travel in clear (use wss:// with --tls-cert and --tls-key)"]
    for loopback in ("ws://127.0.0.1:0", "ws://[::1]:0"):
        args = cli._parser().parse_args(["serve", "--listen", loopback])
        assert _serve.tls_warnings(_serve.check(args)[0], loopback) == []


UNSHARE = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]


def test_off_loopback_without_tls_warns_at_start(tmp_path: Path) -> None:
    """The whole server, bound to 0.0.0.0 inside a network namespace of its own (where no
    interface but loopback exists, so nothing is exposed)."""
    tried = subprocess.run([*UNSHARE, "true"], capture_output=True, timeout=30)
    if tried.returncode:
        pytest.skip(f"no network namespace here: {tried.stderr.decode().strip()}")
    token = tmp_path / "token"
    token.write_text("a-token\n")
    server = subprocess.Popen(
        [*UNSHARE, "--", *SERVE, "--listen", "ws://0.0.0.0:0", "--auth-token-file", str(token)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    server.terminate()
    _, err = server.communicate(timeout=20)
    assert url.startswith("ws://0.0.0.0:"), err
    assert f"WARNING execproto: listening on {url} without TLS: the bearer token" in err, err


def test_off_loopback_still_needs_a_token(certs: Certs) -> None:
    done = subprocess.run([*SERVE, "--listen", "wss://0.0.0.0:0", "--tls-cert", str(certs.cert),
                           "--tls-key", str(certs.key)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "without --auth-token-file" in done.stderr, done


# An embedded server with a gate of 4 connections in their upgrade and a long handshake timeout.
GATED = """\
import sys
from execproto import Config
from execproto.adapters import asyncio
from execproto.adapters._wire import _tls
context = _tls.server_context(sys.argv[1], sys.argv[2])
asyncio.run("wss://127.0.0.1:0", config=Config(max_upgrading=4, handshake_timeout=60),
            tls=context, ready=lambda url: print(url, flush=True))
"""


def test_connections_in_their_tls_handshake_count_in_the_upgrade_gate(certs: Certs) -> None:
    """Past the gate's 4, the oldest connection still in its TLS handshake makes room: silent
    connections cannot keep a good client out, long before the handshake timeout."""
    server = subprocess.Popen([sys.executable, "-c", GATED, str(certs.cert), str(certs.key)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    try:
        assert url.startswith("wss://127.0.0.1:"), server.communicate(timeout=20)
        port = int(url.rsplit(":", 1)[1])
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
        # Past the first four, each silent connection closed one (itself, refused while the
        # others were younger than the gate's spare 0.05 s, or the oldest): four closed say
        # the server has accepted all eight, whenever its loop got to them. Then every one
        # left is older than the spare once 0.1 s has passed.
        closed = _closing(silent, 4, 30)
        assert len(closed) == 4, "silent connections in their TLS handshake held no place"
        time.sleep(0.1)
        code, out, _ = client.run(url, ["echo", "in"], ca_file=certs.ca, timeout=30)
        assert (code, out) == (0, b"in\n")
        # The client's connection pushed out the oldest of the four left.
        assert len(_closing([s for s in silent if s not in closed], 1, 30)) == 1
        for sock in silent:
            sock.close()
    finally:
        server.terminate()
        _, err = server.communicate(timeout=20)
    assert server.returncode == 0 and "Traceback" not in err, err
    assert "refused: 4 connections in their upgrade" in err, err


def test_a_slow_handshake_holds_no_slot_for_long(certs: Certs) -> None:
    """Connections stuck in their TLS handshake count as upgrades: past the handshake timeout
    they are closed, and a good client still gets in while many of them wait."""
    running = TlsServer("asyncio", certs, "--handshake-timeout", "2", "--log-level", "warning")
    stalled = [socket.create_connection(("127.0.0.1", running.port)) for _ in range(20)]
    began = time.monotonic()
    code, out, _ = client.run(running.url, ["echo", "in"], ca_file=certs.ca, timeout=30)
    assert (code, out) == (0, b"in\n")
    assert all(_closed_within(sock, 20) for sock in stalled)
    assert time.monotonic() - began < 25
    for sock in stalled:
        sock.close()
    running.stop()
