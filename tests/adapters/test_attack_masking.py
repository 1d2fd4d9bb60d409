"""Attack: credential masking, from the masked command's side. It knows its dummy, speaks to the
proxy byte by byte, and tries to make the proxy put the real value into a request that goes
anywhere but the credential's destination, or to learn it back.

The credential (a custom provider's) is bound to ``http://127.0.0.1:A/api/``, plain HTTP
toward loopback (as a destination may be), or to ``https://127.0.0.1:T/api/`` through an
intercepted tunnel; ``B`` is another origin on loopback, which must only ever see the dummy.
Each attack is a raw exchange with the proxy (`ATTACKER`), run by ``bash -c`` (what the
reference masks), unsandboxed: the proxy is the same under a sandbox.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, start
from .masking_origin import Origin, make_ca_and_leaf
from .wsclient import output_of

REAL = "customsecret-0123abcd0123abcd"
PROXY: dict[str, Any] = {
    "enabled": True, "enableSocks5": True, "enableSocks5Udp": False, "allowUpstreamProxy": False,
    "dangerouslyAllowAllUnixSockets": False, "mode": "full", "allowLocalBinding": False,
    "domains": {"127.0.0.1": "allow", "localhost": "allow"}, "credentialMasking": True,
}

# The attacker: each case a list of raw writes to the proxy (one connection per case), with
# {A}, {B}, {T} the ports and {D} the dummy; it prints, per case, what came back (status
# lines only: an origin here never echoes a header). The cases run at once.
ATTACKER = r'''
import json, os, socket, ssl, sys, time
cases = json.loads(sys.argv[1])
host, port = os.environ["HTTP_PROXY"].rsplit("/", 1)[-1].rsplit(":", 1)
dummy = os.environ["MY_TOKEN"]
ports = json.loads(sys.argv[2])
def fill(text):
    return text.replace("{D}", dummy).replace("{A}", str(ports["A"])).replace(
        "{B}", str(ports["B"])).replace("{T}", str(ports["T"]))
result = {"dummy": dummy}
def play(name, case):
    sock = socket.create_connection((host, int(port)), timeout=10)
    got = b""
    try:
        for step in case:
            if step.startswith("TLS "):  # after a CONNECT's answer: TLS to the proxy's CA
                got += sock.recv(65536)
                context = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
                sock = context.wrap_socket(sock, server_hostname=step[4:])
                continue
            sock.sendall(fill(step).encode("latin-1"))
            time.sleep(0.3)
        sock.settimeout(1.5)  # an origin here keeps its connection: what came by then
        while True:
            data = sock.recv(65536)
            if not data:
                break
            got += data
    except (OSError, ssl.SSLError) as exc:
        got += f" [{type(exc).__name__}]".encode()
    finally:
        sock.close()
    result[name] = [line for line in got.decode("latin-1").split("\r\n")
                    if line.startswith("HTTP/") or "[" in line or "origin saw" in line]
# The cases at once, each on its own connection: each waits for what comes back.
import threading
threads = [threading.Thread(target=play, args=item) for item in cases.items()]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(result))
'''

GET = "GET {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {{D}}\r\n{extra}\r\n"


def get(target: str, host: str, extra: str = "") -> str:
    return GET.format(target=target, host=host, extra=extra)


CASES = {
    # The Host header names the bound origin, the target another.
    "host header": [get("http://127.0.0.1:{B}/api/x", "127.0.0.1:{A}")],
    # Absolute-form with user information that names the bound origin.
    "userinfo": [get("http://127.0.0.1:{A}@127.0.0.1:{B}/api/x", "127.0.0.1:{A}")],
    # One connection: first to the bound origin, then (kept alive) to the other.
    "keep-alive": [get("http://127.0.0.1:{A}/api/one", "127.0.0.1:{A}"),
                   get("http://127.0.0.1:{B}/api/two", "127.0.0.1:{B}")],
    # Both in one write (pipelined), the other origin second.
    "pipelined": [get("http://127.0.0.1:{A}/api/p1", "127.0.0.1:{A}")
                  + get("http://127.0.0.1:{B}/api/p2", "127.0.0.1:{B}")],
    # A request smuggled in the body of one to the bound origin (Content-Length and
    # Transfer-Encoding both): whatever the origin makes of it, it is the bound origin's.
    "smuggled": ["POST http://127.0.0.1:{A}/api/s HTTP/1.1\r\nHost: 127.0.0.1:{A}\r\n"
                 "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                 + get("http://127.0.0.1:{B}/api/smuggled", "127.0.0.1:{B}")],
    # Paths of the bound origin outside /api/.
    "dot segments": [get("http://127.0.0.1:{A}/api/../private", "127.0.0.1:{A}")],
    "encoded dots": [get("http://127.0.0.1:{A}/api/%2e%2e/private", "127.0.0.1:{A}")],
    "prefix only": [get("http://127.0.0.1:{A}/apiX", "127.0.0.1:{A}")],
    # A tunnel to the bound HTTPS origin, then requests inside naming the other origin.
    "tunnel host": ["CONNECT 127.0.0.1:{T} HTTP/1.1\r\nHost: 127.0.0.1:{T}\r\n\r\n",
                    "TLS 127.0.0.1",
                    get("/api/in-tunnel", "127.0.0.1:{B}")],
    "tunnel absolute": ["CONNECT 127.0.0.1:{T} HTTP/1.1\r\nHost: 127.0.0.1:{T}\r\n\r\n",
                        "TLS 127.0.0.1",
                        get("https://127.0.0.1:{B}/api/elsewhere", "127.0.0.1:{B}")],
    # A plain tunnel to the other origin: never intercepted, so the dummy goes as it is.
    "plain tunnel": ["CONNECT 127.0.0.1:{B} HTTP/1.1\r\nHost: 127.0.0.1:{B}\r\n\r\n",
                     get("/api/tunnelled", "127.0.0.1:{A}")],
}


@pytest.fixture(scope="module")
def origins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Origin, Origin, Origin,
                                                                        Path]]:
    where = tmp_path_factory.mktemp("origins")
    ca, leaf = make_ca_and_leaf(where, ["127.0.0.1"])
    bound, other, tls = Origin(("127.0.0.1", 0), None), Origin(("127.0.0.1", 0), None), \
        Origin(("127.0.0.1", 0), leaf)
    yield bound, other, tls, ca
    for origin in (bound, other, tls):
        origin.close()


def test_no_request_but_the_bound_origins_gets_the_real_value(
        origins: tuple[Origin, Origin, Origin, Path], tmp_path: Path) -> None:
    bound, other, tls, ca = origins
    for origin in (bound, other, tls):
        origin.seen.clear()
    attacker = tmp_path / "attacker.py"
    attacker.write_text(ATTACKER)
    ports = {"A": bound.port, "B": other.port, "T": tls.port}
    providers = {"mine": {"env": ["MY_TOKEN"], "patterns": ["^customsecret-[0-9a-f]+$"],
                          "url_prefixes": [f"http://127.0.0.1:{bound.port}/api/",
                                           f"https://127.0.0.1:{tls.port}/api/"],
                          "auth": ["bearer"]}}
    command = (f"{sys.executable} {attacker} "
               f"'{json.dumps(CASES)}' '{json.dumps(ports)}'")
    server = Server("asyncio", env={"SSL_CERT_FILE": str(ca)})
    try:
        client = server.client()
        reply = start(client, "attack", ["bash", "-c", command],
                      env={"PATH": os.environ["PATH"], "MY_TOKEN": REAL},
                      enforceManagedNetwork=True,
                      networkProxy={"proxy": dict(PROXY, credentialProviders=providers)})
        assert "result" in reply, reply
        out = output_of(client.events_until_closed("attack", timeout=120))
    finally:
        log = server.stop()
    said = out.get("stdout", b"").decode()
    assert said, out
    result = json.loads(said)
    dummy = result.pop("dummy")
    assert dummy != REAL and dummy.startswith("customsecret-")
    # Whatever each case got back, the real value reached no one but the bound origins, on
    # their /api/ paths, and never came back to the command or into the log.
    assert REAL not in said and REAL not in log
    for _, path, headers in other.seen:
        assert REAL not in json.dumps(headers), (path, headers, result)
    for origin in (bound, tls):
        for _, path, headers in origin.seen:
            if REAL in json.dumps(headers):
                assert path.startswith("/api/") and ".." not in path and "%2e" not in path, \
                    (path, result)
    # The sanity of the cases: the bound origin got its real value once, plain and in the
    # tunnel (else the attacks proved nothing).
    assert any(REAL in json.dumps(h) for _, p, h in bound.seen if p == "/api/one"), \
        (bound.seen, result)
    assert any(p == "/api/in-tunnel" and REAL in json.dumps(h) for _, p, h in tls.seen), \
        (tls.seen, result)
