"""``execproto exec wss://...``: through a TLS-terminating proxy (the server speaks plain ws),
with a throwaway certificate that is trusted only when SSL_CERT_FILE names it."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
EXEC = [sys.executable, "-m", "execproto.adapters", "exec"]


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(1 << 16):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture(scope="module")
def tls_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A wss:// URL in front of a plain exec-server, and the certificate it shows."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    backend = Server("asyncio", "--log-level", "warning")
    target = ("127.0.0.1", int(backend.url.rsplit(":", 1)[1]))
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:  # closed at the end
                return
            try:
                raw.settimeout(10)
                front = context.wrap_socket(raw, server_side=True)
                front.settimeout(None)
            except OSError:  # a client that refused the certificate
                raw.close()
                continue
            back = socket.create_connection(target)
            threading.Thread(target=_pipe, args=(front, back), daemon=True).start()
            threading.Thread(target=_pipe, args=(back, front), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"wss://127.0.0.1:{listener.getsockname()[1]}", cert
    listener.close()
    backend.stop()


def test_wss_through_a_tls_proxy(tls_proxy: tuple[str, Path]) -> None:
    url, cert = tls_proxy
    done = subprocess.run([*EXEC, url, "--", "sh", "-c", "echo over tls; exit 4"],
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, "SSL_CERT_FILE": str(cert)})
    assert (done.returncode, done.stdout, done.stderr) == (4, b"over tls\n", b""), done


def test_an_untrusted_certificate_is_one_line(tls_proxy: tuple[str, Path]) -> None:
    url, _ = tls_proxy
    env = {name: value for name, value in os.environ.items() if name != "SSL_CERT_FILE"}
    done = subprocess.run([*EXEC, url, "--", "true"], capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=env)
    assert done.returncode == 255
    assert done.stderr == (f"execproto exec: cannot reach the server at {url}: TLS: the "
                           "server's certificate was refused: self-signed certificate\n").encode()
