"""What credential masking trusts, against the reference: the child's CA bundle holds the
platform's roots, then the CA files the server's environment names (here SSL_CERT_FILE, a
test CA), then the proxy's own CA; a named file that cannot be read refuses the start."""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import CACHE, REFERENCE

from .conftest import Server
from .masking_origin import make_ca_and_leaf
from .wsclient import Client, output_of

HOMES = CACHE.parent / "reference-homes"  # not under /tmp: the reference refuses it there
PROXY: dict[str, Any] = {
    "enabled": True, "enableSocks5": True, "enableSocks5Udp": True, "allowUpstreamProxy": True,
    "dangerouslyAllowAllUnixSockets": False, "mode": "full", "allowLocalBinding": False,
    "domains": {"127.0.0.1": "allow"}, "credentialMasking": True,
}
BLOCK = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.DOTALL)


def _ours(env: dict[str, str]) -> Iterator[str]:
    server = Server("asyncio", env=env)
    try:
        yield server.url
    finally:
        server.stop()


def _reference(env: dict[str, str]) -> Iterator[str]:
    if REFERENCE is None:
        pytest.skip("the reference is not installed")
    HOMES.mkdir(parents=True, exist_ok=True)
    home = tempfile.mkdtemp(prefix="codex-home-", dir=HOMES)
    process = subprocess.Popen([REFERENCE, "exec-server", "--listen", "ws://127.0.0.1:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env={**os.environ, **env, "CODEX_HOME": home})
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait(10)
        shutil.rmtree(home, ignore_errors=True)


SERVERS: dict[str, Callable[[dict[str, str]], Iterator[str]]] = {
    "execproto": _ours, "reference": _reference}


def bundle(serve: Callable[[dict[str, str]], Iterator[str]],
           env: dict[str, str]) -> tuple[dict[str, Any], str]:
    """The reply to a masked start that prints its CA bundle, and what it printed."""
    served = serve(env)
    url = next(served)
    try:
        client = Client(url)
        client.handshake()
        reply = client.call("process/start", {
            "processId": "b", "argv": ["bash", "-c", 'cat "$SSL_CERT_FILE"'],
            "cwd": "file:///tmp", "env": {"PATH": os.environ["PATH"]}, "tty": False,
            "enforceManagedNetwork": True, "networkProxy": {"proxy": PROXY}})
        out = output_of(client.events_until_closed("b", timeout=60)) if "result" in reply else {}
        client.close()
    finally:
        served.close()
    return reply, out.get("stdout", b"").decode()


def certificates(text: str) -> list[bytes]:
    return [ssl.PEM_cert_to_DER_cert(block) for block in BLOCK.findall(text)]


@pytest.mark.parametrize("server", SERVERS)
def test_the_bundle_adds_a_ca_the_environment_names_to_the_platforms_roots(
        server: str, tmp_path: Path) -> None:
    ca, _ = make_ca_and_leaf(tmp_path, ["127.0.0.1"])
    reply, text = bundle(SERVERS[server], {"SSL_CERT_FILE": str(ca)})
    assert "result" in reply, reply
    found = certificates(text)
    platform = ssl.get_default_verify_paths().openssl_cafile
    roots = certificates(Path(platform).read_text()) if os.path.isfile(platform) else []
    test_ca = certificates(ca.read_text())
    # The platform's roots (in an order of its own on the reference), the test CA, the proxy's.
    assert sorted(found[:-2]) == sorted(dict.fromkeys(roots)), len(found)
    assert found[-2:-1] == test_ca, len(found)


@pytest.mark.parametrize("server", SERVERS)
def test_a_ca_file_the_environment_names_that_is_missing_refuses_the_start(
        server: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    reply, _ = bundle(SERVERS[server], {"SSL_CERT_FILE": str(missing)})
    assert reply.get("error") == {
        "code": -32602,
        "message": f"invalid network proxy config: failed to read startup CA bundle: {missing}",
    }, reply
