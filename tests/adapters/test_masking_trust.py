"""What credential masking trusts, against the reference: the child's CA bundle holds the
platform's roots, then the CA files the server's environment names (here SSL_CERT_FILE, a
test CA), then the proxy's own CA; a named file that cannot be read refuses the start; an
origin none of those roots signed gets no request."""

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
from .masking_origin import Origin, make_ca_and_leaf
from .wsclient import Client, output_of

HOMES = CACHE.parent / "reference-homes"  # not under /tmp: the reference refuses it there
PROXY: dict[str, Any] = {
    "enabled": True, "enableSocks5": True, "enableSocks5Udp": True, "allowUpstreamProxy": True,
    "dangerouslyAllowAllUnixSockets": False, "mode": "full", "allowLocalBinding": False,
    "domains": {"127.0.0.1": "allow"}, "credentialMasking": True,
}
REAL = "customsecret-0123abcd0123abcd"
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


def run(serve: Callable[[dict[str, str]], Iterator[str]], env: dict[str, str], script: str,
        child_env: dict[str, str], proxy: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The reply to a masked ``bash -c script`` on a server with ``env``, and its stdout."""
    served = serve(env)
    url = next(served)
    try:
        client = Client(url)
        client.handshake()
        reply = client.call("process/start", {
            "processId": "b", "argv": ["bash", "-c", script], "cwd": "file:///tmp",
            "env": {"PATH": os.environ["PATH"], **child_env}, "tty": False,
            "enforceManagedNetwork": True, "networkProxy": {"proxy": proxy}})
        out = output_of(client.events_until_closed("b", timeout=60)) if "result" in reply else {}
        client.close()
    finally:
        served.close()
    return reply, out.get("stdout", b"").decode()


def bundle(serve: Callable[[dict[str, str]], Iterator[str]],
           env: dict[str, str]) -> tuple[dict[str, Any], str]:
    """The reply to a masked start that prints its CA bundle, and what it printed."""
    return run(serve, env, 'cat "$SSL_CERT_FILE"', {}, PROXY)


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


@pytest.mark.parametrize("server", SERVERS)
def test_an_origin_the_server_cannot_verify_gets_nothing_and_the_child_a_502(
        server: str, tmp_path: Path) -> None:
    """Through the HTTP proxy and through SOCKS5, to a host where a credential is bound whose
    certificate no root the server trusts signed: the child's TLS succeeds (the proxy's CA),
    and each request gets 502 "mitm upstream error"; the origin sees no request."""
    _, leaf = make_ca_and_leaf(tmp_path, ["127.0.0.1"])
    served = Origin(("127.0.0.1", 0), leaf)
    url = f"https://127.0.0.1:{served.port}/api/x"
    proxy = dict(PROXY, credentialProviders={"mine": {
        "env": ["MY_TOKEN"], "patterns": ["^customsecret-[0-9a-f]+$"],
        "url_prefixes": [url], "auth": ["bearer"]}})
    script = "; ".join(f'curl -sS -m 10 {via} -H "Authorization: Bearer $MY_TOKEN" '
                       f'-w " %{{http_code}}" {url} 2>&1; echo " [$?]"'
                       for via in ("", '--proxy "$ALL_PROXY"'))
    try:
        reply, said = run(SERVERS[server], {}, script, {"MY_TOKEN": REAL}, proxy)
    finally:
        served.close()
    assert "result" in reply, reply
    assert said == "mitm upstream error 502 [0]\n" * 2, said
    assert served.seen == []
