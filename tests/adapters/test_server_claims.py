"""Claims of docs/serving.md about the server, each checked by its effect on a live server.

- TLS is 1.2 and later: a client held to TLS 1.1 fails its handshake, one held to 1.2 is
  served (also after a SIGHUP re-read of the certificate).
- Without pasta, a sandbox that asks for the network is refused, and the start-up log says so.
- A client's grant beneath the directory of the server's secrets (its token file's, denied
  whole) reopens nothing, for processes and fs calls alike.
- The wrappers the server finds on its PATH, a `--backend` module and the TLS certificate are
  read-only in every sandbox, root write included.
- Where no cgroup v2 hierarchy is writable (a server running as nobody), the server warns at
  start-up, and its processes get no cgroup of their own.
- A file in the current directory cannot shadow a module the server imports (it searches
  there last), though a `--backend` module there is found.
- A token file that becomes unreadable keeps the last token, with a warning.

The servers that need another user run as `nobody` through setpriv, as test_sandbox.py's do;
files such a server must reach live in directories under /var/tmp open to everyone.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from certs import WHY_MISSING, Certs, make_certs

from .conftest import ADAPTERS, Server, start, uri
from .sandboxes import IS_ROOT, needs_bwrap, path_entry, profile, run, workspace_write
from .wsclient import Client, output_of

SERVE = [sys.executable, "-m", "execproto.adapters", "serve"]
NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--")
ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
ROOT_WRITE = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "write"}
needs_openssl = pytest.mark.skipif(bool(WHY_MISSING), reason=WHY_MISSING)


class Serving:
    """``execproto serve`` (``command``) with any flags, environment and working directory;
    over TLS when ``tls`` (the client's context) is given."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
                 tls: ssl.SSLContext | None = None, listen: str = "ws://127.0.0.1:0",
                 command: list[str] = SERVE) -> None:
        self.tls = tls
        self.process = subprocess.Popen(
            [*command, "--listen", listen, "--drain-grace", "0", "--log-level", "info", *args],
            cwd=cwd, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith(listen.split("://")[0] + "://127.0.0.1:"):
            self.process.kill()
            raise AssertionError(f"printed {self.url!r}: {self.process.communicate()[1]}")
        self.port = int(self.url.rsplit(":", 1)[1])

    def client(self, **options: Any) -> Client:
        client = Client(self.url, tls=self.tls, **options)
        assert "result" in client.handshake()
        return client

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
            raise AssertionError(f"the server did not stop:\n{err}") from None
        assert "Traceback" not in err, err
        return err


def _before_listening(log: str, said: str) -> bool:
    """Whether ``said`` is in a line of ``log`` logged before the server listened."""
    return _before(log, said, " listening on ")


def _before(log: str, said: str, then: str) -> bool:
    """Whether ``said`` is in a line of ``log`` logged before the first that has ``then``."""
    lines = log.splitlines()
    at = next(i for i, line in enumerate(lines) if then in line)
    return any(said in line for line in lines[:at])


def _nobody_problem() -> str | None:
    if not IS_ROOT:
        return "needs root, to run the server as nobody"
    probe = subprocess.run([*NOBODY, sys.executable, "-c", "import execproto"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    said = (probe.stderr.strip().splitlines() or [""])[-1]
    return f"nobody cannot run execproto here (is the checkout private?): {said}"


def _open_dir(prefix: str) -> Path:
    """A new directory under /var/tmp that every user may enter (and nobody else may write)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if WHY_MISSING:
        pytest.skip(WHY_MISSING)
    return make_certs(tmp_path_factory.mktemp("tls"))


# -- 1. TLS 1.2 and later ------------------------------------------------------------------------

def _client_context(certs: Certs, version: ssl.TLSVersion) -> ssl.SSLContext:
    """A client that speaks ``version`` alone, trusting the test's CA; below 1.2 at security
    level 0, so that OpenSSL offers it at all."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSv1_1 is deprecated: the point
        context.minimum_version = version
        context.maximum_version = version
    if version < ssl.TLSVersion.TLSv1_2:
        context.set_ciphers("ALL:@SECLEVEL=0")
    context.load_verify_locations(str(certs.ca))
    return context


def _handshake(port: int, context: ssl.SSLContext) -> str:
    """The version a TLS handshake with 127.0.0.1:``port`` agreed on (raises if it fails)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return str(tls.version())


def _why_no_tls_1_1(certs: Certs) -> str | None:
    """Why this machine's OpenSSL cannot do a TLS 1.1 handshake at all (None: it can), tried
    against a server of our own that offers TLS 1.1 alone with the same certificate."""
    if not ssl.HAS_TLSv1_1:
        return f"{ssl.OPENSSL_VERSION} is built without TLS 1.1"
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        server.minimum_version = server.maximum_version = ssl.TLSVersion.TLSv1_1
    server.set_ciphers("ALL:@SECLEVEL=0")
    server.load_cert_chain(str(certs.cert), str(certs.key))
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        peer, _ = listener.accept()
        peer.settimeout(10)
        try:
            server.wrap_socket(peer, server_side=True).close()
        except (OSError, ssl.SSLError):
            peer.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        version = _handshake(listener.getsockname()[1],
                             _client_context(certs, ssl.TLSVersion.TLSv1_1))
    except (OSError, ssl.SSLError) as exc:
        return f"{ssl.OPENSSL_VERSION} cannot do a TLS 1.1 handshake here: {exc}"
    finally:
        thread.join(10)
        listener.close()
    if version != "TLSv1.1":
        return f"asked for TLS 1.1, {ssl.OPENSSL_VERSION} made {version}"
    return None


@needs_openssl
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_tls_1_1_client_fails_its_handshake_and_a_tls_1_2_one_is_served(
        certs: Certs, adapter: str) -> None:
    if (why := _why_no_tls_1_1(certs)) is not None:
        pytest.skip(why)
    old, tls12 = (_client_context(certs, v) for v in (ssl.TLSVersion.TLSv1_1,
                                                       ssl.TLSVersion.TLSv1_2))
    server = Serving("--adapter", adapter, "--tls-cert", str(certs.cert), "--tls-key",
                     str(certs.key), listen="wss://127.0.0.1:0", tls=tls12)
    try:
        with pytest.raises(ssl.SSLError) as refused:
            _handshake(server.port, old)
        assert refused.value.reason in ("TLSV1_ALERT_PROTOCOL_VERSION", "UNSUPPORTED_PROTOCOL"), (
            refused.value)
        assert _handshake(server.port, tls12) == "TLSv1.2"
        client = server.client()  # a websocket and a process over TLS 1.2
        assert "result" in start(client, "over-1.2", ["echo", "served"])
        assert output_of(client.events_until_closed("over-1.2"))["stdout"] == b"served\n"
        client.close()
        # The certificate read again (SIGHUP) is served with the same floor.
        server.process.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        with pytest.raises(ssl.SSLError):
            _handshake(server.port, old)
        assert _handshake(server.port, tls12) == "TLSv1.2"
    finally:
        log = server.stop()
    refusals = [line for line in log.splitlines() if "TLS handshake failed" in line]
    assert len(refusals) == 2, log
    assert all(" INFO execproto: " in line and "unsupported protocol" in line
               for line in refusals), log
    assert "TLS certificate and key were read again (SIGHUP)" in log, log


# -- 2. no pasta: a sandbox with the network is refused -----------------------------------------

@needs_bwrap
def test_without_pasta_a_sandbox_with_the_network_is_refused_and_the_log_says_so(
        tmp_path: Path) -> None:
    # The server's PATH holds what it runs around a sandboxed process, and no pasta: bwrap
    # (found on PATH), setpriv and setsid (the spawn's wrappers, found on PATH). The stage runs
    # on the server's own interpreter, and the cgroup watchdog finds setsid in /usr/bin.
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("bwrap", "setpriv", "setsid"):
        found = shutil.which(name)
        assert found is not None, name
        (tools / name).symlink_to(found)
    workspace = tmp_path / "work"
    workspace.mkdir()
    entries = [ROOT_READ, path_entry(str(workspace), "write")]
    server = Serving("--adapter", "asyncio", env={"PATH": str(tools)})
    try:
        client = server.client()
        asked = run(client, f"touch {workspace}/with-network",
                    profile(str(workspace), entries, network="enabled"))
        # The control: the same sandbox without the network runs, and writes its marker.
        control = run(client, f"touch {workspace}/without-network",
                      profile(str(workspace), entries))
        client.close()
    finally:
        log = server.stop()
    error = asked.reply.get("error", {})
    assert error.get("code") == -32602 and "pasta" in error.get("message", ""), asked
    assert not (workspace / "with-network").exists()
    assert control.sandbox_type == "linuxSeccomp" and control.exit_code == 0, control
    assert (workspace / "without-network").exists()
    # Said once the probe of bubblewrap has run (the start does not wait for it), with the
    # sandbox's line.
    assert _before(log, "WARNING execproto: the network cannot be given apart from the host's: "
                        "pasta (Debian's passt) is not installed", "INFO execproto: sandbox: "), log
    assert "a sandbox that asks for the network is refused (or give --host-network)" in log, log
    # bwrap as the file it is: the server runs no link a sandbox could turn.
    bwrap = os.path.realpath(tools / "bwrap")
    assert f"sandbox: bubblewrap ({bwrap}) with a seccomp filter; one allowed the network " \
           "is refused (no pasta)" in log, log
    assert "did not start (refused)" in log and "pasta" in log.split("did not start")[1], log


# -- 3. a grant beneath the secrets' directory -------------------------------------------------

TOKEN = "claims-secret-token-7c0e"


@needs_bwrap
def test_a_grant_beneath_the_secrets_directory_reopens_nothing() -> None:
    base = _open_dir("execproto-claims-")
    secrets, workspace = base / "secrets", base / "work"
    secrets.mkdir()
    workspace.mkdir()
    token = secrets / "token"
    token.write_text(TOKEN + "\n")
    link = workspace / "token-link"  # made by the host: a name for the token outside
    link.symlink_to(token)
    server = Serving("--adapter", "asyncio", "--auth-token-file", str(token))
    try:
        client = server.client(headers=[("Authorization", f"Bearer {TOKEN}")])
        for access in ("read", "write"):
            grants = [path_entry(str(path), access) for path in (secrets, token, link)]
            sandbox = profile(str(workspace), [ROOT_READ, *grants])
            ran = run(client, f"cat {token}; cat {link}; cat {secrets}/./token; ls -A {secrets}; "
                      f"echo planted >> {token}; touch {secrets}/new; echo done", sandbox,
                      cwd=str(workspace))
            assert ran.sandbox_type == "linuxSeccomp" and ran.stdout.endswith("done\n"), ran
            assert TOKEN not in ran.stdout + ran.stderr, (access, ran)
            assert "token" not in ran.stdout, (access, ran)  # not even listed
            for path in (token, link):
                reply = client.call("fs/readFile", {"path": uri(path), "sandbox": sandbox})
                assert "error" in reply and "Permission denied" in reply["error"]["message"], (
                    access, path, reply)
            listed = client.call("fs/readDirectory", {"path": uri(secrets), "sandbox": sandbox})
            assert "token" not in str(listed), (access, listed)
            wrote = client.call("fs/writeFile", {"path": uri(token), "dataBase64": "eA==",
                                                 "sandbox": sandbox})
            assert "error" in wrote, (access, wrote)
        # The control: the file is readable on the host, so what hid it was the sandbox (an
        # fs call without a sandbox is not confined, by design).
        plain = client.call("fs/readFile", {"path": uri(token)})
        assert base64.b64decode(plain["result"]["dataBase64"]) == (TOKEN + "\n").encode()
        client.close()
    finally:
        log = server.stop()
        shutil.rmtree(base, ignore_errors=True)
    assert "denied to every sandbox and fs call, whole, as the secrets' own: " \
           f"{secrets}" in log, log
    assert TOKEN not in log


# -- 4. the wrappers, a backend module and the certificate: read-only ---------------------------

SANDBOXING_BACKEND = """\
from execproto.adapters.backends import LocalBackend


def make():
    return LocalBackend()
"""
WRAPPERS = ("setpriv", "setsid", "bwrap", "pasta")


def _fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_ino


@needs_bwrap
@needs_openssl
@pytest.mark.parametrize("how", ["local", "backend"])
def test_wrappers_backend_module_and_certificate_are_read_only_under_root_write(
        certs: Certs, tmp_path: Path, how: str) -> None:
    tools = tmp_path / "bin"  # copies, found first on the server's PATH
    tools.mkdir()
    for name in WRAPPERS:
        found = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
        if found is None:
            pytest.skip(f"{name} is not installed")
        shutil.copy2(found, tools / name)
    # The certificate apart from its key: a directory holding the key is denied whole, which
    # would hide the certificate rather than show it read-only.
    (tmp_path / "certs").mkdir()
    (tmp_path / "keys").mkdir()
    cert, key = tmp_path / "certs" / "server.pem", tmp_path / "keys" / "server.key"
    shutil.copy(certs.cert, cert)
    shutil.copy(certs.key, key)
    operator = tmp_path / "operator"
    operator.mkdir()
    module = operator / "claimsbackend.py"
    module.write_text(SANDBOXING_BACKEND)
    workspace = tmp_path / "work"
    workspace.mkdir()
    held = [*(tools / name for name in WRAPPERS), cert]
    backend: tuple[str, ...] = ()
    if how == "backend":
        held.append(module)
        backend = ("--backend", "claimsbackend:make")
    before = {path: _fingerprint(path) for path in held}
    server = Serving("--adapter", "asyncio", "--tls-cert", str(cert), "--tls-key", str(key),
                     *backend, listen="wss://127.0.0.1:0", cwd=operator,
                     env={"PATH": f"{tools}:/usr/bin:/bin"},
                     tls=ssl.create_default_context(cafile=str(certs.ca)))
    try:
        client = server.client()
        sandbox = profile(str(workspace), [ROOT_WRITE])
        attacks = "; ".join(
            f"echo planted >> {path}; cp /bin/true {path}; mv {path} {path}.moved; rm -f {path}"
            for path in held)
        ran = run(client, f"{attacks}; head -c 27 {cert}; echo; echo free > {workspace}/free",
                  sandbox, cwd=str(workspace))
        assert ran.sandbox_type == "linuxSeccomp", ran
        assert ran.stdout == "-----BEGIN CERTIFICATE-----\n", ran  # seen, not hidden
        assert (workspace / "free").read_text() == "free\n"  # root write writes elsewhere
        for path in held:
            wrote = client.call("fs/writeFile", {"path": uri(path), "dataBase64": "eA==",
                                                 "sandbox": sandbox})
            assert "error" in wrote, (path, wrote)
        client.close()
    finally:
        log = server.stop()
    changed = [str(path) for path in held
               if not path.exists() or _fingerprint(path) != before[path]]
    assert changed == [], (changed, ran)
    assert not any(path.with_name(path.name + ".moved").exists() for path in held)
    if how == "local":  # the copy is the bubblewrap the server runs
        assert f"sandbox: bubblewrap ({tools}/bwrap)" in log, log
    else:
        assert "sandbox: as the backend claimsbackend:make does it" in log, log


# -- 5. no writable cgroup: a warning at start-up -------------------------------------------------

CGROUP_WARNING = ("a process's descendants that leave its process group are not tracked (")


def _cgroup_of_a_process(server: Server) -> str:
    client = server.client()
    assert "result" in start(client, "where", ["cat", "/proc/self/cgroup"])
    out = output_of(client.events_until_closed("where")).get("stdout", b"").decode()
    client.close()
    return next(line for line in out.splitlines() if line.startswith("0::"))


def test_a_server_with_no_writable_cgroup_warns_at_start_up() -> None:
    if (problem := _nobody_problem()) is not None:
        pytest.skip(problem)
    if "0::" not in Path("/proc/self/cgroup").read_text():
        pytest.skip("no cgroup v2 here")
    # The control: as root the hierarchy is writable, and a process gets a cgroup of its own.
    mine = Server("asyncio", "--log-level", "info")
    try:
        placed = _cgroup_of_a_process(mine)
    finally:
        log = mine.stop()
    if CGROUP_WARNING in log:
        pytest.skip(f"even root has no writable cgroup here: {log}")
    assert "/execproto-" in placed, placed
    nobodys = Server("asyncio", "--log-level", "info", prefix=NOBODY)
    try:
        unplaced = _cgroup_of_a_process(nobodys)
    finally:
        log = nobodys.stop()
    assert "/execproto-" not in unplaced, unplaced
    assert _before_listening(log, f"WARNING execproto: {CGROUP_WARNING}"), log
    assert ": a terminate, or a server killed, can leave them running" in log, log


# -- 7. the current directory, searched last -----------------------------------------------------

PLAIN_BACKEND = """\
from pathlib import Path

from execproto.adapters.backends import ExecSpec

Path({mark!r}).touch()  # found in the current directory: the control


class Plain:
    sandbox_type = "none"

    def prepare(self, request):
        return ExecSpec(argv=request.argv, env=request.env, cwd=request.cwd)

    def finalize(self, token, status, exit_code, timed_out):
        pass


def make():
    return Plain()
"""
# Modules the server imports after the backend is loaded (the event loop's, the websocket's,
# the metrics' at the first scrape: seen with an import hook in a backend module).
LATE = ("asyncio", "ssl", "heapq", "base64", "uuid", "hmac", "hashlib", "tomllib", "datetime",
        "h11", "wsproto", "prometheus_client", "gzip", "mimetypes", "calendar")
# A module planted in the current directory that leaves a mark, then hands over to the real
# one, so that the server goes on as if nothing happened.
QUIET_PLANT = """\
import os
import sys

open({mark!r}, "w").close()
_here = os.path.dirname(os.path.abspath(__file__))
_path = list(sys.path)
sys.path[:] = [entry for entry in sys.path if entry not in ("", ".", _here)]
del sys.modules[__name__]
import {name} as _real  # noqa: E402

sys.path[:] = _path
sys.modules[__name__] = _real
"""
SCRIPT = Path(sys.executable).parent / "execproto"
# How an operator starts the server: the installed script, or `python -m execproto` (the
# docs/serving.md: "the same command line"), which puts the current directory first on sys.path.
LAUNCHERS = {"script": [str(SCRIPT), "serve"],
             "python-m": [sys.executable, "-m", "execproto", "serve"]}


def _operator_dir(tmp_path: Path, planted: tuple[str, ...]) -> tuple[Path, Path]:
    operator, marks = tmp_path / "operator", tmp_path / "marks"
    operator.mkdir()
    marks.mkdir()
    (operator / "mybackend.py").write_text(PLAIN_BACKEND.format(mark=str(marks / "mybackend")))
    for name in planted:
        (operator / f"{name}.py").write_text(QUIET_PLANT.format(mark=str(marks / name),
                                                                name=name))
    return operator, marks


def _serve_a_process_and_a_scrape(server: Serving) -> None:
    client = server.client()
    assert "result" in start(client, "served", ["echo", "served"])
    assert output_of(client.events_until_closed("served"))["stdout"] == b"served\n"
    assert "result" in client.call("fs/readFile", {"path": uri("/etc/hostname")})
    client.close()
    with urllib.request.urlopen(server.url.replace("ws://", "http://") + "/metrics",
                                timeout=10) as scraped:
        assert scraped.status == 200 and b"exec_server_processes_started_total" in (
            scraped.read())


# `python -m` puts the current directory first on sys.path; the command line takes it off
# before it imports anything of its own, what it imports at start (json) and what later
# (LATE); what Python imported before is another matter: docs/serving.md says to use
# `python -P -m` or the script where others write the directory.
@pytest.mark.parametrize("planted", [LATE, ("json",)], ids=["imported-late", "at-start"])
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_a_file_in_the_current_directory_cannot_shadow_a_module_the_server_imports(
        tmp_path: Path, launcher: str, planted: tuple[str, ...]) -> None:
    if launcher == "script" and not SCRIPT.exists():
        pytest.skip(f"no installed script at {SCRIPT}")
    operator, marks = _operator_dir(tmp_path, planted)
    server = Serving("--adapter", "asyncio", "--backend", "mybackend:make", cwd=operator,
                     command=LAUNCHERS[launcher])
    try:
        _serve_a_process_and_a_scrape(server)
    finally:
        log = server.stop()
    # The backend module was found there (the control), nothing else was taken from there.
    assert sorted(path.name for path in marks.iterdir()) == ["mybackend"], log


# The backend's directory is on sys.path for its load only: what a sandbox plants there later
# (a module the server imports late) is never imported.
@needs_bwrap
def test_nothing_a_sandbox_writes_in_a_backend_servers_directory_runs_outside() -> None:
    if importlib.util.find_spec("snappy") is not None:
        pytest.skip("snappy is installed here: prometheus_client imports that one")
    workspace, outside = _open_dir("execproto-claims-ws-"), _open_dir("execproto-claims-out-")
    mark = outside / "ran-outside"
    (workspace / "sbbackend.py").write_text(SANDBOXING_BACKEND)
    server = Serving("--adapter", "asyncio", "--backend", "sbbackend:make", cwd=workspace)
    try:
        client = server.client()
        planted = f"open({str(mark)!r}, 'w').close()\n"
        ran = run(client, f"printf '%s' \"{planted}\" > snappy.py", workspace_write(str(workspace)),
                  cwd=str(workspace))
        assert ran.sandbox_type == "linuxSeccomp", ran
        client.close()
        with urllib.request.urlopen(server.url.replace("ws://", "http://") + "/metrics",
                                    timeout=10) as scraped:
            assert scraped.status == 200
    finally:
        server.stop()
        ran_outside = mark.exists()
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)
    assert ran.exit_code == 0, ran  # the workspace is the sandbox's to write: planted
    assert not ran_outside, "a module a sandbox planted ran outside it"


# -- 8. a token file that becomes unreadable ----------------------------------------------------

OLD_TOKEN, NEW_TOKEN = "claims-old-token-31d4", "claims-new-token-a9b2"
UNREADABLE = "could not be read again ([Errno 13] Permission denied"


def _accepted(server: Server, token: str) -> bool:
    client = Client(server.url, headers=[("Authorization", f"Bearer {token}")])
    try:
        return client.rejected is None and "result" in client.handshake()
    finally:
        client.close()


@pytest.fixture
def token_dir() -> Iterator[Path]:
    base = _open_dir("execproto-claims-token-")
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_a_token_file_that_becomes_unreadable_keeps_the_last_token(token_dir: Path) -> None:
    if (problem := _nobody_problem()) is not None:
        pytest.skip(problem)
    token = token_dir / "token"  # root's, readable by all: nobody reads it at the start
    token.write_text(OLD_TOKEN + "\n")
    token.chmod(0o644)
    server = Server("asyncio", "--log-level", "info", "--auth-token-file", str(token),
                    prefix=NOBODY)
    try:
        assert _accepted(server, OLD_TOKEN)
        token.chmod(0)  # now the server's user cannot read it
        tried = subprocess.run([*NOBODY, "cat", str(token)], capture_output=True, text=True)
        assert tried.returncode != 0 and "Permission denied" in tried.stderr, tried
        # Read again at SIGHUP: it cannot be, and the last token stays.
        server.process.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert _accepted(server, OLD_TOKEN) and not _accepted(server, "a-wrong-token")
        hup = server.process.poll() is None
        # Changed (rewritten in place) while unreadable: read again at the next upgrade, the
        # same.
        token.write_text(NEW_TOKEN + "\n")
        assert _accepted(server, OLD_TOKEN) and not _accepted(server, NEW_TOKEN)
        # The control: readable again, the file's token is taken.
        token.chmod(0o644)
        os.utime(token, ns=(time.time_ns(), time.time_ns() + 1000))  # a new stamp
        assert _accepted(server, NEW_TOKEN) and not _accepted(server, OLD_TOKEN)
    finally:
        log = server.stop()
    assert hup, log
    warnings_ = [line for line in log.splitlines()
                 if " WARNING " in line and UNREADABLE in line and "the last token stays" in line]
    assert len(warnings_) >= 2, log  # at SIGHUP, and at the upgrade after the rewrite
    assert "re-read (the file changed): the token changed" in log, log
    assert OLD_TOKEN not in log and NEW_TOKEN not in log  # never the token
