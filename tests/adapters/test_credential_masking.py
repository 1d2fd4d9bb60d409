"""Credential masking, served: a ``bash -c`` command sees only dummies of its credentials, and
the proxy puts the real value back toward the credential's own destination, over TLS it opens
with a CA of its own; anywhere else a dummy stays a dummy.

Without a sandbox (the variables are advice, but masking is the same), against an HTTPS origin
on this machine's loopback that a test CA signed: the server trusts it through SSL_CERT_FILE
(as it would trust a real origin through the system's store), the command through the bundle
the proxy names. The sandboxed path, through a namespace, is in test_managed_proxy.py's world
(`test_masked_in_a_sandbox`).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import netns
from .conftest import ADAPTERS, Server, start, uri
from .masking_origin import Origin, make_ca_and_leaf
from .sandboxes import needs_bwrap, path_entry, profile
from .wsclient import Client, output_of

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")

REAL = "customsecret-0123abcd0123abcd"
GH_REAL = "ghp_" + "R" * 36
PROXY: dict[str, Any] = {
    "enabled": True, "enableSocks5": True, "enableSocks5Udp": True, "allowUpstreamProxy": True,
    "dangerouslyAllowAllUnixSockets": False, "mode": "full", "allowLocalBinding": False,
    "domains": {"127.0.0.1": "allow", "localhost": "allow"}, "credentialMasking": True,
}
ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
MINIMAL_READ = {"path": {"type": "special", "value": {"kind": "minimal"}}, "access": "read"}
TMP_WRITE = {"path": {"type": "special", "value": {"kind": "slash_tmp"}}, "access": "write"}
SANDBOX = profile("/tmp", [ROOT_READ, TMP_WRITE], network="enabled")
# curl through the proxy its environment names, trusting the CA bundle it names too; prints
# what the command saw, then what the origin answered.
SCRIPT = ('echo "token=$MY_TOKEN gh=$GH_TOKEN"; '
          'echo "bundle=$SSL_CERT_FILE $(grep -c BEGIN "$SSL_CERT_FILE")"; '
          'echo "marker=$CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS"; '
          'for url in {urls}; do curl -sS --max-time 10 '
          '-H "Authorization: Bearer $MY_TOKEN" "$url"; echo " [$?]"; done')


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Origin, Path]]:
    where = tmp_path_factory.mktemp("origin")
    ca, leaf = make_ca_and_leaf(where, ["127.0.0.1", "localhost"])
    served = Origin(("127.0.0.1", 0), leaf)
    yield served, ca
    served.close()


def provider(port: int) -> dict[str, Any]:
    return {"mine": {"env": ["MY_TOKEN"], "patterns": ["^customsecret-[0-9a-f]+$"],
                     "url_prefixes": [f"https://127.0.0.1:{port}/api/"], "auth": ["bearer"]}}


def run(server: Server, process_id: str, argv: list[str], env: dict[str, str],
        proxy: dict[str, Any]) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    client: Client = server.client()
    reply = start(client, process_id, argv, env={"PATH": os.environ["PATH"], **env},
                  enforceManagedNetwork=True, networkProxy={"proxy": proxy})
    events = client.events_until_closed(process_id, timeout=60)
    client.close()
    out = output_of(events)
    return reply, out.get("stdout", b"").decode() + out.get("stderr", b"").decode(), events


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_origin_sees_the_real_value_and_the_command_the_dummy(
        adapter: str, origin: tuple[Origin, Path]) -> None:
    served, ca = origin
    served.seen.clear()
    port = served.port
    urls = " ".join([f"https://127.0.0.1:{port}/api/one", f"https://127.0.0.1:{port}/other",
                     f"https://localhost:{port}/api/two"])
    server = Server(adapter, env={"SSL_CERT_FILE": str(ca)})
    try:
        reply, said, _ = run(server, "m", ["bash", "-c", SCRIPT.format(urls=urls)],
                             {"MY_TOKEN": REAL, "GH_TOKEN": GH_REAL},
                             dict(PROXY, credentialProviders=provider(port)))
    finally:
        log = server.stop()
    assert "result" in reply, reply
    lines = said.splitlines()
    token, gh = (part.split("=", 1)[1] for part in lines[0].split())
    assert token.startswith("customsecret-") and token != REAL, said
    assert gh.startswith("ghp_masked") and len(gh) == len(GH_REAL), said
    bundle, certificates = lines[1].split("=", 1)[1].split()
    assert Path(bundle).name.startswith("ca-bundle-") and int(certificates) >= 1, said
    marker = json.loads(lines[2].split("=", 1)[1])
    assert ["MY_TOKEN", token] in marker and ["@alias:GH_TOKEN", gh] in marker
    assert lines[3:] == ["origin saw /api/one [0]", "origin saw /other [0]",
                         "origin saw /api/two [0]"], said
    by_path = {path: headers.get("authorization") for _, path, headers in served.seen}
    assert by_path["/api/one"] == f"Bearer {REAL}"  # its destination: the real value
    assert by_path["/other"] == f"Bearer {token}"  # beside it: a dummy stays a dummy
    assert by_path["/api/two"] == f"Bearer {token}"  # another host: likewise
    for text in (said, log):
        assert REAL not in text and GH_REAL not in text


def test_a_command_that_is_not_bash_dash_c_keeps_its_values_but_trusts_the_ca(
        origin: tuple[Origin, Path]) -> None:
    served, ca = origin
    server = Server("asyncio", env={"SSL_CERT_FILE": str(ca)})
    try:
        _, said, _ = run(server, "s", ["sh", "-c", 'echo "$MY_TOKEN $SSL_CERT_FILE"'],
                         {"MY_TOKEN": REAL}, dict(PROXY, credentialProviders=provider(1)))
    finally:
        server.stop()
    value, bundle = said.split()
    assert value == REAL and "ca-bundle-" in bundle


def test_basic_auth_to_a_custom_header_provider_and_a_dropped_provider_is_logged(
        origin: tuple[Origin, Path]) -> None:
    served, ca = origin
    served.seen.clear()
    port = served.port
    providers = {
        "keyed": {"env": ["MY_TOKEN"], "patterns": ["^customsecret-[0-9a-f]+$"],
                  "url_prefixes": [f"https://127.0.0.1:{port}/"], "auth": ["header"],
                  "header": "X-Api-Key", "prefix": "Key "},
        "broken": {"env": ["OTHER"], "url_prefixes": ["https://x.test/"]},
    }
    script = (f'curl -sS --max-time 10 -H "X-Api-Key: Key $MY_TOKEN" '
              f'https://127.0.0.1:{port}/k; echo " [$?]"')
    server = Server("trio", env={"SSL_CERT_FILE": str(ca)})
    try:
        _, said, _ = run(server, "h", ["bash", "-c", script], {"MY_TOKEN": REAL},
                         dict(PROXY, credentialProviders=providers))
    finally:
        log = server.stop()
    assert said.strip() == "origin saw /k [0]", said
    assert served.seen[-1][2].get("x-api-key") == f"Key {REAL}"
    assert ("ignoring invalid credential provider provider=broken error=credential provider "
            "`broken` has no credential patterns") in log


def test_an_origin_the_server_cannot_verify_is_a_502_and_never_gets_the_value(
        origin: tuple[Origin, Path]) -> None:
    served, _ = origin
    served.seen.clear()
    port = served.port
    script = (f'curl -sS --max-time 10 -o /dev/null -w "%{{http_code}}" '
              f'-H "Authorization: Bearer $MY_TOKEN" https://127.0.0.1:{port}/api/x; echo')
    server = Server("asyncio")  # the system's store only: it knows nothing of the test's CA
    try:
        _, said, _ = run(server, "v", ["bash", "-c", script], {"MY_TOKEN": REAL},
                         dict(PROXY, credentialProviders=provider(port)))
    finally:
        server.stop()
    assert "502" in said, said
    assert not served.seen


def test_basic_credentials_in_a_url_are_put_back_too(origin: tuple[Origin, Path]) -> None:
    served, ca = origin
    served.seen.clear()
    port = served.port
    basic = {"mine": dict(provider(port)["mine"], auth=["basic"])}
    script = f'curl -sS --max-time 10 -u "x:$MY_TOKEN" https://127.0.0.1:{port}/api/b; echo'
    server = Server("threads", env={"SSL_CERT_FILE": str(ca)})
    try:
        _, said, _ = run(server, "b", ["bash", "-c", script], {"MY_TOKEN": REAL},
                         dict(PROXY, credentialProviders=basic))
    finally:
        server.stop()
    assert said.strip() == "origin saw /api/b", said
    scheme, encoded = served.seen[-1][2]["authorization"].split()
    assert scheme == "Basic" and base64.b64decode(encoded).decode() == f"x:{REAL}"


def test_a_redacted_trace_holds_no_real_value(origin: tuple[Origin, Path],
                                              tmp_path: Path) -> None:
    served, ca = origin
    trace = tmp_path / "trace.jsonl"
    server = Server("asyncio", "--trace", str(trace), "--trace-redact",
                    env={"SSL_CERT_FILE": str(ca)})
    try:
        _, said, _ = run(server, "t", ["bash", "-c", 'echo "$MY_TOKEN"'], {"MY_TOKEN": REAL},
                         dict(PROXY, credentialProviders=provider(served.port)))
    finally:
        log = server.stop()
    dummy = said.strip()
    assert dummy.startswith("customsecret-") and dummy != REAL
    text = trace.read_text()
    assert '"credentialMasking"' in text.replace(" ", "")  # the start is there, its env filler
    assert REAL not in text and dummy not in text and REAL not in log


@needs_bwrap
@pytest.mark.skipif(netns.problem() is not None, reason=netns.problem() or "")
def test_masked_in_a_sandbox(tmp_path: Path) -> None:
    """Sandboxed, the proxy is the command's only network: the origin (on a test host, by
    name) sees the real value, the command the dummy, another allowed host the dummy."""
    ca, leaf = make_ca_and_leaf(tmp_path, ["api.github.com", "other.test"])
    spaces = netns.Namespaces()
    address = "192.88.99.9"
    try:
        netns._ip("-n", spaces.host, "addr", "add", f"{address}/32", "dev", "veth1")
        served = spaces.inside(spaces.host, lambda: Origin((address, 443), leaf))
        hosts = tmp_path / "hosts"
        hosts.write_text(f"127.0.0.1 localhost\n{address} api.github.com other.test\n")
        prefix = (*spaces.prefix(), "unshare", "-m", "sh", "-c",
                  'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts))
        server = Server("asyncio", prefix=prefix, env={"SSL_CERT_FILE": str(ca)})
        try:
            client = spaces.inside(spaces.server, server.client)
            script = ('echo "$GH_TOKEN"; for h in api.github.com other.test; do '
                      'curl -sS --max-time 10 -H "Authorization: token $GH_TOKEN" '
                      'https://$h/user; echo " [$?]"; done')
            proxy = dict(PROXY, domains={"api.github.com": "allow", "other.test": "allow"})
            reply = start(client, "g", ["bash", "-c", script], sandbox=SANDBOX,
                          enforceManagedNetwork=True, networkProxy={"proxy": proxy},
                          env={"PATH": "/usr/bin:/bin", "GH_TOKEN": GH_REAL})
            out = output_of(client.events_until_closed("g", timeout=60))
            client.close()
        finally:
            log = server.stop()
            served.close()
    finally:
        spaces.remove()
    assert reply.get("result", {}).get("sandboxType") == "linuxSeccomp", reply
    said = out.get("stdout", b"").decode()
    dummy, *answers = said.splitlines()
    assert dummy.startswith("ghp_masked") and answers == [
        "origin saw /user [0]", "origin saw /user [0]"], (said, out)
    by_host = {host: headers.get("authorization") for host, _, headers in served.seen}
    assert by_host == {"api.github.com": f"token {GH_REAL}", "other.test": f"token {dummy}"}
    assert GH_REAL not in said and GH_REAL not in log


def test_a_socks5_connect_to_a_bound_host_is_opened_as_the_references_is(
        origin: tuple[Origin, Path]) -> None:
    """Through ALL_PROXY (socks5h://), as through the HTTP proxy: the reference opens a SOCKS5
    CONNECT to a host where a credential is bound (its log: "SOCKS MITM selected"), so the
    origin gets the real value there; a host where none is bound is relayed, untouched."""
    served, ca = origin
    served.seen.clear()
    port = served.port
    urls = [f"https://127.0.0.1:{port}/api/s", f"https://127.0.0.1:{port}/other",
            f"https://localhost:{port}/api/relayed"]
    script = "; ".join(f'curl -sS --max-time 10 --proxy "$ALL_PROXY" -H "Authorization: Bearer '
                       f'$MY_TOKEN" -w " %{{http_code}}\\n" {url} 2>&1' for url in urls)
    server = Server("asyncio", env={"SSL_CERT_FILE": str(ca)})
    try:
        _, said, _ = run(server, "k", ["bash", "-c", f'echo "$MY_TOKEN $ALL_PROXY"; {script}'],
                         {"MY_TOKEN": REAL}, dict(PROXY, credentialProviders=provider(port)))
    finally:
        log = server.stop()
    dummy, proxy = said.splitlines()[0].split()
    assert proxy.startswith("socks5h://127.0.0.1:") and dummy != REAL, said
    assert said.splitlines()[1:] == ["origin saw /api/s 200", "origin saw /other 200",
                                     "origin saw /api/relayed 200"], said
    by_path = {path: headers.get("authorization") for _, path, headers in served.seen}
    assert by_path == {"/api/s": f"Bearer {REAL}", "/other": f"Bearer {dummy}",
                       "/api/relayed": f"Bearer {dummy}"}
    assert REAL not in said and REAL not in log


def test_a_socks5_connect_to_an_origin_the_server_cannot_verify_gets_nothing(
        origin: tuple[Origin, Path]) -> None:
    """The reference's answer, as for a CONNECT (test_masking_trust.py compares the two)."""
    served, _ = origin
    served.seen.clear()
    port = served.port
    script = (f'curl -sS --max-time 10 --proxy "$ALL_PROXY" -H "Authorization: Bearer $MY_TOKEN"'
              f' https://127.0.0.1:{port}/api/x 2>&1; echo " [$?]"')
    server = Server("trio")  # the system's store only: it knows nothing of the test's CA
    try:
        _, said, _ = run(server, "u", ["bash", "-c", script], {"MY_TOKEN": REAL},
                         dict(PROXY, credentialProviders=provider(port)))
    finally:
        server.stop()
    assert said == "mitm upstream error [0]\n", said
    assert not served.seen


# Bash builtins only: the bundle's certificates counted, a file made beside it, a line
# appended to it (each status printed), and what the command's PATH-less world holds.
BUNDLE_CHECK = ('b="$SSL_CERT_FILE"; n=0; while read -r line; do [[ $line == *BEGIN* ]] && '
                'n=$((n+1)); done < "$b"; echo "certs=$n"; : > "${b%/*}/x"; echo "create=$?"; '
                'echo x >> "$b"; echo "append=$?"')


def bundle_check(tmp_path: Path, entries: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """BUNDLE_CHECK in a sandbox of ``entries`` (a writable ``work`` directory added), with
    the server's CA bundle under ``tmp_path/run`` (its XDG_RUNTIME_DIR); what it printed, and
    what that directory held meanwhile (its files' names)."""
    run_dir, work = tmp_path / "run", tmp_path / "work"
    run_dir.mkdir()
    work.mkdir()
    sandbox = profile(str(work), [*entries, path_entry(str(work), "write")], network="enabled")
    server = Server("asyncio", env={"XDG_RUNTIME_DIR": str(run_dir)})
    try:
        client = server.client()
        said = []
        for process_id, script in (("probe", "true"), ("check", BUNDLE_CHECK)):
            reply = start(client, process_id, ["bash", "-c", script], cwd=uri(str(work)),
                          env={"PATH": "/usr/bin:/bin"}, sandbox=sandbox,
                          enforceManagedNetwork=True, networkProxy={"proxy": PROXY})
            assert "result" in reply, reply
            out = output_of(client.events_until_closed(process_id, timeout=60))
            said.append(out.get("stdout", b"").decode() + out.get("stderr", b"").decode())
        client.close()
        held = _names(run_dir)
    finally:
        server.stop()
    if "execvp" in said[0]:
        pytest.skip(f"this sandbox cannot run bash here: {said[0].strip()}")
    return said[1], held


def _names(top: Path) -> list[str]:
    """What ``top`` holds, but the placeholders (`.agents`, ...) a finalize may be removing
    meanwhile: never walked into."""
    found = []
    for here, dirs, files in os.walk(top):
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        found += [os.path.relpath(os.path.join(here, name), top) for name in [*dirs, *files]]
    return sorted(found)


def readable(said: str) -> bool:
    """Whether the command counted certificates in the bundle (the system's roots and the CA)."""
    return said.startswith("certs=") and int(said.split()[0].split("=")[1]) >= 1


@needs_bwrap
def test_the_bundle_is_readable_never_writable_under_restricted_reads(tmp_path: Path) -> None:
    """Reads restricted to the system's directories (codex's `minimal`): the reference binds its
    bundle read-only into such a sandbox (its child counts the certificates; appending is a
    read-only file system), and so does execproto; the CA's key is in no file at all."""
    said, held = bundle_check(tmp_path, [MINIMAL_READ])
    assert readable(said) and said.splitlines()[1:3] == ["create=1", "append=1"], said
    assert "Read-only file system" in said, said
    directory, bundle = held
    assert bundle.startswith(f"{directory}/ca-bundle-") and bundle.endswith(".pem"), held


@needs_bwrap
def test_the_bundle_is_not_writable_beneath_a_writable_directory(tmp_path: Path) -> None:
    said, _ = bundle_check(tmp_path, [ROOT_READ, path_entry(str(tmp_path / "run"), "write")])
    assert readable(said) and said.splitlines()[1:3] == ["create=1", "append=1"], said


@needs_bwrap
def test_a_request_that_denies_the_bundles_directory_keeps_it_denied(tmp_path: Path) -> None:
    """As on the reference, whose child cannot read a bundle whose directory it was denied."""
    said, _ = bundle_check(tmp_path, [ROOT_READ, path_entry(str(tmp_path / "run"), "none")])
    assert said.splitlines()[0] == "certs=0" and "create=1" in said, said
