"""The server's own files (its token file, its trace, its TLS key) are out of every sandbox's
reach, and stay so when a rotation moves them.

A read-only profile grants reading `/`, so without this a sandboxed command could read the
bearer token and open a connection of its own, with no sandbox, as the server's user. The
files live in directories every user may read (under /var/tmp: the workspace-write profile
makes /tmp writable), so that only the sandbox stands between a command and them; the control
reads them without one. Rotations are done as their tools do them: a Kubernetes Secret volume
(a new timestamped directory, then ``..data`` swapped by renaming a new link over it) and a
link swapped to a new file in a directory that holds other things too.
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from certs import WHY_MISSING, Certs, make_certs

from .conftest import ADAPTERS, Server, start, uri
from .sandboxes import needs_bwrap, read_only, run, workspace_write
from .test_tls import TlsServer
from .wsclient import Client, output_of

pytestmark = needs_bwrap

TOKEN = "execproto-secret-token-4d1f"
OLD, NEW = "execproto-old-token-81c2", "execproto-new-token-5e07"
MODES = [read_only, workspace_write]


@pytest.fixture(scope="module", params=ADAPTERS)
def guarded(request: pytest.FixtureRequest) -> Iterator[tuple[Client, Path, Path]]:
    base = Path(tempfile.mkdtemp(prefix="execproto-secrets-", dir="/var/tmp"))
    base.chmod(0o755)
    token, trace = base / "token", base / "trace.jsonl"
    token.write_text(TOKEN + "\n")
    server = Server(request.param, "--auth-token-file", str(token), "--trace", str(trace))
    client = Client(server.url, headers=[("Authorization", f"Bearer {TOKEN}")])
    assert "result" in client.handshake()
    yield client, token, trace
    client.close()
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("mode", [read_only, workspace_write])
def test_no_sandboxed_process_reads_the_token_or_the_trace(
        guarded: tuple[Client, Path, Path], mode: object) -> None:
    client, token, trace = guarded
    sandbox = mode(str(token.parent))  # type: ignore[operator]
    ran = run(client, f"cat {token}; head -c 200 {trace}; echo done", sandbox)
    assert ran.sandbox_type == "linuxSeccomp" and "done" in ran.stdout, ran
    assert TOKEN not in ran.stdout and '"' not in ran.stdout, ran


def test_no_sandboxed_fs_call_reads_them(guarded: tuple[Client, Path, Path]) -> None:
    client, token, trace = guarded
    for path in (token, trace):
        reply = client.call("fs/readFile", {"path": uri(path),
                                            "sandbox": read_only(str(token.parent))})
        assert "error" in reply and "Permission denied" in reply["error"]["message"], reply


def test_the_control_without_a_sandbox_reads_them(guarded: tuple[Client, Path, Path]) -> None:
    client, token, trace = guarded
    ran = run(client, f"cat {token}; head -c 1 {trace}", None)
    assert TOKEN in ran.stdout and ran.stdout.endswith("{"), ran


# -- rotation ----------------------------------------------------------------------------------

def _base() -> Path:
    base = Path(tempfile.mkdtemp(prefix="execproto-secrets-", dir="/var/tmp"))
    base.chmod(0o755)
    (base / "work").mkdir()
    return base


def swap_link(link: Path, target: str) -> None:
    """Point ``link`` at ``target`` in one step: a new link renamed over it."""
    staged = link.with_name(link.name + "_tmp")
    staged.symlink_to(target)
    os.replace(staged, link)


def publish(volume: Path, stamp: str, files: dict[str, bytes]) -> Path:
    """A Kubernetes atomic writer's update of ``volume``: the files in a new timestamped
    directory, then ``..data`` swapped to it (the old directory is kept here, so that the
    test can try to read it too; the kubelet removes it)."""
    written = volume / stamp
    written.mkdir(parents=True)
    for name, data in files.items():
        (written / name).write_bytes(data)
        if not (volume / name).is_symlink():
            (volume / name).symlink_to(f"..data/{name}")
    swap_link(volume / "..data", stamp)
    return written


def taken(url: str, token: str, tls: ssl.SSLContext | None = None) -> Client:
    """A client of the server once it accepts ``token`` (and, over TLS, serves a certificate
    ``tls`` trusts): it re-reads its files on the next upgrade after they changed."""
    deadline = time.monotonic() + 20
    while True:
        try:
            client = Client(url, headers=[("Authorization", f"Bearer {token}")], tls=tls)
            if client.rejected is None:
                assert "result" in client.handshake()
                return client
        except (OSError, ssl.SSLError):
            pass
        assert time.monotonic() < deadline, f"the server never took the new token at {url}"
        time.sleep(0.1)


def _trusting(certs: Certs) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs.ca))


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A server whose token, certificate and key are in a Kubernetes Secret volume, after one
    update of the Secret that gave it a new token and a new certificate and key."""
    if WHY_MISSING:
        pytest.skip(WHY_MISSING)
    base = _base()
    secrets = base / "secrets"
    old_certs, new_certs = (make_certs(tmp_path_factory.mktemp(name)) for name in ("a", "b"))
    first = publish(secrets, "..2026_12_04_10_00_00.1", {
        "token": OLD.encode(), "tls.crt": old_certs.cert.read_bytes(),
        "tls.key": old_certs.key.read_bytes()})
    live = Certs(ca=old_certs.ca, cert=secrets / "tls.crt", key=secrets / "tls.key",
                 ca_key=old_certs.ca_key)
    server = TlsServer("asyncio", live, "--auth-token-file", str(secrets / "token"))
    taken(server.url, OLD, _trusting(old_certs)).close()
    second = publish(secrets, "..2026_12_04_11_00_00.2", {
        "token": NEW.encode(), "tls.crt": new_certs.cert.read_bytes(),
        "tls.key": new_certs.key.read_bytes()})
    client = taken(server.url, NEW, _trusting(new_certs))
    readable = [first / "token", second / "token", second / "tls.key", first / "tls.key",
                secrets / "token", secrets / "tls.key"]
    yield {"client": client, "paths": readable, "work": base / "work", "secrets": secrets,
           "current": second}
    client.close()
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def linked() -> Iterator[dict[str, Any]]:
    """A server whose token file is a link into a store of versions, swapped to a new one, in
    directories that hold other files too: they stay readable, the versions do not."""
    base = _base()
    conf, store = base / "conf", base / "store"
    conf.mkdir()
    (conf / "settings.toml").write_text("shared = true\n")
    for version, token in (("v1", OLD), ("v2", NEW)):
        (store / version).mkdir(parents=True)
        (store / version / "token").write_text(token + "\n")
        (store / version / "notes").write_text(f"{version} notes\n")
    (conf / "token").symlink_to("../store/v1/token")
    server = Server("asyncio", "--auth-token-file", str(conf / "token"))
    taken(server.url, OLD).close()
    swap_link(conf / "token", "../store/v2/token")
    client = taken(server.url, NEW)
    yield {"client": client, "paths": [store / "v1" / "token", store / "v2" / "token",
                                       conf / "token"],
           "work": base / "work", "others": [conf / "settings.toml", store / "v2" / "notes"]}
    client.close()
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


