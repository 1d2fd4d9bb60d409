"""http/request over TLS, against a loopback HTTPS server with a throwaway certificate.

The server trusts the certificate only when its default trust store is pointed at it
(SSL_CERT_FILE), so the same request also shows that an untrusted peer is refused.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from .conftest import Server
from .test_http import Handler

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}", cert
    httpd.shutdown()


def test_a_trusted_certificate(adapter: str, https: tuple[str, Path]) -> None:
    url, cert = https
    server = Server(adapter, env={"SSL_CERT_FILE": str(cert)})
    try:
        reply = server.client().call("http/request", {
            "method": "GET", "url": f"{url}/hello", "requestId": "t", "headers": []}, timeout=30)
        assert reply["result"]["status"] == 200, reply
    finally:
        server.stop()


def test_an_untrusted_certificate_is_refused(adapter: str, https: tuple[str, Path]) -> None:
    url, _ = https
    server = Server(adapter)
    try:
        reply = server.client().call("http/request", {
            "method": "GET", "url": f"{url}/hello", "requestId": "t", "headers": []}, timeout=30)
        assert reply["error"]["code"] == -32603
        assert "CERTIFICATE_VERIFY_FAILED" in reply["error"]["message"]
    finally:
        server.stop()