def _read_by(ran: Any) -> list[str]:
    return [what for what in (OLD, NEW, "PRIVATE KEY") if what in ran.stdout]


@pytest.mark.parametrize("layout", ["volume", "linked"])
@pytest.mark.parametrize("mode", MODES)
def test_no_sandboxed_process_reads_a_rotated_secret(
        layout: str, mode: Callable[[str], Any], request: pytest.FixtureRequest) -> None:
    setup = request.getfixturevalue(layout)
    paths = " ".join(str(path) for path in setup["paths"])
    ran = run(setup["client"], f"cat {paths}; echo done", mode(str(setup["work"])))
    assert ran.sandbox_type == "linuxSeccomp" and "done" in ran.stdout, ran
    assert _read_by(ran) == [], ran


@pytest.mark.parametrize("layout", ["volume", "linked"])
@pytest.mark.parametrize("mode", MODES)
def test_no_sandboxed_fs_call_reads_a_rotated_secret(
        layout: str, mode: Callable[[str], Any], request: pytest.FixtureRequest) -> None:
    setup = request.getfixturevalue(layout)
    for path in setup["paths"]:
        reply = setup["client"].call("fs/readFile", {"path": uri(path),
                                                     "sandbox": mode(str(setup["work"]))})
        assert "error" in reply and "Permission denied" in reply["error"]["message"], (path,
                                                                                        reply)


def test_a_sandbox_started_before_a_rotation_does_not_read_the_next_one(
        volume: dict[str, Any]) -> None:
    # The volume is denied whole: what an update writes into it later is out of the running
    # sandbox's view too, though its mounts were made before it existed.
    client, work, secrets = volume["client"], volume["work"], volume["secrets"]
    third = "..2026_12_04_12_00_00.3"
    script = (f"while [ ! -e go ]; do sleep 0.05; done; "
              f"cat {secrets}/{third}/token {secrets}/token; echo done")
    reply = start(client, "waits", ["sh", "-c", script], cwd=uri(work),
                  env={"PATH": "/usr/bin:/bin"}, sandbox=workspace_write(str(work)))
    assert "result" in reply, reply
    files = {path.name: path.read_bytes() for path in volume["current"].iterdir()}
    try:
        publish(secrets, third, {**files, "token": b"execproto-third-token"})
        (work / "go").touch()
        stdout = output_of(client.events_until_closed("waits")).get("stdout", b"")
    finally:
        publish(secrets, "..2026_12_04_13_00_00.4", files)  # as the other tests expect it
    assert b"done" in stdout and b"third" not in stdout, stdout


@pytest.mark.parametrize("layout", ["volume", "linked"])
def test_the_control_without_a_sandbox_reads_the_new_secrets(
        layout: str, request: pytest.FixtureRequest) -> None:
    setup = request.getfixturevalue(layout)
    paths = " ".join(str(path) for path in setup["paths"])
    ran = run(setup["client"], f"cat {paths}", None)
    assert _read_by(ran) == [OLD, NEW, "PRIVATE KEY"][: 3 if layout == "volume" else 2], ran


def test_a_directory_that_holds_other_files_stays_readable(linked: dict[str, Any]) -> None:
    others = " ".join(str(path) for path in linked["others"])
    ran = run(linked["client"], f"cat {others}", read_only(str(linked["work"])))
    assert ran.stdout == "shared = true\nv2 notes\n", ran
